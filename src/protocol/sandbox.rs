//! The sandbox vocabulary of the task file, `hello` and the stats: what
//! the parent asks for and what the child could enforce. Applying it is
//! `crate::sandbox`'s job.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxMode {
    /// Enforce what the kernel can; say in one line what it cannot.
    #[default]
    Auto,
    /// Refuse to run where the whole policy cannot be enforced.
    Required,
    /// No sandbox.
    Off,
}

impl std::str::FromStr for SandboxMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        from_word(text, "a sandbox mode; use auto, required or off")
    }
}

/// What an agent and its commands may read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadScope {
    /// The workspace, the agent's own directory and its TMPDIR only (and
    /// `--allow-read`): for agents that need no programs of the system.
    Workspace,
    /// Those, and the system directories programs and builds need.
    #[default]
    System,
    /// Every file the user can read.
    All,
}

impl std::str::FromStr for ReadScope {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        from_word(text, "a read scope; use workspace, system or all")
    }
}

/// `text` as one of the words `T` is written as in the task file, or an
/// error that says it is not `what`.
fn from_word<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> Result<T, String> {
    serde_json::from_value(serde_json::Value::String(text.to_string()))
        .map_err(|_| format!("`{text}` is not {what}"))
}

/// The sandbox part of a task file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SandboxSettings {
    pub mode: SandboxMode,
    /// Leave TCP alone, for steps that need the network.
    pub allow_network: bool,
    pub read_scope: ReadScope,
    /// Directories (or files) readable whatever the scope: absolute, real
    /// paths.
    pub allow_read: Vec<std::path::PathBuf>,
}

/// What was enforced, for the agent's stats and the run's summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxReport {
    /// `fully_enforced`, `partially_enforced`, `not_enforced` or `off`.
    pub status: SandboxLevel,
    /// The Landlock ABI in use, when Landlock is available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abi: Option<u32>,
    /// Whether TCP bind and connect are denied.
    pub network_denied: bool,
    /// Whether the agent's commands cannot write the results directory
    /// (other agents' directories, the run's records) outside the agent's
    /// own directory.
    #[serde(default)]
    pub results_read_only: bool,
    /// What was not enforced, in words; empty when all of it was.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxLevel {
    Off,
    NotEnforced,
    PartiallyEnforced,
    FullyEnforced,
}

impl SandboxReport {
    /// Whether the file-system policy holds in full: what it takes to hand
    /// a Reviewer a shell that cannot change the workspace.
    pub fn fully_enforced(&self) -> bool {
        self.status == SandboxLevel::FullyEnforced
    }
}
