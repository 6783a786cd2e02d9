//! Running the tool calls of one model turn.
//!
//! Consecutive read-only calls run together; every other call runs alone,
//! in order, so a read after a write sees the write. Results come back in
//! the order the model asked. Calls after `finish_task` are not run.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::FutureExt;
use futures_util::future::join_all;

use super::outbox::Outbox;
use super::stats::StatsCounter;
use crate::chat::ToolCall;
use crate::protocol::{FromChild, TraceParent, UnstartedServer};
use crate::tools::{ToolContext, ToolError, ToolOutput, ToolRegistry, cap_output};

/// What one call gave.
pub struct CallResult {
    pub output: ToolOutput,
    /// Set when the agent cannot go on.
    pub fatal: Option<String>,
}

pub struct CallRunner {
    pub registry: ToolRegistry,
    /// The MCP servers that did not start: a call of one of their tools
    /// is answered with why, not as a tool never heard of.
    pub unstarted: Vec<UnstartedServer>,
    /// The built-in tools its step's powers leave out: a call of one is
    /// answered as such.
    pub withheld: Vec<String>,
    pub ctx: Arc<ToolContext>,
    pub stats: Arc<StatsCounter>,
    pub out: Outbox,
    /// The agent's own span (its `TRACEPARENT`), under which each call's
    /// span is derived from the call's place in `reported`.
    pub trace: Option<TraceParent>,
    /// The `tool_call` lines sent so far.
    pub reported: AtomicU64,
}

impl CallRunner {
    pub async fn run_all(&self, calls: &[ToolCall]) -> Vec<CallResult> {
        let mut results: Vec<CallResult> = Vec::with_capacity(calls.len());
        let mut rest = calls;
        while !rest.is_empty() {
            let ended = results
                .iter()
                .any(|r| r.output.finish.is_some() || r.fatal.is_some());
            if ended {
                results.extend(rest.iter().map(|_| CallResult {
                    output: ToolOutput::failed("not run: the task had already ended", ""),
                    fatal: None,
                }));
                break;
            }
            let (batch, after) = rest.split_at(self.read_only_run(rest).max(1));
            results.extend(join_all(batch.iter().map(|call| self.run_one(call))).await);
            rest = after;
        }
        self.out.send(&FromChild::Stats(self.stats.snapshot()));
        results
    }

    /// How many calls from the start of `calls` are read-only.
    fn read_only_run(&self, calls: &[ToolCall]) -> usize {
        calls
            .iter()
            .take_while(|call| {
                self.registry
                    .get(call.name())
                    .is_some_and(|tool| tool.about().read_only)
            })
            .count()
    }

    /// `output` cut to the output cap, the rest saved to a file, off the
    /// agent's thread.
    async fn capped(&self, output: ToolOutput, call_id: &str) -> ToolOutput {
        if output.content.len() <= self.ctx.limits.output_cap_bytes {
            return output;
        }
        let ctx = Arc::clone(&self.ctx);
        let id = call_id.to_string();
        tokio::task::spawn_blocking(move || cap_output(output, &ctx, &id))
            .await
            .unwrap_or_else(|e| {
                ToolOutput::failed(format!("cannot keep the tool's output: {e}"), "")
            })
    }

    /// What the model is told of a tool it does not have.
    fn unknown(&self, name: &str) -> String {
        if self.withheld.iter().any(|w| w == name) {
            return format!(
                "`{name}` is not among this step's tools (its powers give: {})",
                self.registry.names().join(", ")
            );
        }
        match self.unstarted.iter().find(|server| server.names(name)) {
            Some(server) => format!(
                "`{name}` would be a tool of the MCP server `{}`, which did not start, so none of its tools are available: {}",
                server.server, server.error
            ),
            None => format!(
                "unknown tool `{name}`; the tools are: {}",
                self.registry.names().join(", ")
            ),
        }
    }

    async fn run_one(&self, call: &ToolCall) -> CallResult {
        // Counted and sent together, so the parent, counting the lines it
        // reads, derives the same span.
        let seq = self.reported.fetch_add(1, Ordering::Relaxed) + 1;
        self.out.send(&FromChild::ToolCall {
            call_id: call.id.clone(),
            name: call.name().to_string(),
            arguments: call.arguments_value(),
        });
        let trace = self.trace.map(|agent| agent.tool_call(seq));
        let (output, fatal) = match self.registry.get(call.name()) {
            None => (ToolOutput::failed(self.unknown(call.name()), ""), None),
            Some(tool) => {
                if let Some(counter) = tool.about().counter {
                    self.stats.count(counter);
                }
                let called = crate::tools::CALL_TRACE
                    .scope(trace, tool.call(&call.function.arguments, &self.ctx));
                let called = AssertUnwindSafe(called);
                match called.catch_unwind().await.unwrap_or_else(|panic| {
                    Err(crate::tools::panicked(call.name(), panic.as_ref()))
                }) {
                    Ok(output) => (output, None),
                    Err(ToolError::RespondToModel(why)) => (ToolOutput::failed(why, ""), None),
                    Err(ToolError::Fatal(why)) => (ToolOutput::failed(why.clone(), ""), Some(why)),
                }
            }
        };
        let output = self.capped(output, &call.id).await;
        let changes = self
            .registry
            .get(call.name())
            .is_some_and(|tool| tool.about().changes_workspace);
        self.out.send(&FromChild::ToolResult {
            call_id: call.id.clone(),
            success: output.success,
            summary: output.summary(),
            changed: output.success && changes,
            bytes: output.content.len() as u64,
        });
        CallResult { output, fatal }
    }
}
