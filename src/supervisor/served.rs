//! What the parent learns from one child: the lines it sends, decoded and
//! acted on (model requests answered, progress relayed, reports kept), and
//! the outcome they add up to.
//!
//! The parent believes only what it can check. It counts the tokens from
//! the answers it delivered, caps the child's requests by its turn limit,
//! takes a report only from the role that may send it and only once, and
//! reads the reviewer's verdict itself from the last answer it delivered:
//! a `verdict` line that says otherwise is a protocol error, never an
//! approval.

use std::collections::HashMap;
use std::process::ExitStatus;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::child::{ChildOutcome, ChildRun, Finished};
use super::events::AgentEvent;
use super::violation::{MAX_PENDING_REQUESTS, Violation};
use crate::chat::{Message, ToolSpec, Usage};
use crate::llm::{Completion, CompletionRequest, Delay, DelayObserver, LlmError};
use crate::protocol::{
    AgentRole, AgentStats, AgentStatus, FromChild, ModelFailure, PROTOCOL_VERSION, StopReason,
    ToChild, VerdictReport, decode_line, parse_verdict, round_seconds,
};
use crate::record::AgentTimings;
use crate::telemetry::Span;
use crate::web::WebError;

/// The answers a child gets after its token cap is spent: its wrap-up turn
/// and the two reminders of a model that does not finish.
const WRAP_UP_ANSWERS: u32 = 3;

/// The tool calls whose spans may be open at once: a child that reports
/// calls and never their results gets no more spans, not more memory.
const OPEN_TOOL_SPANS: usize = 64;

/// A model request's id, when it was asked, and the answer.
pub(super) type ModelAnswer = (u64, Instant, Result<Completion, LlmError>);

/// What the parent learned from one child.
pub(super) struct Served<'r, 'a> {
    pub(super) run: &'r ChildRun<'a>,
    pub(super) pid: Option<u32>,
    pub(super) hello: bool,
    /// False once the child is being stopped: its model requests then go
    /// unanswered.
    pub(super) answering: bool,
    pub(super) finish: Option<Finished>,
    /// The verdict as the parent read it from the answer it delivered,
    /// once the reviewer reported the same.
    pub(super) verdict: Option<VerdictReport>,
    /// The child's own failure, and whether it is a conversation that
    /// outgrew the model's context.
    child_error: Option<(String, bool)>,
    /// A protocol error in the lines read after the child exited, which
    /// voids what it reported.
    pub(super) late_protocol_error: Option<Violation>,
    child_stats: AgentStats,
    /// Tokens of the answers delivered to the child.
    usage: Usage,
    turns: u32,
    /// Model requests the child made, and the id of the last one.
    requests: u32,
    /// Those made after its token cap was spent.
    past_cap: u32,
    /// Why the parent stopped the child, when a limit of its own did.
    pub(super) stop_reason: Option<StopReason>,
    last_request: Option<u64>,
    /// The last answer delivered, which a reviewer's verdict must match.
    last_answer: Option<Message>,
    /// The endpoint refused one of its requests as too long for the model.
    refused_as_too_long: bool,
    /// The tool calls the model asked for in the answers delivered, by id.
    delivered_calls: HashMap<String, String>,
    changing_calls: u32,
    hello_at: Option<Instant>,
    report_at: Option<Instant>,
    timings: AgentTimings,
    pub(super) pending: JoinSet<ModelAnswer>,
    /// The child's MCP calls that troupe is making for it.
    pub(super) mcp_pending: JoinSet<(u64, Result<serde_json::Value, McpCallError>)>,
    /// The child's web calls that troupe is making for it, and how many
    /// it asked for.
    pub(super) web_pending: JoinSet<(u64, Result<serde_json::Value, WebError>)>,
    web_calls: u32,
    /// The pages troupe was asked to fetch for it: its `web_pages`, the
    /// parent's count as its tokens are.
    web_pages: u64,
    /// The spans of the tool calls reported and not yet ended, by call id.
    tool_spans: HashMap<String, Span>,
    /// The `tool_call` lines read so far, whose count names each call's
    /// span as the child derived it.
    tool_calls_reported: u64,
    /// The retries and waits of the pending requests, told as they
    /// happen.
    pub(super) delays: (mpsc::UnboundedSender<Delay>, mpsc::UnboundedReceiver<Delay>),
}

impl<'r, 'a> Served<'r, 'a> {
    pub(super) fn new(run: &'r ChildRun<'a>) -> Self {
        Served {
            run,
            pid: None,
            hello: false,
            answering: true,
            finish: None,
            verdict: None,
            child_error: None,
            late_protocol_error: None,
            child_stats: AgentStats::default(),
            usage: Usage::default(),
            turns: 0,
            requests: 0,
            past_cap: 0,
            stop_reason: None,
            last_request: None,
            last_answer: None,
            refused_as_too_long: false,
            delivered_calls: HashMap::new(),
            changing_calls: 0,
            hello_at: None,
            report_at: None,
            timings: AgentTimings::default(),
            pending: JoinSet::new(),
            mcp_pending: JoinSet::new(),
            web_pending: JoinSet::new(),
            web_calls: 0,
            web_pages: 0,
            tool_spans: HashMap::new(),
            tool_calls_reported: 0,
            delays: mpsc::unbounded_channel(),
        }
    }

    pub(super) fn event(&self, event: AgentEvent<'_>) {
        self.run.events.event(self.run.name, event);
    }

    /// One line from the child; `Err` is a protocol error that ends it.
    pub(super) fn handle(&mut self, line: &str) -> Result<(), Violation> {
        if line.trim().is_empty() {
            return Ok(());
        }
        let message: FromChild = decode_line(line)?;
        let first_ok = matches!(message, FromChild::Hello { .. } | FromChild::Error { .. });
        if !self.hello && !first_ok {
            return Err(Violation::NoHello(crate::protocol::codec::type_of(line)));
        }
        match message {
            FromChild::Hello {
                protocol,
                role,
                pid,
                sandbox,
                ..
            } => {
                if protocol != PROTOCOL_VERSION {
                    return Err(Violation::Version(protocol));
                }
                if role != self.run.role {
                    return Err(Violation::Role {
                        said: role,
                        started: self.run.role,
                    });
                }
                self.hello = true;
                self.hello_at.get_or_insert_with(Instant::now);
                // The process troupe started is the one it can kill; the
                // child's word for its pid is for a launcher's child only.
                let pid = self.pid.unwrap_or(pid);
                self.event(AgentEvent::Started { pid });
                if let Some(report) = &sandbox {
                    self.event(AgentEvent::Sandbox { report });
                }
                self.child_stats.sandbox = sandbox;
            }
            FromChild::LlmRequest {
                id,
                messages,
                tools,
                schema,
            } => self.request(id, messages, tools, schema)?,
            FromChild::McpCall {
                id,
                server,
                tool,
                arguments,
            } => self.mcp_call(id, server, tool, arguments)?,
            FromChild::WebCall {
                id,
                tool,
                arguments,
            } => self.web_call(id, tool, arguments)?,
            FromChild::ToolCall {
                call_id,
                name,
                arguments,
            } => {
                self.tool_call_span(call_id, &name);
                self.event(AgentEvent::ToolCall {
                    name: &name,
                    arguments: &arguments,
                });
            }
            FromChild::ToolResult {
                call_id,
                success,
                summary,
                changed,
                bytes,
            } => {
                if let Some(span) = self.tool_spans.remove(&call_id) {
                    span.set("troupe.tool.changed", changed);
                    span.set("troupe.tool.output_bytes", bytes as i64);
                    match success {
                        true => span.succeed(),
                        false => span.fail(summary.clone()),
                    }
                    span.end();
                }
                // Only a call the model asked for counts as evidence of work.
                let asked = self.delivered_calls.get(&call_id);
                let name = asked.map_or("tool", String::as_str);
                // A tool its step's powers leave out may be asked for, and
                // must be refused: a child that says it ran one broke them.
                if success && self.withheld(name) {
                    return Err(Violation::NotItsTool(name.to_string()));
                }
                if changed && asked.is_some() {
                    self.changing_calls += 1;
                }
                self.event(AgentEvent::ToolResult {
                    name,
                    success,
                    summary: &summary,
                });
            }
            FromChild::Stats(stats) => self.keep_stats(stats),
            FromChild::Finished(report) => {
                self.expect_report("finished", AgentRole::Worker, self.finish.is_some())?;
                self.report_at.get_or_insert_with(Instant::now);
                let (finished, stats) = Finished::split(report);
                self.keep_stats(stats);
                self.finish = Some(finished);
            }
            FromChild::Verdict(reported) => {
                self.expect_report("verdict", AgentRole::Reviewer, self.verdict.is_some())?;
                self.report_at.get_or_insert_with(Instant::now);
                self.verdict = Some(self.check_verdict(reported)?);
            }
            FromChild::Compacted { step } => {
                self.event(AgentEvent::Compacted { step: &step });
            }
            FromChild::Error {
                message,
                context_exhausted,
            } => {
                self.report_at.get_or_insert_with(Instant::now);
                // Only a refusal the parent delivered makes a conversation
                // too long; otherwise it is the child's error like any other.
                let believed = context_exhausted && self.refused_as_too_long;
                self.child_error = Some((message, believed));
            }
            FromChild::Unknown => {
                let kind = crate::protocol::codec::type_of(line);
                let message = format!("ignoring a message of unknown type `{kind}`");
                self.event(AgentEvent::Warning { message: &message });
            }
        }
        Ok(())
    }

    /// The span of a tool call the child reported, with the id the child
    /// derived for it; the child's word for the name is only a label.
    fn tool_call_span(&mut self, call_id: String, name: &str) {
        self.tool_calls_reported += 1;
        let Some(agent) = self.run.span.context() else {
            return;
        };
        if self.tool_spans.len() >= OPEN_TOOL_SPANS && !self.tool_spans.contains_key(&call_id) {
            return;
        }
        let name = crate::text::excerpt(name, 64);
        let id = agent.tool_call(self.tool_calls_reported).span_id;
        let span = Span::with_id(Some(agent), id, format!("execute_tool {name}"));
        span.set("gen_ai.operation.name", "execute_tool");
        span.set("gen_ai.tool.name", name);
        span.set("gen_ai.tool.call.id", crate::text::excerpt(&call_id, 64));
        // A call id said twice ends the first call's span.
        self.tool_spans.insert(call_id, span);
    }

    /// Whether `name` is a built-in tool the child's step's powers leave
    /// out.
    fn withheld(&self, name: &str) -> bool {
        let built_in = crate::plan::powers::WORKER_TOOLS.contains(&name);
        let given = |tools: &Vec<String>| name == "finish_task" || tools.iter().any(|t| t == name);
        built_in && self.run.tools.as_ref().is_some_and(|tools| !given(tools))
    }

    /// A model request, sent on to the model unless the child has no
    /// right to it.
    fn request(
        &mut self,
        id: u64,
        messages: Vec<Message>,
        tools: Vec<ToolSpec>,
        schema: Option<serde_json::Value>,
    ) -> Result<(), Violation> {
        if !self.answering {
            return Ok(());
        }
        if let Some(last) = self.last_request.filter(|last| id <= *last) {
            return Err(Violation::RequestOrder { id, last });
        }
        self.last_request = Some(id);
        self.requests += 1;
        if self.requests > self.run.max_requests {
            return Err(Violation::TooManyRequests(self.run.max_requests));
        }
        let tokens = self.run.max_tokens.filter(|cap| self.usage.total >= *cap);
        let cost = (self.run.max_cost_micros).filter(|cap| self.usage.cost_micros >= *cap);
        if tokens.is_some() || cost.is_some() {
            self.past_cap += 1;
        }
        if self.past_cap > WRAP_UP_ANSWERS {
            if let Some(cap) = tokens {
                self.stop_reason = Some(StopReason::TokenLimit);
                return Err(Violation::PastTokenCap(cap));
            }
            if let Some(cap) = cost {
                self.stop_reason = Some(StopReason::CostLimit);
                return Err(Violation::PastCostCap(cap as f64 / 1e6));
            }
        }
        if self.pending.len() >= MAX_PENDING_REQUESTS {
            return Err(Violation::Flood);
        }
        let model = Arc::clone(&self.run.model);
        let delays = self.delays.0.clone();
        let observer = move |delay: &Delay| {
            let _ = delays.send(delay.clone());
        };
        let request = CompletionRequest {
            schema,
            on_delay: Some(DelayObserver(Arc::new(observer))),
            ..CompletionRequest::new(self.run.key.clone(), messages, tools)
        };
        self.event(AgentEvent::ModelAsked {
            turn: self.turns + 1,
        });
        let parent = self.run.span.context();
        self.pending.spawn(async move {
            let asked = Instant::now();
            let answer = crate::telemetry::genai::complete(parent, &*model, request).await;
            (id, asked, answer)
        });
        Ok(())
    }

    /// An MCP call troupe makes for the child, on a server and tool its
    /// role was given (`RemoteServers::call` checks); one at a time per
    /// child is enough for a tool loop, a flood is a protocol error.
    fn mcp_call(
        &mut self,
        id: u64,
        server: String,
        tool: String,
        arguments: serde_json::Value,
    ) -> Result<(), Violation> {
        if !self.answering {
            return Ok(());
        }
        if self.mcp_pending.len() >= MAX_PENDING_REQUESTS {
            return Err(Violation::Flood);
        }
        let role = self.run.role;
        let remote = self.run.mcp.clone();
        let offered = self.run.mcp_servers.contains(&server);
        self.mcp_pending.spawn(async move {
            let result = match remote {
                // The task file offered it only its step's servers.
                Some(_) if !offered => Err(McpCallError::NotOffered(server)),
                Some(remote) => remote
                    .call(role, &server, &tool, arguments)
                    .await
                    .map_err(McpCallError::Failed),
                None => Err(McpCallError::NotReached(server)),
            };
            (id, result)
        });
        Ok(())
    }

    /// A web call troupe makes for the child, under the rules its task
    /// file gave it, each in a span of its own; a flood is a protocol
    /// error, as for MCP calls, and past its bound each is refused.
    fn web_call(
        &mut self,
        id: u64,
        tool: String,
        arguments: serde_json::Value,
    ) -> Result<(), Violation> {
        if !self.answering {
            return Ok(());
        }
        if self.web_pending.len() >= MAX_PENDING_REQUESTS {
            return Err(Violation::Flood);
        }
        self.web_calls += 1;
        self.web_pages += u64::from(tool == "web_fetch");
        let spent = self.web_calls > crate::web::CALLS_PER_AGENT;
        let web = self.run.web.clone();
        let span = self.run.span.child(tool.clone()).client();
        self.web_pending.spawn(async move {
            let result = match web {
                None => Err(WebError::NoWeb),
                Some((_, access)) if !access.tools.contains(&tool) => Err(WebError::NotOffered {
                    offered: access.tools.join(", "),
                    tool,
                }),
                Some(_) if spent => Err(WebError::AgentSpent),
                Some((web, access)) => web.call(&access.rules, &tool, arguments).await,
            };
            traced(&span, &result);
            (id, result.map(|answer| answer.result))
        });
        Ok(())
    }

    /// A report of `kind` is the word of `role` only, and is said once.
    fn expect_report(
        &self,
        kind: &'static str,
        role: AgentRole,
        again: bool,
    ) -> Result<(), Violation> {
        if self.run.role != role {
            return Err(Violation::NotItsReport {
                sender: self.run.role,
                kind,
                role,
            });
        }
        if again {
            return Err(Violation::Repeated(kind));
        }
        Ok(())
    }

    /// The verdict as the parent reads it from the last answer it
    /// delivered, when the reviewer reported the same.
    fn check_verdict(&self, reported: VerdictReport) -> Result<VerdictReport, Violation> {
        let Some(answer) = &self.last_answer else {
            return Err(Violation::VerdictUnasked);
        };
        let read = parse_verdict(answer.text());
        if read != reported {
            return Err(Violation::VerdictDiffers {
                reported: reported.approved,
                read: read.approved,
            });
        }
        Ok(read)
    }

    /// The parent's clock on the child, once it is gone.
    pub(super) fn timings(&mut self, spawned: Instant, exited: Instant) {
        let ms =
            |from: Instant, to: Instant| to.saturating_duration_since(from).as_secs_f64() * 1000.0;
        let hello = self.hello_at.unwrap_or(spawned);
        let report = self.report_at.unwrap_or(exited);
        self.timings = AgentTimings {
            startup_ms: ms(spawned, hello),
            working_ms: ms(hello, report),
            exit_ms: ms(report, exited),
            teardown_ms: ms(exited, Instant::now()),
            transcript_ms: self.child_stats.transcript_ms.unwrap_or(0.0),
            model_wait_ms: self.child_stats.model_wait_ms.unwrap_or(0.0),
            completions: self.requests,
        };
    }

    /// The child's latest counters; the sandbox it reported at `hello`
    /// stays when a later `stats` leaves it out, and the tokens and web
    /// pages are the parent's count.
    fn keep_stats(&mut self, mut stats: AgentStats) {
        if stats.sandbox.is_none() {
            stats.sandbox = self.child_stats.sandbox.take();
        }
        stats.token_usage = self.usage;
        stats.web_pages = self.web_pages;
        self.child_stats = stats;
        self.run.events.event(
            self.run.name,
            AgentEvent::Stats {
                stats: &self.child_stats,
            },
        );
    }

    pub(super) fn answer(
        &mut self,
        (id, asked, result): ModelAnswer,
        to_child: &mpsc::UnboundedSender<ToChild>,
    ) {
        let reply = match result {
            Ok(completion) => {
                self.turns += 1;
                self.usage.add(completion.usage);
                for call in &completion.message.tool_calls {
                    self.delivered_calls
                        .insert(call.id.clone(), call.name().to_string());
                }
                self.last_answer = Some(completion.message.clone());
                self.event(AgentEvent::ModelTurn {
                    turn: self.turns,
                    tool_calls: completion.message.tool_calls.len(),
                    usage: completion.usage,
                    elapsed: asked.elapsed(),
                });
                ToChild::LlmResponse {
                    id,
                    message: completion.message,
                    usage: completion.usage,
                    truncated: completion.truncated,
                }
            }
            Err(error) => {
                let message = error.to_string();
                self.event(AgentEvent::ModelError { message: &message });
                let kind = match error {
                    LlmError::ContextExceeded { .. } => {
                        self.refused_as_too_long = true;
                        ModelFailure::ContextExceeded
                    }
                    _ => ModelFailure::Other,
                };
                ToChild::LlmError {
                    id,
                    message,
                    retryable: error.retryable(),
                    kind,
                }
            }
        };
        let _ = to_child.send(reply);
    }

    /// The status of a child that ended on its own.
    pub(super) fn verdict_on_exit(
        &self,
        exit: Option<ExitStatus>,
    ) -> (AgentStatus, Option<String>) {
        if let Some(error) = &self.late_protocol_error {
            return (AgentStatus::Error, Some(format!("protocol error: {error}")));
        }
        if let Some(report) = &self.finish {
            let status = if report.success {
                AgentStatus::Completed
            } else {
                AgentStatus::Failed
            };
            return (status, None);
        }
        if self.verdict.is_some() {
            return (AgentStatus::Completed, None);
        }
        if let Some((error, context_exhausted)) = &self.child_error {
            let status = match context_exhausted {
                true => AgentStatus::ContextExhausted,
                false => AgentStatus::Error,
            };
            return (status, Some(error.clone()));
        }
        let how = match exit {
            Some(status) => describe_exit(status),
            None => "closed its output but did not exit".to_string(),
        };
        let mut error = format!("the agent {how} without reporting a result");
        if let Some(tail) = log_tail(&self.run.stderr_log) {
            error.push_str(&format!("; its stderr ends: {tail}"));
        }
        (AgentStatus::Error, Some(error))
    }

    pub(super) fn outcome(
        &self,
        status: AgentStatus,
        error: Option<String>,
        started: Instant,
    ) -> ChildOutcome {
        let mut stats = self.child_stats.clone();
        stats.runtime_seconds = round_seconds(started.elapsed().as_secs_f64());
        stats.token_usage = self.usage;
        stats.web_pages = self.web_pages;
        let detail = match (&error, &self.finish) {
            (Some(error), _) => error.as_str(),
            (None, Some(finish)) => finish.summary.as_str(),
            (None, None) => "",
        };
        self.event(AgentEvent::Ended {
            status,
            runtime: started.elapsed(),
            detail,
        });
        ChildOutcome {
            status,
            finish: self.finish.clone(),
            verdict: self.verdict.clone(),
            error,
            stats,
            changing_calls: self.changing_calls,
            timings: self.timings,
            stop_reason: self.stop_reason,
        }
    }
}

fn describe_exit(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with code {code}"),
        (None, Some(signal)) => {
            let name = nix::sys::signal::Signal::try_from(signal)
                .map(|s| s.as_str().to_string())
                .unwrap_or_else(|_| format!("signal {signal}"));
            format!("was killed by {name}")
        }
        (None, None) => "ended".to_string(),
    }
}

/// How much of a log's end is read for an error message.
const LOG_TAIL_BYTES: u64 = 8192;

/// The last lines of a log, on one line, for an error message.
pub(super) fn log_tail(path: &std::path::Path) -> Option<String> {
    let text = crate::fsutil::read_tail(path, LOG_TAIL_BYTES).ok()?;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return None;
    }
    let tail = lines[lines.len().saturating_sub(3)..].join(" / ");
    Some(crate::text::excerpt(&tail, 400))
}

/// Why an MCP call troupe made for the child has no result; the child is
/// told it as text (`McpResult`'s `error`).
#[derive(Debug, thiserror::Error)]
pub(super) enum McpCallError {
    #[error(
        "no MCP server `{0}` is given to this agent (its task file offers the servers it may call)"
    )]
    NotOffered(String),
    #[error("no MCP server `{0}` is reached for this agent")]
    NotReached(String),
    /// The server, or troupe's call to it, failed so.
    #[error("{0}")]
    Failed(String),
}

/// A web call's span: what it reached, how it answered, how much came.
fn traced(span: &Span, result: &Result<crate::web::Answer, WebError>) {
    match result {
        Ok(answer) => {
            match answer.status {
                Some(status) => {
                    span.set("url.full", answer.target.clone());
                    span.set("http.response.status_code", i64::from(status));
                }
                None => span.set("troupe.web.query", answer.target.clone()),
            }
            span.set("troupe.web.bytes", answer.bytes as i64);
            span.set("troupe.web.cached", answer.cached);
            span.succeed();
        }
        Err(why) => {
            span.set("troupe.web.refused", why.refused());
            span.fail(why.to_string());
        }
    }
    span.end();
}
