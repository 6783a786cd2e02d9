//! The result object of one agent, in the seed's blocking-mode shape, as
//! `troupe spawn` prints it and `.subagent/result.json` keeps it.

use serde::{Deserialize, Serialize};

use super::child::ChildOutcome;
use crate::protocol::{
    AgentId, AgentStats, AgentStatus, StopReason, TaskFile, VerdictReport, display_in,
};
use crate::record::AgentTimings;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentResult {
    pub success: bool,
    pub agent_id: AgentId,
    pub status: AgentStatus,
    pub summary: String,
    pub message: String,
    /// Workspace-relative, like every path in this object.
    pub deliverables_dir: String,
    pub deliverables_files: Vec<String>,
    pub result_summary: String,
    pub sub_conversation_id: String,
    pub stats: AgentStats,
    /// The transcript, `<deliverables_dir>/.subagent/conversations.json`.
    pub transcript: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A worker's typed result, as it gave it to `finish_task`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// A worker's own word in `finish_task` that it succeeded, which
    /// troupe checks against what it changed (`changing_calls`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub success_claimed: bool,
    /// Tool calls that changed something and succeeded (`write_file`,
    /// `edit_file`, `run_command`, ...).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub changing_calls: u32,
    /// A reviewer's verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<VerdictReport>,
    /// Where troupe's own time went (milliseconds).
    #[serde(default)]
    pub timings: AgentTimings,
}

impl AgentResult {
    /// `fallback_files` lists the deliverables when the child never
    /// reported them (it timed out or died).
    pub fn new(task: &TaskFile, outcome: &ChildOutcome, fallback_files: Vec<String>) -> Self {
        let dir = task.agent_dir_display();
        let id = &task.agent_id;
        let secs = outcome.stats.runtime_seconds;
        let stop_reason = outcome
            .stop_reason
            .or_else(|| outcome.finish.as_ref().and_then(|f| f.stop_reason));
        let error = outcome.error.clone();
        let message = match outcome.status {
            AgentStatus::Completed => format!("Sub-agent {id} completed its task"),
            AgentStatus::Failed => match stop_reason {
                Some(StopReason::FinishTask) | None => {
                    format!("Sub-agent {id} finished and reported that it did not succeed")
                }
                Some(reason) => format!(
                    "Sub-agent {id} {}; partial results are kept in {dir}",
                    reason.describe()
                ),
            },
            AgentStatus::Timeout => format!(
                "Sub-agent {id} timed out after {secs} s and was stopped; partial results are kept in {dir}"
            ),
            AgentStatus::IdleTimeout => format!(
                "Sub-agent {id} went quiet and was stopped; partial results are kept in {dir}"
            ),
            AgentStatus::Terminated => {
                format!("Sub-agent {id} was terminated; partial results are kept in {dir}")
            }
            AgentStatus::ContextExhausted => format!(
                "Sub-agent {id} stopped: its conversation outgrew the model's context; partial results are kept in {dir}"
            ),
            AgentStatus::Error | AgentStatus::Running => format!(
                "Sub-agent {id} failed: {}",
                error.as_deref().unwrap_or("unknown error")
            ),
        };
        let (result_summary, deliverables_files) = match &outcome.finish {
            Some(finish) => (finish.summary.clone(), finish.deliverables_files.clone()),
            None => (String::new(), fallback_files),
        };
        AgentResult {
            success: outcome.status == AgentStatus::Completed,
            agent_id: id.clone(),
            status: outcome.status,
            summary: task.summary.clone(),
            message,
            deliverables_dir: dir,
            deliverables_files,
            result_summary,
            sub_conversation_id: task.conversation_id.clone(),
            stats: outcome.stats.clone(),
            transcript: display_in(&task.workspace, &task.transcript_path()),
            stop_reason,
            error,
            result: outcome.finish.as_ref().and_then(|f| f.result.clone()),
            success_claimed: outcome.finish.as_ref().is_some_and(|f| f.success),
            changing_calls: outcome.changing_calls,
            verdict: outcome.verdict.clone(),
            timings: outcome.timings,
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
