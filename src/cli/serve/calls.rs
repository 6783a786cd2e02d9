//! The tools' arguments, as the host sends them: one type per tool, its
//! JSON Schema made from the same type, and the error a call gets, which
//! names the field and says what to do.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

/// Why a call was not done. The host sees `message`; the server goes on.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// The host's to fix: a missing, mistyped or out-of-bounds argument,
    /// an unknown agent or run, an agent id in use.
    #[error("{0}")]
    Invalid(String),
    /// `--max-concurrent` agents run and the server has no `--queue`.
    #[error("{0}")]
    Busy(String),
    /// troupe could not do it: a file it could not write, a process it
    /// could not start.
    #[error("{0}")]
    Failed(String),
}

impl CallError {
    pub fn invalid(text: impl Into<String>) -> CallError {
        CallError::Invalid(text.into())
    }

    pub fn failed(error: impl std::fmt::Display) -> CallError {
        CallError::Failed(error.to_string())
    }
}

/// The arguments of `tool`, or an error that names what is wrong with
/// them in the tool's words.
pub fn parse<T: for<'de> Deserialize<'de>>(
    tool: &str,
    arguments: Option<serde_json::Map<String, Value>>,
) -> Result<T, CallError> {
    let value = Value::Object(arguments.unwrap_or_default());
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        match path.as_str() {
            "." => CallError::invalid(format!("{tool}: {inner}; see the tool's inputSchema")),
            field => CallError::invalid(format!(
                "{tool}: {field}: {inner}; see the tool's inputSchema"
            )),
        }
    })
}

/// An agent's number, as the seed numbers them.
pub type AgentNumber = u32;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateArgs {
    /// The sub-agent's number (1 or more), unique among the agents of the
    /// workspace; left out, the next free one.
    pub agent_id: Option<AgentNumber>,
    /// The task in a few words (at most 80 characters); it names the agent
    /// in status lists and notices.
    pub summary: String,
    /// The task in full: goal, requirements, deliverables, scope.
    pub task: String,
    /// Where the agent puts its deliverables and transcript, relative to
    /// the workspace; default sub_agent_results/agent_<agent_id>.
    pub deliverables_dir: Option<String>,
    /// Return at once with status "running"; a notice comes when the
    /// agent ends, and wait_sub_agents returns its result. Default false:
    /// the call returns when the agent ends, with its result.
    #[serde(default)]
    pub run_in_background: bool,
    /// Seconds before the agent is stopped, its partial results kept:
    /// 60 to 3600, and at most the server's --timeout (default 600).
    pub timeout_seconds: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusArgs {
    /// The agents to report; empty or left out, every agent of the
    /// workspace.
    #[serde(default)]
    pub agent_ids: Vec<AgentNumber>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WaitMode {
    /// Return as soon as one or more of them ended that no earlier wait
    /// of this session returned.
    #[default]
    Any,
    /// Return when every one of them ended.
    All,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitArgs {
    /// The agents to wait for; empty or left out, every agent this
    /// session started in the background.
    #[serde(default)]
    pub agent_ids: Vec<AgentNumber>,
    /// any (default) or all.
    #[serde(default)]
    pub mode: WaitMode,
    /// Seconds to wait at most (default 50, below the 60 s many hosts
    /// allow a tool call); then the call returns what ended so far and
    /// the ids still running.
    pub timeout_seconds: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TerminateArgs {
    /// The agent to stop; its partial results and transcript are kept.
    pub agent_id: AgentNumber,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunTeamArgs {
    /// The goal, in words: the Planner turns it into steps. Give this or
    /// plan.
    pub goal: Option<String>,
    /// A plan object ({"summary", "steps": [{"id", "description",
    /// "dependencies"}]}), validated as `troupe validate` does. Give this
    /// or goal.
    pub plan: Option<Value>,
    /// Return at once with the run id; a notice comes when the run ends,
    /// and get_run_status follows it.
    #[serde(default)]
    pub run_in_background: bool,
    /// Bring the completed run's result into the workspace (default: as
    /// the server's flags say; the server's --no-apply cannot be undone
    /// here).
    pub apply: Option<bool>,
    /// How the workers share the workspace: worktree (each attempt in a
    /// checkout of its own, merged on approval), auto, or shared; at
    /// least as isolated as the server's --isolation (default: the
    /// server's).
    pub isolation: Option<Isolation>,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    Shared,
    Auto,
    Worktree,
}

impl Isolation {
    pub fn of(mode: crate::record::IsolationMode) -> Isolation {
        match mode {
            crate::record::IsolationMode::Shared => Isolation::Shared,
            crate::record::IsolationMode::Auto => Isolation::Auto,
            crate::record::IsolationMode::Worktree => Isolation::Worktree,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::Shared => "shared",
            Isolation::Auto => "auto",
            Isolation::Worktree => "worktree",
        }
    }

    /// How much it keeps workers apart: shared, then auto, then worktree.
    fn rank(self) -> u8 {
        self as u8
    }

    /// Whether it keeps workers at least as far apart as `other`.
    pub fn at_least(self, other: Isolation) -> bool {
        self.rank() >= other.rank()
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunStatusArgs {
    /// The run's id (run_...), or "last" for the newest.
    pub run_id: String,
}

/// The JSON Schema of a tool's arguments, as an object MCP takes.
pub fn schema_of<T: JsonSchema>() -> serde_json::Map<String, Value> {
    let schema = schemars::schema_for!(T);
    match serde_json::to_value(schema) {
        Ok(Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    }
}

/// The tools, in the order a host lists them.
pub fn tools() -> Vec<Tool> {
    fn tool<T: JsonSchema>(name: &'static str, description: &'static str, read_only: bool) -> Tool {
        Tool::new(name, description, Arc::new(schema_of::<T>() as JsonObject))
            .with_annotations(ToolAnnotations::new().read_only(read_only))
    }
    vec![
        tool::<CreateArgs>(
            "create_sub_agent",
            "Start a sub-agent: its own sandboxed process, with its own directory and transcript, that works on one task and reports with finish_task. Blocking by default: returns its result (status, result_summary, deliverables_files, stats). With run_in_background it returns at once with status \"running\"; you are told when it ends (a notice, and a `notices` field on your next tool result), and wait_sub_agents returns its result. Use the background for long tasks or several independent ones at once; keep sub-agents' work from overlapping (different files and directories).",
            false,
        ),
        tool::<StatusArgs>(
            "get_sub_agent_status",
            "How sub-agents stand: status, runtime, files read, commands run, tokens, and last_action (what each is doing now).",
            true,
        ),
        tool::<WaitArgs>(
            "wait_sub_agents",
            "Wait for sub-agents started in the background. mode \"any\" returns as soon as one or more ended that no earlier wait returned (call it again in a loop until `running` is empty); \"all\" when every one ended. Returns their result objects (`ended`) and the ids still running; timeout_seconds (default 50) keeps the call under a host's tool timeout.",
            true,
        ),
        tool::<TerminateArgs>(
            "terminate_sub_agent",
            "Stop a sub-agent: it is cancelled, given a grace period, then killed; its partial results and transcript are kept.",
            false,
        ),
        tool::<RunTeamArgs>(
            "run_team",
            "Run a team: a Planner makes a plan of steps from the goal (or the plan given is validated), then each step gets a Worker and a Reviewer that checks the real result and sends it back until approved. Blocking by default: returns the run's record (each step's status, attempts, verdicts and results, and what was applied to the workspace). With run_in_background it returns the run id at once; you are told when it ends.",
            false,
        ),
        tool::<RunStatusArgs>(
            "get_run_status",
            "A team run's record: its status, and each step's status, attempts, verdicts and typed results (as `troupe show RUN --json`).",
            true,
        ),
    ]
}
