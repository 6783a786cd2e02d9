//! What serving one child takes and gives: the bounds it is served
//! within, what the parent knows of it before it starts, and its outcome.
//! `serve` runs the child; `served` keeps what it learns along the way.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::events::EventSink;
use crate::chat::AgentKey;
use crate::llm::ChatModel;
use crate::protocol::{
    AgentRole, AgentStats, AgentStatus, FinishReport, StopReason, VerdictReport,
};
use crate::record::AgentTimings;
use crate::signal::StopSignal;

#[derive(Debug, Clone)]
pub struct ServeLimits {
    pub timeout: Duration,
    /// No line from the child for this long, while no model request of its
    /// is pending, means it is hung.
    pub idle_timeout: Option<Duration>,
    pub kill_grace: Duration,
    pub line_cap: usize,
    /// The child must say `hello` within this long of its start (through
    /// a launcher, a queue may stand between).
    pub launch_timeout: Duration,
}

/// Everything about the child besides its command.
pub struct ChildRun<'a> {
    /// How the agent is named in events.
    pub name: &'a str,
    pub key: AgentKey,
    /// What the child was started as, which decides what it may report.
    pub role: AgentRole,
    /// The most model answers the child may ask for: its turn limit and
    /// the wrap-up after it.
    pub max_requests: u32,
    /// The tokens the child may spend (`--max-agent-tokens`): past them,
    /// three more answers for its wrap-up, and then it is stopped.
    pub max_tokens: Option<u64>,
    /// The millionths of a dollar it may spend (`--max-agent-cost`), held
    /// as its tokens are.
    pub max_cost_micros: Option<u64>,
    /// The built-in tools it may call, when its step's powers name them.
    pub tools: Option<Vec<String>>,
    /// The MCP servers troupe reaches for it that its task file offered
    /// it (its role's, or its step's powers').
    pub mcp_servers: Vec<String>,
    pub model: Arc<dyn ChatModel>,
    pub limits: ServeLimits,
    pub events: &'a dyn EventSink,
    /// The child's stderr log, quoted when it dies without a word.
    pub stderr_log: PathBuf,
    /// Stops the child from outside (the run's deadline): cancel, grace,
    /// kill, status `terminated`.
    pub stop: StopSignal,
    /// The launcher the child was started through, as the user wrote it.
    pub launcher: Option<String>,
    /// The MCP servers troupe reaches for the child (`mcp_call`).
    pub mcp: Option<std::sync::Arc<crate::mcp::remote::RemoteServers>>,
    /// The web troupe reads for the child (`web_call`), and what of it
    /// its task file offered.
    pub web: Option<(
        std::sync::Arc<crate::web::Web>,
        crate::protocol::task::WebAccess,
    )>,
    /// The agent's span, parent of its model requests' and tool calls'.
    pub span: crate::telemetry::Span,
    /// The child's pid, once it is started: the one process its broker
    /// answers.
    pub spawned: std::sync::Arc<std::sync::OnceLock<u32>>,
}

/// What the parent keeps of a worker's `finished`. Its counters are not
/// here: they went into the outcome's stats, with the parent's own count
/// of tokens and time in place of the child's.
#[derive(Debug, Clone)]
pub struct Finished {
    pub success: bool,
    pub summary: String,
    /// Bounded to `protocol::LISTED_FILES`, whatever the child sent.
    pub deliverables_files: Vec<String>,
    pub stop_reason: Option<StopReason>,
    /// The typed result, as the child gave it: checked by the run.
    pub result: Option<serde_json::Value>,
}

impl Finished {
    /// The report without its counters, and those counters.
    pub fn split(report: FinishReport) -> (Finished, AgentStats) {
        let FinishReport {
            success,
            summary,
            mut deliverables_files,
            stats,
            stop_reason,
            result,
        } = report;
        deliverables_files.truncate(crate::protocol::LISTED_FILES);
        let finished = Finished {
            success,
            summary,
            deliverables_files,
            stop_reason,
            result,
        };
        (finished, stats)
    }
}

#[derive(Debug, Clone)]
pub struct ChildOutcome {
    pub status: AgentStatus,
    pub finish: Option<Finished>,
    pub verdict: Option<VerdictReport>,
    /// Why the child did not end normally.
    pub error: Option<String>,
    /// The child's counters, with the runtime and tokens as the parent
    /// measured them (they hold even when the child was killed).
    pub stats: AgentStats,
    /// Tool calls that changed something (write_file, edit_file,
    /// run_command) and succeeded: the evidence behind a claim of success.
    pub changing_calls: u32,
    /// Where the time outside the agent's own work went.
    pub timings: AgentTimings,
    /// Why the parent stopped the child, when a limit of the child's own
    /// did (its token cap): the child's word on it does not count.
    pub stop_reason: Option<StopReason>,
}
