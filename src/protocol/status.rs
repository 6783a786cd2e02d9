//! How an agent ended, as its transcript and result object say it.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentStatus {
    /// Still working (only ever seen in a transcript being written).
    Running,
    /// Finished and said it succeeded.
    Completed,
    /// Finished and said it did not succeed, or stopped without finishing.
    Failed,
    /// Ran past its timeout and was stopped.
    Timeout,
    /// Sent nothing for longer than the idle timeout and was stopped.
    IdleTimeout,
    /// Stopped on request.
    Terminated,
    /// Its conversation outgrew the model's context, compaction done.
    ContextExhausted,
    /// Crashed, exited without a result, or broke the protocol.
    Error,
}

impl AgentStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentStatus::Running => "running",
            AgentStatus::Completed => "completed",
            AgentStatus::Failed => "failed",
            AgentStatus::Timeout => "timeout",
            AgentStatus::IdleTimeout => "idle_timeout",
            AgentStatus::Terminated => "terminated",
            AgentStatus::ContextExhausted => "context_exhausted",
            AgentStatus::Error => "error",
        }
    }
}

impl std::fmt::Display for AgentStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
