//! The task file: everything a child needs besides the pipe.
//!
//! The parent writes it to `<agent dir>/.subagent/task.json` and starts the
//! child with its path. It is part of the contract between the two
//! binaries, like the messages, so it lives here and neither side owns it;
//! so do the types it carries (`sandbox`, `mcp`, `durability`).

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::durability::DurabilityMode;
use super::mcp::{ListedTool, McpServer};
use super::messages::{AgentId, AgentRole, PROTOCOL_VERSION};
use super::sandbox::SandboxSettings;
use crate::chat::AgentKey;
use crate::prompts::Prompts;

/// The name of the directory inside an agent's directory that holds
/// troupe's own files (task, transcript, logs, spilled output).
pub const SUBAGENT_DIR: &str = ".subagent";

/// The socket in an agent's `.subagent/` through which troupe's broker
/// connects it to the hosts its step's `powers.network` names: the parent
/// listens there, the agent connects.
pub const BROKER_SOCKET: &str = "network.sock";

/// The directory in a workspace that holds every agent's directory and
/// every run's records.
pub const RESULTS_DIR: &str = "sub_agent_results";

/// The most files one agent's deliverables or one change list; the rest
/// are left out (a change's stat counts them).
pub const LISTED_FILES: usize = 1000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskFile {
    pub protocol: u32,
    pub agent_id: AgentId,
    pub role: AgentRole,
    /// The step this agent works on in a team run; `None` for `troupe
    /// spawn`, where the agent id stands in for it.
    #[serde(default)]
    pub step: Option<String>,
    /// 1-based attempt of the step.
    #[serde(default = "first_attempt")]
    pub attempt: u32,
    /// The one-line summary (the seed's 10-30 characters).
    pub summary: String,
    /// The full task description.
    pub task: String,
    /// Absolute path of the workspace the agent works in: the shared one,
    /// or with `--isolation worktree` its step attempt's checkout.
    pub workspace: PathBuf,
    /// The results directory when it is not in `workspace` (the run's
    /// workspace's, for an agent working in a checkout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub results: Option<PathBuf>,
    /// Absolute path of the agent's own directory (its deliverables dir).
    pub agent_dir: PathBuf,
    pub conversation_id: String,
    pub timeout_seconds: u64,
    /// The prompt overrides troupe read as it started; prompts missing
    /// there are the built-in ones.
    #[serde(default, skip_serializing_if = "Prompts::is_empty")]
    pub prompts: Prompts,
    #[serde(default)]
    pub limits: AgentLimits,
    #[serde(default)]
    pub sandbox: SandboxSettings,
    /// The MCP servers whose tools the agent gets; it starts them itself,
    /// inside its sandbox.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp: Vec<McpServer>,
    /// The tools of the MCP servers the parent reaches for the agent,
    /// which it calls with `mcp_call`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_remote: Vec<ListedTool>,
    /// When the agent flushes its records to the disk (`--durability`).
    #[serde(default)]
    pub durability: DurabilityMode,
    /// A worker's step's `output_schema`: its `finish_task` then takes a
    /// `result` of that shape, which the parent checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
    /// The built-in tools it has, when its step's powers name them
    /// (`finish_task` always stays); every tool of its role without.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// The `host:port`s its step's powers let it reach, through troupe's
    /// broker (`supervisor::broker`); it has no network of its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_hosts: Vec<String>,
    /// The web tools troupe answers for it, and the hosts it may fetch
    /// from; none unless the run allows the web.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web: Option<WebAccess>,
    #[serde(with = "crate::timefmt::rfc3339")]
    pub created_at: DateTime<Utc>,
}

/// What of the web troupe reads for an agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebAccess {
    /// `web_fetch` (when any host is allowed) and `web_search` (when the
    /// run has a search backend).
    pub tools: Vec<String>,
    pub rules: crate::web::rules::HostRules,
}

impl TaskFile {
    pub fn new(
        agent_id: AgentId,
        role: AgentRole,
        summary: String,
        task: String,
        workspace: PathBuf,
        agent_dir: PathBuf,
    ) -> Self {
        let created_at = Utc::now();
        let conversation_id = format!(
            "conv_{}_{}",
            agent_id.as_str().replace(['/', ' '], "_"),
            created_at.format("%Y%m%dT%H%M%S%3fZ")
        );
        TaskFile {
            protocol: PROTOCOL_VERSION,
            agent_id,
            role,
            step: None,
            attempt: 1,
            summary,
            task,
            workspace,
            results: None,
            agent_dir,
            conversation_id,
            timeout_seconds: 600,
            prompts: Prompts::default(),
            limits: AgentLimits::default(),
            sandbox: SandboxSettings::default(),
            mcp: Vec::new(),
            mcp_remote: Vec::new(),
            durability: DurabilityMode::default(),
            output_schema: None,
            tools: None,
            network_hosts: Vec::new(),
            web: None,
            created_at,
        }
    }

    /// The step the scripted model matches on: the step id, or the agent
    /// id for a stand-alone agent.
    pub fn step_key(&self) -> String {
        self.step
            .clone()
            .unwrap_or_else(|| self.agent_id.to_string())
    }

    /// The workspace's results directory, where this agent's directory
    /// usually lies, beside other agents' and the runs' records.
    pub fn results_dir(&self) -> PathBuf {
        match &self.results {
            Some(results) => results.clone(),
            None => self.workspace.join(RESULTS_DIR),
        }
    }

    /// Which agent this is, for the model it asks.
    pub fn agent_key(&self) -> AgentKey {
        AgentKey {
            role: self.role.actor(),
            step: Some(self.step_key()),
            attempt: Some(self.attempt),
        }
    }

    pub fn subagent_dir(&self) -> PathBuf {
        self.agent_dir.join(SUBAGENT_DIR)
    }

    /// The agent's private temporary directory, its TMPDIR, which the
    /// agent makes on its first command.
    pub fn tmp_dir(&self) -> PathBuf {
        self.subagent_dir().join("tmp")
    }

    pub fn transcript_path(&self) -> PathBuf {
        self.subagent_dir().join("conversations.json")
    }

    /// The agent directory as the model and the result object show it:
    /// relative to the workspace when it lies inside.
    pub fn agent_dir_display(&self) -> String {
        display_in(&self.workspace, &self.agent_dir)
    }
}

fn first_attempt() -> u32 {
    1
}

/// `path` relative to `root` when it lies inside, else as it is.
pub fn display_in(root: &Path, path: &Path) -> String {
    match path.strip_prefix(root) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

/// Bounds on one agent's loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentLimits {
    /// Model turns before the agent must wrap up.
    pub max_turns: u32,
    /// Total tokens before the agent must wrap up; `None` for no limit.
    pub max_tokens: Option<u64>,
    /// Millionths of a dollar before the agent must wrap up
    /// (`--max-agent-cost`); `None` for no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_cost_micros: Option<u64>,
    /// Default timeout of one `run_command`, which the model may lower or
    /// raise up to `max_command_timeout_seconds`.
    pub command_timeout_seconds: u64,
    pub max_command_timeout_seconds: u64,
    /// The largest file a command may write (its RLIMIT_FSIZE), and that
    /// write_file, edit_file and spilled output may make; `None` for no
    /// limit.
    pub max_file_size: Option<u64>,
    /// The CPU seconds a command may use (its RLIMIT_CPU); `None` for no
    /// limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_command_cpu: Option<u64>,
    /// Tool output longer than this is cut in the conversation and spilled
    /// whole to a file in `.subagent/outputs/`.
    pub output_cap_bytes: usize,
    /// How often the child sends `stats` while it works.
    pub heartbeat_seconds: u64,
    /// Tokens the model's context holds, when known: the conversation is
    /// compacted before it outgrows them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u32>,
    /// The longest answer the parent asks the model for, in tokens: room
    /// the context must keep free, and what a cut answer is told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
}

impl AgentLimits {
    /// The model requests an agent may make: three for each turn and the
    /// wrap-up, so that a turn may be redone after an answer cut off at
    /// the output limit, or compacted to fit the context, and no more.
    /// The child keeps to it and the parent enforces it.
    pub fn max_requests(&self) -> u32 {
        self.max_turns.saturating_add(1).saturating_mul(3)
    }
}

impl Default for AgentLimits {
    fn default() -> Self {
        AgentLimits {
            max_turns: 50,
            max_tokens: None,
            max_cost_micros: None,
            command_timeout_seconds: 120,
            max_command_timeout_seconds: 3600,
            max_file_size: None,
            max_command_cpu: None,
            output_cap_bytes: 20_000,
            heartbeat_seconds: 10,
            context_window: None,
            max_output_tokens: None,
        }
    }
}
