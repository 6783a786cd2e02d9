//! What every agent loop does the same way: open the conversation from the
//! prompts, ask the model, run the tools it calls, record every message,
//! and stop at once when cancelled. The worker and reviewer loops are the
//! policies on top.

use std::sync::Arc;

use serde_json::Value;

use super::calls::{CallResult, CallRunner};
use super::cancel::CancelCause;
use super::compaction::{ContextView, Step};
use crate::chat::{Message, ToolCall, ToolSpec};
use crate::llm::{ChatModel, Completion, CompletionRequest, LlmError};
use crate::prompts::{Prompt, render};
use crate::protocol::{FromChild, StopReason, TaskFile, VerdictReport};
use crate::signal::StopSignal;
use crate::transcript::{Compaction, CompactionReason, CompactionStep, TranscriptWriter};

/// Identical consecutive calls that count as stagnation.
const STAGNATION_RUN: usize = 3;
/// Answers cut at the output limit that the model is asked to redo, in a
/// row, before the agent gives up.
const MAX_CONTINUATIONS: u32 = 2;
/// Compaction steps one request may take before it is sent as it is, or,
/// refused, ends the agent.
const MAX_COMPACTIONS: u32 = 3;

/// How a loop ended.
pub enum LoopEnd {
    /// A worker's report, by `finish_task` or by wrapping up.
    Finished {
        success: bool,
        summary: String,
        stop_reason: StopReason,
        /// The typed result `finish_task` was given, if any.
        result: Option<serde_json::Value>,
    },
    /// A reviewer's verdict.
    Verdict(VerdictReport),
    /// Cancelled before it could end by itself.
    Cancelled(CancelCause),
    /// The conversation no longer fits the model's context, compacted as
    /// far as it goes; the endpoint's refusal.
    ContextExhausted(LlmError),
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
    /// A tool's machinery broke (`ToolError::Fatal`).
    #[error("{0}")]
    Tool(String),
    #[error(
        "the model's answers were cut at the output limit ({limit}) {times} times in a row; \
         raise --max-output-tokens, or give the agent smaller steps"
    )]
    Truncated { times: u32, limit: String },
    #[error("the model answered nothing where its verdict was due")]
    EmptyAnswer,
    #[error("the agent made its {0} model requests, three for each turn of its limit")]
    RequestLimit(u32),
}

pub struct Session<'a> {
    pub task: &'a TaskFile,
    pub model: Arc<dyn ChatModel>,
    pub calls: CallRunner,
    pub transcript: &'a mut TranscriptWriter,
    pub cancel: StopSignal<CancelCause>,
    /// Every tool call so far, for stagnation.
    history: Vec<String>,
    /// Model turns begun so far.
    turns: u32,
    /// Model requests made so far, continuations and summaries included.
    requests: u32,
    /// What of the transcript the model is sent.
    context: ContextView,
    /// The JSON Schema answers without tools should follow.
    schema: Option<Value>,
}

impl<'a> Session<'a> {
    pub fn new(
        task: &'a TaskFile,
        model: Arc<dyn ChatModel>,
        calls: CallRunner,
        transcript: &'a mut TranscriptWriter,
        cancel: StopSignal<CancelCause>,
    ) -> Self {
        Session {
            task,
            model,
            calls,
            transcript,
            cancel,
            history: Vec::new(),
            turns: 0,
            requests: 0,
            context: ContextView::new(task.limits.context_window, task.limits.max_output_tokens),
            schema: None,
        }
    }

    /// Asks the endpoint to hold answers to `schema` (see `--structured`).
    pub fn with_schema(mut self, schema: Value) -> Self {
        self.schema = Some(schema);
        self
    }

    /// The system prompt and the first user message, rendered.
    pub fn open(&mut self, system: Prompt, first: Prompt) -> Result<(), LoopEnd> {
        let system = self.prompt(system);
        let first = self.prompt(first);
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
        let template = self.prompt(prompt);
        self.push(Message::user(render(&template, values)))
    }

    /// One model turn, recorded. An answer cut at the output limit is
    /// recorded too, and asked again, shorter. `Err` on cancel, model
    /// failure, or a conversation that no longer fits.
    pub async fn ask(&mut self, with_tools: bool) -> Result<Message, LoopEnd> {
        let tools = if with_tools {
            self.calls.registry.specs()
        } else {
            Vec::new()
        };
        let mut cut = 0;
        loop {
            let completion = self.complete_fitting(&tools).await?;
            self.calls.stats.add_usage(completion.usage);
            self.push(completion.message.clone())?;
            if !completion.truncated {
                return Ok(completion.message);
            }
            cut += 1;
            let limit = match self.task.limits.max_output_tokens {
                Some(tokens) => format!("{tokens} tokens"),
                None => "the endpoint's".to_string(),
            };
            if cut > MAX_CONTINUATIONS {
                return Err(LoopEnd::Failed(AgentFailure::Truncated {
                    times: cut,
                    limit,
                }));
            }
            self.not_run(&completion.message.tool_calls)?;
            self.say(Prompt::Truncated, &[("max_output_tokens", &limit)])?;
        }
    }

    /// Results for the calls of an answer that was cut off: none of them
    /// ran, and every call needs its result before the next message.
    fn not_run(&mut self, calls: &[ToolCall]) -> Result<(), LoopEnd> {
        let results = calls.iter().map(|call| {
            Message::tool_result(
                &call.id,
                "not run: the answer was cut off at the output limit before this call was complete",
            )
        });
        self.record(results)
    }

    /// A completion of the conversation, compacted first when it would
    /// pass the context window, and again when the endpoint refuses it as
    /// too long.
    async fn complete_fitting(&mut self, tools: &[ToolSpec]) -> Result<Completion, LoopEnd> {
        let mut compactions = 0;
        let mut checked_window = false;
        loop {
            let sent = self.context.view(self.transcript.messages());
            if !checked_window && compactions < MAX_COMPACTIONS {
                if let Some(estimate) = self.context.over_budget(&sent, tools)
                    && self
                        .compact(CompactionReason::ContextWindow, estimate)
                        .await?
                {
                    compactions += 1;
                    continue;
                }
                checked_window = true;
            }
            let schema = self.schema.clone();
            let request = CompletionRequest {
                schema,
                ..CompletionRequest::new(self.task.agent_key(), sent.clone(), tools.to_vec())
            };
            match self.request(request).await? {
                Ok(completion) => {
                    self.context.measured(&sent, tools, completion.usage);
                    return Ok(completion);
                }
                Err(refused @ LlmError::ContextExceeded { .. }) => {
                    let estimate = self.context.estimate(&sent, tools);
                    let compacted = compactions < MAX_COMPACTIONS
                        && self
                            .compact(CompactionReason::ContextExceeded, estimate)
                            .await?;
                    if !compacted {
                        return Err(LoopEnd::ContextExhausted(refused));
                    }
                    compactions += 1;
                }
                Err(e) => return Err(LoopEnd::Failed(e.into())),
            }
        }
    }

    /// Takes the next compaction step, recorded; `false` when none is left.
    async fn compact(&mut self, reason: CompactionReason, estimate: u64) -> Result<bool, LoopEnd> {
        let messages = self.transcript.messages().len();
        let step = match self.context.next_step(self.transcript.messages()) {
            None => return Ok(false),
            Some(Step::Shortened { before, results }) => {
                CompactionStep::Shortened { before, results }
            }
            Some(Step::Summarize(range)) => {
                let Some(summary) = self.summarize(range.clone()).await? else {
                    return Ok(false);
                };
                let template = self.prompt(Prompt::Summary);
                let block = render(&template, &[("summary", &summary)]);
                self.context.summarized(range.clone(), block);
                CompactionStep::Summarized {
                    from: range.start,
                    to: range.end,
                    summary,
                }
            }
        };
        let told = match &step {
            CompactionStep::Shortened { results: 1, .. } => {
                "sending a long tool result as its head and tail".to_string()
            }
            CompactionStep::Shortened { results, .. } => {
                format!("sending {results} long tool results as their head and tail")
            }
            CompactionStep::Summarized { from, to, .. } => {
                format!("sending messages {from} to {} as a summary", to - 1)
            }
        };
        self.calls.out.send(&FromChild::Compacted { step: told });
        let compaction = Compaction {
            at: chrono::Utc::now(),
            reason,
            messages,
            estimated_tokens: estimate,
            step,
        };
        self.transcript
            .note_compaction(compaction)
            .map_err(|e| LoopEnd::Failed(AgentFailure::Transcript(e)))?;
        Ok(true)
    }

    /// The model's summary of messages `range`, in one call without
    /// tools; `None` when it cannot give one (that call too is too long,
    /// or it answered nothing).
    async fn summarize(
        &mut self,
        range: std::ops::Range<usize>,
    ) -> Result<Option<String>, LoopEnd> {
        let system = self.prompt(Prompt::Compact);
        let template = self.prompt(Prompt::CompactTask);
        let history = self.context.history(self.transcript.messages(), range);
        let question = render(
            &template,
            &[("task", &self.task.task), ("history", &history)],
        );
        let request = CompletionRequest::new(
            self.task.agent_key(),
            vec![
                Message::system(render(&system, &[])),
                Message::user(question),
            ],
            Vec::new(),
        );
        match self.request(request).await? {
            Ok(completion) => {
                self.calls.stats.add_usage(completion.usage);
                let text = completion.message.text().trim();
                Ok((!text.is_empty()).then(|| text.to_string()))
            }
            Err(LlmError::ContextExceeded { .. }) => Ok(None),
            Err(e) => Err(LoopEnd::Failed(e.into())),
        }
    }

    /// One model request within the agent's request limit; `Err` when
    /// cancelled or past the limit.
    async fn request(
        &mut self,
        request: CompletionRequest,
    ) -> Result<Result<Completion, LlmError>, LoopEnd> {
        let limit = self.task.limits.max_requests();
        if self.requests >= limit {
            return Err(LoopEnd::Failed(AgentFailure::RequestLimit(limit)));
        }
        self.requests += 1;
        let asked = std::time::Instant::now();
        let answer = self.cancel.race(self.model.complete(request)).await;
        self.calls.stats.waited(asked.elapsed());
        answer.map_err(LoopEnd::Cancelled)
    }

    /// Runs a turn's calls and records their results, in the order asked.
    pub async fn run_calls(&mut self, calls: &[ToolCall]) -> Result<Vec<CallResult>, LoopEnd> {
        let results = self
            .cancel
            .race(self.calls.run_all(calls))
            .await
            .map_err(LoopEnd::Cancelled)?;
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
    /// up: the turn limit, the token limit or the cost limit.
    pub fn next_turn(&mut self) -> Option<StopReason> {
        self.turns += 1;
        let limits = &self.task.limits;
        if self.turns > limits.max_turns {
            return Some(StopReason::TurnLimit);
        }
        let spent = self.calls.stats.usage();
        if limits.max_tokens.is_some_and(|max| spent.total >= max) {
            return Some(StopReason::TokenLimit);
        }
        limits
            .max_cost_micros
            .is_some_and(|max| spent.cost_micros >= max)
            .then_some(StopReason::CostLimit)
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

    fn prompt(&self, prompt: Prompt) -> String {
        self.task.prompts.text(prompt)
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

/// A call's identity for stagnation: its name and its arguments with keys
/// in a fixed order, so `{"a":1,"b":2}` and `{"b":2,"a":1}` are the same.
fn signature(call: &ToolCall) -> String {
    format!("{}({})", call.name(), call.arguments_value())
}
