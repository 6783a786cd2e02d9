//! What every agent loop does the same way: open the conversation from the
//! prompts, ask the model, run the tools it calls, record every message,
//! and stop at once when cancelled. The worker and reviewer loops are the
//! policies on top.

use std::sync::Arc;

use super::calls::{CallResult, CallRunner};
use crate::chat::{Message, ToolCall};
use crate::llm::{ChatModel, CompletionRequest, LlmError};
use crate::prompts::{Prompt, render};
use crate::protocol::{StopReason, TaskFile, VerdictReport};
use crate::signal::StopSignal;
use crate::transcript::TranscriptWriter;

/// Identical consecutive calls that count as stagnation.
const STAGNATION_RUN: usize = 3;

/// How a loop ended.
pub enum LoopEnd {
    /// A worker's report, by `finish_task` or by wrapping up.
    Finished {
        success: bool,
        summary: String,
        stop_reason: StopReason,
    },
    /// A reviewer's verdict.
    Verdict(VerdictReport),
    Cancelled {
        reason: String,
    },
    Failed(AgentFailure),
}

/// Why an agent could not go on: a failure of its machinery or of the
/// model, not a mistake the model can fix.
#[derive(Debug, thiserror::Error)]
pub enum AgentFailure {
    #[error("model error: {0}")]
    Model(#[from] LlmError),
    #[error("cannot write the transcript: {0}")]
    Transcript(#[source] std::io::Error),
    #[error("{0}")]
    Prompt(#[source] std::io::Error),
    /// A tool's machinery broke (`ToolError::Fatal`).
    #[error("{0}")]
    Tool(String),
}

pub struct Session<'a> {
    pub task: &'a TaskFile,
    pub model: Arc<dyn ChatModel>,
    pub calls: CallRunner,
    pub transcript: &'a mut TranscriptWriter,
    pub cancel: StopSignal,
    /// Every tool call so far, for stagnation.
    history: Vec<String>,
    /// Model turns begun so far.
    turns: u32,
}

impl<'a> Session<'a> {
    pub fn new(
        task: &'a TaskFile,
        model: Arc<dyn ChatModel>,
        calls: CallRunner,
        transcript: &'a mut TranscriptWriter,
        cancel: StopSignal,
    ) -> Self {
        Session {
            task,
            model,
            calls,
            transcript,
            cancel,
            history: Vec::new(),
            turns: 0,
        }
    }

    /// The system prompt and the first user message, rendered.
    pub fn open(&mut self, system: Prompt, first: Prompt) -> Result<(), LoopEnd> {
        let system = self.prompt(system)?;
        let first = self.prompt(first)?;
        let owned = self.prompt_values();
        let values: Vec<(&str, &str)> = owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let opening = [
            Message::system(render(&system, &values)),
            Message::user(render(&first, &values)),
        ];
        self.record(opening)
    }

    /// A user message from a prompt with its own values.
    pub fn say(&mut self, prompt: Prompt, values: &[(&str, &str)]) -> Result<(), LoopEnd> {
        let template = self.prompt(prompt)?;
        self.push(Message::user(render(&template, values)))
    }

    /// One model turn, recorded. `Err` on cancel or model failure.
    pub async fn ask(&mut self, with_tools: bool) -> Result<Message, LoopEnd> {
        let tools = if with_tools {
            self.calls.registry.specs()
        } else {
            Vec::new()
        };
        let request = CompletionRequest::new(
            self.task.agent_key(),
            self.transcript.messages().to_vec(),
            tools,
        );
        let completion = self
            .cancel
            .race(self.model.complete(request))
            .await
            .map_err(cancelled)?
            .map_err(|e| LoopEnd::Failed(e.into()))?;
        self.calls.stats.add_usage(completion.usage);
        self.push(completion.message.clone())?;
        Ok(completion.message)
    }

    /// Runs a turn's calls and records their results, in the order asked.
    pub async fn run_calls(&mut self, calls: &[ToolCall]) -> Result<Vec<CallResult>, LoopEnd> {
        let results = self
            .cancel
            .race(self.calls.run_all(calls))
            .await
            .map_err(cancelled)?;
        for (call, result) in calls.iter().zip(&results) {
            self.push(Message::tool_result(&call.id, result.output.model_text()))?;
        }
        if let Some(error) = results.iter().find_map(|r| r.fatal.clone()) {
            return Err(LoopEnd::Failed(AgentFailure::Tool(error)));
        }
        self.history.extend(calls.iter().map(signature));
        Ok(results)
    }

    /// Whether the last calls were the same call, again and again.
    pub fn stagnating(&self) -> bool {
        let history = &self.history;
        history.len() >= STAGNATION_RUN
            && history[history.len() - STAGNATION_RUN..]
                .windows(2)
                .all(|pair| pair[0] == pair[1])
    }

    /// Begins another model turn, unless a limit says the agent must wrap
    /// up: the turn limit, or the token limit.
    pub fn next_turn(&mut self) -> Option<StopReason> {
        self.turns += 1;
        let limits = &self.task.limits;
        if self.turns > limits.max_turns {
            return Some(StopReason::TurnLimit);
        }
        let spent = self.calls.stats.tokens();
        limits
            .max_tokens
            .is_some_and(|max| spent >= max)
            .then_some(StopReason::TokenLimit)
    }

    fn push(&mut self, message: Message) -> Result<(), LoopEnd> {
        self.record([message])
    }

    /// Messages that arrive together, written to the transcript at once.
    fn record(&mut self, messages: impl IntoIterator<Item = Message>) -> Result<(), LoopEnd> {
        self.transcript.set_stats(self.calls.stats.snapshot());
        self.transcript
            .push_all(messages)
            .map_err(|e| LoopEnd::Failed(AgentFailure::Transcript(e)))
    }

    fn prompt(&self, prompt: Prompt) -> Result<String, LoopEnd> {
        prompt
            .load(self.task.prompts_dir.as_deref())
            .map_err(|e| LoopEnd::Failed(AgentFailure::Prompt(e)))
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

fn cancelled(reason: String) -> LoopEnd {
    LoopEnd::Cancelled { reason }
}

/// A call's identity for stagnation: its name and its arguments with keys
/// in a fixed order, so `{"a":1,"b":2}` and `{"b":2,"a":1}` are the same.
fn signature(call: &ToolCall) -> String {
    format!("{}({})", call.name(), call.arguments_value())
}
