//! The wire between `troupe` and `troupe-agent`: message types, the task
//! file and what it carries (the sandbox settings, the MCP servers and
//! their tools, the durability mode), and the line framing with its size
//! cap. Types only, no I/O policy: both binaries use it, and a child
//! written in any language that speaks these lines can stand in for
//! `troupe-agent`. Calls `chat`, `text` and `timefmt`, nothing that does
//! the work these types describe (`mcp`, `fsutil`, `sandbox` use them).

pub mod codec;
pub mod durability;
pub mod mcp;
pub mod messages;
#[cfg(test)]
mod proptests;
pub mod sandbox;
pub mod status;
pub mod task;
pub mod trace;
pub mod verdict;

pub use codec::{DEFAULT_LINE_CAP, LineReader, ProtocolError, decode_line, encode_line};
pub use durability::DurabilityMode;
pub use mcp::{ListedTool, McpServer, ToolFilter, Transport, UnstartedServer};
pub use messages::{
    AgentId, AgentRole, AgentStats, CancelReason, FinishReport, FromChild, ModelFailure,
    PROTOCOL_VERSION, StopReason, ToChild, VerdictReport, round_seconds,
};
pub use sandbox::{
    LimitKind, LimitsReport, OverlayLayers, ReadScope, SandboxLevel, SandboxMode, SandboxReport,
    SandboxSettings, UpperLayer,
};
pub use status::AgentStatus;
pub use task::{
    AgentLimits, BROKER_SOCKET, LISTED_FILES, RESULTS_DIR, SUBAGENT_DIR, TaskFile, display_in,
};
pub use trace::{TRACEPARENT_ENV, TRACESTATE_ENV, TraceParent};
pub use verdict::{parse_verdict, verdict_schema};

/// Where a child started by troupe itself finds the pid of its parent, to
/// tell whether the parent died before the child could ask to be told.
pub const PARENT_PID_ENV: &str = "TROUPE_PARENT_PID";
