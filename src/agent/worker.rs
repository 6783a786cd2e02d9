//! The worker's ReAct loop (SPEC section 5): ask the model, run the tools
//! it calls, repeat until `finish_task`, with the guards that keep a
//! confused model from running forever: reminders when it stops without
//! finishing, and a tools-off wrap-up on stagnation, the turn limit or the
//! token limit.

use std::sync::Arc;

use super::calls::CallRunner;
use super::cancel::Cancel;
use crate::chat::{Message, ToolCall};
use crate::llm::{AgentKey, ChatModel, CompletionRequest};
use crate::prompts::{Prompt, render};
use crate::protocol::{StopReason, TaskFile};
use crate::transcript::TranscriptWriter;

/// Reminders sent when the model answers without calling a tool.
const MAX_REMINDERS: u32 = 2;
/// Identical consecutive calls that count as stagnation.
const STAGNATION_RUN: usize = 3;

/// How the loop ended.
pub enum LoopEnd {
    Finished {
        success: bool,
        summary: String,
        stop_reason: StopReason,
    },
    Cancelled {
        reason: String,
    },
    Failed {
        error: String,
    },
}

pub struct WorkerLoop<'a> {
    pub task: &'a TaskFile,
    pub model: Arc<dyn ChatModel>,
    pub calls: CallRunner,
    pub transcript: &'a mut TranscriptWriter,
    pub cancel: Cancel,
}

impl WorkerLoop<'_> {
    pub async fn run(mut self) -> LoopEnd {
        match self.drive().await {
            Ok(end) | Err(end) => end,
        }
    }

    /// The loop proper; `Err` carries an early end (cancel, failure).
    async fn drive(&mut self) -> Result<LoopEnd, LoopEnd> {
        let prompts = self.task.prompts_dir.as_deref();
        let system = load(Prompt::Worker, prompts)?;
        let first = load(Prompt::WorkerTask, prompts)?;
        let owned = self.prompt_values();
        let values: Vec<(&str, &str)> = owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.push(Message::system(render(&system, &values)))?;
        self.push(Message::user(render(&first, &values)))?;

        let limits = &self.task.limits;
        let mut reminders = 0;
        let mut history: Vec<String> = Vec::new();
        let mut turns = 0;
        loop {
            turns += 1;
            if turns > limits.max_turns {
                return self.wrap_up(StopReason::TurnLimit).await;
            }
            if limits
                .max_tokens
                .is_some_and(|max| self.calls.stats.tokens() >= max)
            {
                return self.wrap_up(StopReason::TokenLimit).await;
            }
            let reply = self.ask(true).await?;
            let calls = reply.tool_calls.clone();
            self.push(reply.clone())?;
            if calls.is_empty() {
                if reminders < MAX_REMINDERS {
                    reminders += 1;
                    let reminder = load(Prompt::Reminder, prompts)?;
                    self.push(Message::user(render(&reminder, &[])))?;
                    continue;
                }
                let summary = match reply.text().trim() {
                    "" => "The agent stopped without calling finish_task.".to_string(),
                    text => text.to_string(),
                };
                return Ok(LoopEnd::Finished {
                    success: false,
                    summary,
                    stop_reason: StopReason::NoFinishTask,
                });
            }
            let results = self
                .cancel
                .race(self.calls.run_all(&calls))
                .await
                .map_err(cancelled)?;
            for (call, result) in calls.iter().zip(&results) {
                self.push(Message::tool_result(&call.id, result.output.model_text()))?;
            }
            if let Some(error) = results.iter().find_map(|r| r.fatal.clone()) {
                return Err(LoopEnd::Failed { error });
            }
            if let Some(finish) = results.iter().find_map(|r| r.output.finish.clone()) {
                return Ok(LoopEnd::Finished {
                    success: finish.success,
                    summary: finish.summary,
                    stop_reason: StopReason::FinishTask,
                });
            }
            history.extend(calls.iter().map(signature));
            if stagnating(&history) {
                return self.wrap_up(StopReason::Stagnation).await;
            }
        }
    }

    /// Tools off, one last question: what was done. The answer is the
    /// partial report.
    async fn wrap_up(&mut self, reason: StopReason) -> Result<LoopEnd, LoopEnd> {
        let template = load(Prompt::WrapUp, self.task.prompts_dir.as_deref())?;
        self.push(Message::user(render(
            &template,
            &[("reason", reason.describe())],
        )))?;
        let summary = match self.ask(false).await {
            Ok(reply) => {
                let text = reply.text().trim().to_string();
                self.push(reply)?;
                if text.is_empty() {
                    format!("The agent {} and gave no report.", reason.describe())
                } else {
                    text
                }
            }
            Err(LoopEnd::Failed { error }) => {
                format!(
                    "The agent {}; its report failed: {error}",
                    reason.describe()
                )
            }
            Err(other) => return Err(other),
        };
        Ok(LoopEnd::Finished {
            success: false,
            summary,
            stop_reason: reason,
        })
    }

    async fn ask(&mut self, with_tools: bool) -> Result<Message, LoopEnd> {
        let request = CompletionRequest {
            agent: self.agent_key(),
            messages: self.transcript.messages().to_vec(),
            tools: if with_tools {
                self.calls.registry.specs()
            } else {
                Vec::new()
            },
        };
        let completion = self
            .cancel
            .race(self.model.complete(request))
            .await
            .map_err(cancelled)?
            .map_err(|e| LoopEnd::Failed {
                error: format!("model error: {e}"),
            })?;
        self.calls.stats.add_usage(completion.usage);
        Ok(completion.message)
    }

    fn push(&mut self, message: Message) -> Result<(), LoopEnd> {
        self.transcript.set_stats(self.calls.stats.snapshot());
        self.transcript.push(message).map_err(|e| LoopEnd::Failed {
            error: format!("cannot write the transcript: {e}"),
        })
    }

    fn agent_key(&self) -> AgentKey {
        AgentKey {
            role: self.task.role.as_str().to_string(),
            step: Some(self.task.step_key()),
            attempt: Some(self.task.attempt),
        }
    }

    fn prompt_values(&self) -> Vec<(&'static str, String)> {
        let task = self.task;
        vec![
            ("agent_id", task.agent_id.to_string()),
            ("summary", task.summary.clone()),
            ("task", task.task.clone()),
            ("deliverables_dir", task.agent_dir_display()),
            ("timeout_seconds", task.timeout_seconds.to_string()),
            ("workspace", task.workspace.display().to_string()),
            (
                "system",
                format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
            ),
            (
                "current_time",
                crate::timefmt::format_time(&chrono::Utc::now()),
            ),
        ]
    }
}

fn load(prompt: Prompt, dir: Option<&std::path::Path>) -> Result<String, LoopEnd> {
    prompt.load(dir).map_err(|e| LoopEnd::Failed {
        error: e.to_string(),
    })
}

fn cancelled(reason: String) -> LoopEnd {
    LoopEnd::Cancelled { reason }
}

/// A call's identity for stagnation: its name and its arguments with keys
/// in a fixed order, so `{"a":1,"b":2}` and `{"b":2,"a":1}` are the same.
fn signature(call: &ToolCall) -> String {
    format!("{}({})", call.name(), call.arguments_value())
}

fn stagnating(history: &[String]) -> bool {
    history.len() >= STAGNATION_RUN
        && history[history.len() - STAGNATION_RUN..]
            .windows(2)
            .all(|pair| pair[0] == pair[1])
}
