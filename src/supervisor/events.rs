//! What the parent sees an agent do, for whoever watches: the human
//! progress lines on stderr now, a JSON event stream later.

use std::time::Duration;

use serde_json::Value;

use crate::chat::Usage;
use crate::llm::Delay;
use crate::protocol::{AgentStats, AgentStatus, SandboxReport};

#[derive(Debug, Clone)]
pub enum AgentEvent<'a> {
    Started {
        pid: u32,
    },
    /// The child's counters, as it reported them.
    Stats {
        stats: &'a AgentStats,
    },
    /// What the child's sandbox enforces, from its `hello`.
    Sandbox {
        report: &'a SandboxReport,
    },
    /// The parent sent a model request of the child on to the model.
    ModelAsked {
        turn: u32,
    },
    /// The parent answered a model request.
    ModelTurn {
        turn: u32,
        tool_calls: usize,
        usage: Usage,
        elapsed: Duration,
    },
    ModelError {
        message: &'a str,
    },
    /// A model request failed and is tried again, or waits for the
    /// endpoint's rate limits.
    ModelDelayed {
        delay: &'a Delay,
    },
    /// The child made its conversation smaller for the model's context.
    Compacted {
        step: &'a str,
    },
    ToolCall {
        name: &'a str,
        arguments: &'a Value,
    },
    ToolResult {
        name: &'a str,
        success: bool,
        summary: &'a str,
    },
    /// The parent is stopping the child (timeout, idle, protocol error).
    Stopping {
        reason: &'a str,
    },
    /// A line the parent could not use, or another oddity worth a line.
    Warning {
        message: &'a str,
    },
    Ended {
        status: AgentStatus,
        runtime: Duration,
        detail: &'a str,
    },
}

pub trait EventSink: Send + Sync {
    fn event(&self, agent: &str, event: AgentEvent<'_>);
}
