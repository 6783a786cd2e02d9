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
    /// Paths inside what the agent may write that it and its commands may
    /// only read: the user's repository and troupe's own configuration in
    /// the workspace. Those that do not exist are left alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_only: Vec<std::path::PathBuf>,
    /// Files the agent sees empty: a repository's `config`, which may hold
    /// a token, for agents that read the repository.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden: Vec<std::path::PathBuf>,
    /// The memory the agent and everything it starts may use, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory: Option<u64>,
    /// The processes the agent and everything it starts may have at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_processes: Option<u64>,
    /// Variables the agent has only for the MCP servers it starts, which
    /// its commands do not get.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_only_env: Vec<String>,
    /// What a worker may write of its workspace, when its step's powers
    /// say (absolute paths inside it); the whole workspace without.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write: Option<Vec<std::path::PathBuf>>,
    /// The layers of a copy-on-write checkout mounted at the workspace, in
    /// the agent's mount namespace only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlay: Option<OverlayLayers>,
}

/// An overlay at an agent's workspace: read-only trees, and the attempt's
/// own layer on top that takes every write, unless the whole is mounted
/// `read_only` (a reviewer's view of the attempt).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverlayLayers {
    /// The read-only layers, topmost first.
    pub lower: Vec<std::path::PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upper: Option<UpperLayer>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
}

/// The layer that takes an attempt's writes, and the overlay's own work
/// directory beside it (on the same file system).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpperLayer {
    pub dir: std::path::PathBuf,
    pub work: std::path::PathBuf,
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
    /// Whether the agent's commands cannot write its `.subagent/` (troupe's
    /// records of it, and the agent's own transcript).
    #[serde(default)]
    pub records_read_only: bool,
    /// Whether the workspace's `.git`, `troupe.toml` and `.troupe/` are
    /// read-only to the agent and its commands.
    #[serde(default)]
    pub repository_read_only: bool,
    /// Whether the workspace is a copy-on-write overlay (an isolated
    /// attempt's checkout).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub overlay: bool,
    /// The namespaces the agent is the sole user of: `user`, `mount`,
    /// `pid` (what it starts dies with it and sees no other process),
    /// `network` (its own loopback only), `ipc`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Whether the host's socket directories (`/run`, `/tmp`, home
    /// directories, ...) are empty to the agent, so that no Unix socket of
    /// another program is reachable by its path.
    #[serde(default)]
    pub host_sockets_masked: bool,
    /// Whether the agent's system calls are filtered (no new user
    /// namespaces, ptrace, keyctl, bpf, perf_event_open, userfaultfd,
    /// io_uring; no socket but a Unix one where there is no network
    /// namespace to deny the network).
    #[serde(default)]
    pub seccomp: bool,
    /// Whether Landlock keeps the agent's commands from signalling
    /// processes outside it and from reaching abstract Unix sockets
    /// (Landlock ABI 6).
    #[serde(default)]
    pub scoped: bool,
    /// The uid the agent runs as on the host, when troupe runs as root
    /// and gave it an unprivileged one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// The bounds on the agent's memory and processes, and how they hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsReport>,
    /// What was not enforced, in words; empty when all of it was.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// How an agent's memory and processes are bounded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitsReport {
    /// Bytes of memory, when bounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    /// Processes at once, when bounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<u64>,
    /// `cgroup`: the agent's own control group bounds the whole agent;
    /// `rlimit`: resource limits bound each process (memory) or the
    /// agent's user namespace (processes).
    pub by: LimitKind,
    /// What the memory bound counts, and what it does not, in words.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub counts: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    Cgroup,
    Rlimit,
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
    /// A report of `status` that claims nothing else yet.
    pub fn new(status: SandboxLevel, abi: Option<u32>) -> Self {
        SandboxReport {
            status,
            abi,
            network_denied: false,
            results_read_only: false,
            records_read_only: false,
            repository_read_only: false,
            overlay: false,
            namespaces: Vec::new(),
            host_sockets_masked: false,
            seccomp: false,
            scoped: false,
            uid: None,
            limits: None,
            note: String::new(),
        }
    }

    /// Whether the file-system policy holds in full: what it takes to hand
    /// a Reviewer a shell that cannot change the workspace.
    pub fn fully_enforced(&self) -> bool {
        self.status == SandboxLevel::FullyEnforced
    }
}
