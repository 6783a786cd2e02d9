//! What `run.json` keeps of a run's isolation (its mode, its repository
//! and branch) and of each attempt's change (see `run::isolation` for how
//! they are made).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// How a run's workers share the workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum IsolationMode {
    /// Every worker writes the workspace itself.
    Shared,
    /// Every attempt in a checkout of its own, merged on approval.
    Worktree,
    /// `worktree` when more than one step can run at once, else `shared`.
    #[default]
    Auto,
}

impl IsolationMode {
    pub fn as_str(self) -> &'static str {
        match self {
            IsolationMode::Shared => "shared",
            IsolationMode::Worktree => "worktree",
            IsolationMode::Auto => "auto",
        }
    }

    /// The mode a run uses, given the most steps its plan can run at once
    /// (within `--max-parallel`).
    pub fn resolve(self, at_once: usize) -> IsolationMode {
        match self {
            IsolationMode::Auto if at_once > 1 => IsolationMode::Worktree,
            IsolationMode::Auto => IsolationMode::Shared,
            mode => mode,
        }
    }
}

/// What `run.json` keeps of a run's isolation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IsolationRecord {
    /// The repository: the workspace's own git directory, or troupe's
    /// private one in the run directory.
    pub git_dir: PathBuf,
    /// Whether the repository is troupe's own (the workspace is not the top
    /// of a git repository).
    pub private: bool,
    /// The integration branch, `troupe/<run_id>`.
    pub branch: String,
    /// The workspace as the run found it.
    pub snapshot: String,
}

/// What an attempt changed, and what became of it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeRecord {
    /// The integration head the attempt's checkout was made from.
    pub base: String,
    /// The checkout, relative to the workspace.
    pub checkout: String,
    /// The attempt's change as a commit on `base`; none when it changed
    /// nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// `git diff --stat` of the change.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stat: String,
    /// The paths it changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// The whole diff, relative to the workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// The integration head once the change landed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge: Option<String>,
    /// The paths that conflicted with what landed meanwhile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<String>,
    /// Why troupe will not land it, path by path (see `admit`); a change
    /// with one is sent back, never landed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<String>,
    /// The change's tree, for the head a fast-forward makes.
    #[serde(skip)]
    pub(crate) tree: String,
}
