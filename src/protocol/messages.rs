//! The JSON-lines messages between a child and its parent.
//!
//! Every line is an object tagged by `"type"`. Unknown fields are ignored by
//! serde's default; unknown types decode to `Unknown` so that an older
//! parent can log and skip what a newer child sends.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::sandbox::SandboxReport;
use crate::chat::{Actor, Message, ToolSpec, Usage};

/// The protocol version a `hello` must carry.
pub const PROTOCOL_VERSION: u32 = 1;

/// What a child process is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentRole {
    Worker,
    Reviewer,
}

impl AgentRole {
    pub fn as_str(self) -> &'static str {
        self.actor().as_str()
    }

    /// Who the child is in the run's conversations.
    pub fn actor(self) -> Actor {
        match self {
            AgentRole::Worker => Actor::Worker,
            AgentRole::Reviewer => Actor::Reviewer,
        }
    }
}

impl std::fmt::Display for AgentRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A model failure the child can do something about.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelFailure {
    /// The conversation is too long for the model: compact it.
    ContextExceeded,
    /// Nothing to do but report it.
    #[default]
    #[serde(other)]
    Other,
}

impl ModelFailure {
    fn is_other(&self) -> bool {
        *self == ModelFailure::Other
    }
}

/// Why the parent cancels a child.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelReason {
    /// Its `--timeout` passed.
    Timeout,
    /// It sent nothing for `--idle-timeout`.
    IdleTimeout,
    /// The run or the user stopped it (deadline, Ctrl-C, `terminate`).
    Terminated,
    /// It did not say `hello` within `--launch-timeout`.
    LaunchTimeout,
    /// It broke the protocol.
    ProtocolError,
    /// A reason from a newer parent; a cancel all the same.
    #[serde(other)]
    Other,
}

impl CancelReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CancelReason::Timeout => "timeout",
            CancelReason::IdleTimeout => "idle_timeout",
            CancelReason::Terminated => "terminated",
            CancelReason::LaunchTimeout => "launch_timeout",
            CancelReason::ProtocolError => "protocol_error",
            CancelReason::Other => "cancelled",
        }
    }
}

/// An agent's name. The seed's agents are numbered (`"agent_id": 1`), a team
/// run's are not (`step_2/worker-1`), so a purely numeric id is written as a
/// JSON number and anything else as a string; both are read back.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AgentId(String);

impl AgentId {
    pub fn new(id: impl Into<String>) -> Self {
        AgentId(id.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn as_number(&self) -> Option<u64> {
        let digits = !self.0.is_empty() && self.0.bytes().all(|b| b.is_ascii_digit());
        if digits { self.0.parse().ok() } else { None }
    }
}

impl std::fmt::Display for AgentId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for AgentId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.as_number() {
            Some(n) => serializer.serialize_u64(n),
            None => serializer.serialize_str(&self.0),
        }
    }
}

impl<'de> Deserialize<'de> for AgentId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::String(s) => Ok(AgentId(s)),
            Value::Number(n) => Ok(AgentId(n.to_string())),
            other => Err(serde::de::Error::custom(format!(
                "agent_id must be a string or a number, not {other}"
            ))),
        }
    }
}

/// The seed's counters, plus tokens. Sent by the child as it goes and kept
/// in the transcript and the result object.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentStats {
    #[serde(default)]
    pub runtime_seconds: f64,
    #[serde(default)]
    pub files_read: u64,
    #[serde(default)]
    pub searches: u64,
    #[serde(default)]
    pub web_pages: u64,
    #[serde(default)]
    pub commands: u64,
    #[serde(default)]
    pub token_usage: Usage,
    /// Calls of MCP servers' tools.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mcp_calls: u64,
    /// The MCP servers it was given that did not start, with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_unstarted: Vec<super::UnstartedServer>,
    /// What the agent's sandbox enforced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxReport>,
    /// Milliseconds the agent spent writing its transcript (reported at
    /// the end; what durability costs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript_ms: Option<f64>,
    /// Milliseconds the agent waited for its model answers, from asking to
    /// holding the answer (reported at the end; the relay's cost is this
    /// less the endpoint's own time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_wait_ms: Option<f64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Seconds to two decimals, as `runtime_seconds` is written: precise
/// enough for people, short in JSON.
pub fn round_seconds(seconds: f64) -> f64 {
    (seconds * 100.0).round() / 100.0
}

/// Why a worker stopped, when it did not stop by its own `finish_task`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model called `finish_task`.
    FinishTask,
    /// The model kept answering without tools after every reminder.
    NoFinishTask,
    /// Three identical consecutive tool calls.
    Stagnation,
    TurnLimit,
    TokenLimit,
    /// It spent its `--max-agent-cost`.
    CostLimit,
    /// Its answers were cut at the output limit again and again.
    OutputLimit,
}

impl StopReason {
    pub fn describe(self) -> &'static str {
        match self {
            StopReason::FinishTask => "called finish_task",
            StopReason::NoFinishTask => "stopped without calling finish_task",
            StopReason::Stagnation => "repeated the same tool call three times",
            StopReason::TurnLimit => "reached its turn limit",
            StopReason::TokenLimit => "reached its token limit",
            StopReason::CostLimit => "reached its cost limit",
            StopReason::OutputLimit => "kept giving answers longer than its output limit",
        }
    }
}

/// child -> parent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromChild {
    /// First line a child writes; the parent refuses other protocol versions.
    Hello {
        protocol: u32,
        agent_id: AgentId,
        role: AgentRole,
        pid: u32,
        /// What the child's sandbox enforces.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sandbox: Option<SandboxReport>,
    },
    /// The child needs a completion; the parent answers with `llm_response`
    /// or `llm_error` carrying the same id.
    LlmRequest {
        id: u64,
        messages: Vec<Message>,
        #[serde(default)]
        tools: Vec<ToolSpec>,
        /// A JSON Schema the answer should follow (the reviewer's verdict).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        schema: Option<Value>,
    },
    /// A call of a tool of an MCP server the parent reaches for the child
    /// (a remote one, or one that needs the network); the parent answers
    /// with `mcp_result` carrying the same id.
    McpCall {
        id: u64,
        server: String,
        tool: String,
        #[serde(default)]
        arguments: Value,
    },
    /// A web tool's call (`web_fetch`, `web_search`), which troupe makes
    /// for the child under its rules; answered with `web_result`
    /// carrying the same id.
    WebCall {
        id: u64,
        tool: String,
        #[serde(default)]
        arguments: Value,
    },
    /// A tool is about to run (progress only).
    ToolCall {
        call_id: String,
        name: String,
        #[serde(default)]
        arguments: Value,
    },
    /// A tool has run (progress only).
    ToolResult {
        call_id: String,
        success: bool,
        #[serde(default)]
        summary: String,
        /// The call changed the workspace or ran something (write_file,
        /// edit_file, run_command): evidence of work behind a claim.
        #[serde(default)]
        changed: bool,
        /// The size of the output the model was given (progress only,
        /// for the call's span).
        #[serde(default, skip_serializing_if = "is_zero")]
        bytes: u64,
    },
    /// The counters so far; also sent as a heartbeat while tools run, which
    /// is what lets the parent tell a slow command from a hung child.
    Stats(AgentStats),
    /// A worker is done, by `finish_task` or by wrapping up.
    Finished(FinishReport),
    /// A reviewer's answer.
    Verdict(VerdictReport),
    /// The conversation was made smaller to fit the model's context
    /// (progress only): what was done, in words.
    Compacted { step: String },
    /// A system-level failure inside the child (not the model's mistake).
    Error {
        message: String,
        /// The failure is a conversation that no longer fits the model's
        /// context, compaction done.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        context_exhausted: bool,
    },
    /// A type this build does not know; logged and skipped.
    #[serde(other)]
    Unknown,
}

impl FromChild {
    /// A failure inside the child.
    pub fn error(message: impl Into<String>) -> Self {
        FromChild::Error {
            message: message.into(),
            context_exhausted: false,
        }
    }
}

/// The payload of `finished`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinishReport {
    pub success: bool,
    pub summary: String,
    /// Workspace-relative paths of the files the agent wrote or edited,
    /// and of every file in its deliverables directory.
    #[serde(default)]
    pub deliverables_files: Vec<String>,
    #[serde(default)]
    pub stats: AgentStats,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
    /// The `result` of a step with an `output_schema`, as the worker gave
    /// it to `finish_task`; unchecked until the parent checks it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
}

/// The payload of `verdict`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerdictReport {
    pub approved: bool,
    pub summary: String,
    #[serde(default)]
    pub issues: Vec<String>,
    #[serde(default)]
    pub suggestions: Vec<String>,
    /// `false` when the reviewer judges another attempt pointless.
    #[serde(default = "retry_by_default")]
    pub retry: bool,
}

fn retry_by_default() -> bool {
    true
}

/// parent -> child.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToChild {
    /// The completion for the `llm_request` with this id.
    LlmResponse {
        id: u64,
        message: Message,
        #[serde(default)]
        usage: Usage,
        /// The answer was cut at its length limit.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        truncated: bool,
    },
    /// The `llm_request` with this id failed after the parent's own retries.
    LlmError {
        id: u64,
        message: String,
        #[serde(default)]
        retryable: bool,
        /// What kind of failure, where the child can act on it.
        #[serde(default, skip_serializing_if = "ModelFailure::is_other")]
        kind: ModelFailure,
    },
    /// The answer to the `mcp_call` with this id: the server's result
    /// (`content`, `isError`, ...), or why there is none.
    McpResult {
        id: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The answer to the `web_call` with this id: what troupe fetched or
    /// found, its `text` framed for the model, or why there is none.
    WebResult {
        id: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// Flush the transcript and exit; the parent kills the process group
    /// after its grace period either way.
    Cancel { reason: CancelReason },
    /// A type this build does not know; ignored.
    #[serde(other)]
    Unknown,
}
