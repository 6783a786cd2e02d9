//! What `run.json` keeps of the parent's check of a worker's claims
//! (made by `run::claims`).

use serde::{Deserialize, Serialize};

/// The worker's claims against the disk and the attempt's change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    pub success_claimed: bool,
    /// The deliverables the worker listed, workspace-relative.
    pub listed: Vec<String>,
    /// Those of them that are not on disk.
    pub missing: Vec<String>,
    /// Successful calls that changed the workspace or ran something.
    pub changing_calls: u32,
    /// With `--isolation worktree`: the paths the attempt's diff changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed: Option<Vec<String>>,
    /// Listed files that are there but that the attempt did not change.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unchanged: Vec<String>,
    /// Success claimed with nothing to show for it.
    pub suspicious: bool,
}
