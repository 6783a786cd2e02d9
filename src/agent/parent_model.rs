//! The model a child uses: every completion is asked of the parent over the
//! pipe, so the child needs no network, no endpoint and no API key.
//!
//! Also home of the stdin reader, because stdin carries the answers: it
//! routes each `llm_response` / `llm_error` to the request waiting for it,
//! and turns `cancel` or the end of stdin into the agent's cancel signal.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio::sync::oneshot;

use super::cancel::CancelCause;
use super::outbox::Outbox;

use crate::llm::{ChatModel, Completion, CompletionRequest, LlmError};
use crate::protocol::{
    DEFAULT_LINE_CAP, FromChild, LineReader, ModelFailure, ToChild, decode_line,
};
use crate::signal::StopSignal;

type Waiters = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Completion, LlmError>>>>>;
type McpWaiters = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, String>>>>>;

pub struct ParentModel {
    out: Outbox,
    waiting: Waiters,
    next_id: AtomicU64,
    mcp: ParentMcp,
}

/// The MCP servers the parent reaches for this agent: each call is asked
/// over the pipe (`mcp_call`) and answered by `mcp_result`.
#[derive(Clone)]
pub struct ParentMcp {
    out: Outbox,
    waiting: McpWaiters,
    next_id: Arc<AtomicU64>,
}

impl crate::tools::mcp::McpRelay for ParentMcp {
    fn call<'a>(
        &'a self,
        server: &'a str,
        tool: &'a str,
        arguments: Value,
    ) -> BoxFuture<'a, Result<Value, String>> {
        Box::pin(self.ask(server, tool, arguments))
    }
}

impl crate::tools::web::WebRelay for ParentMcp {
    fn call<'a>(&'a self, tool: &'a str, arguments: Value) -> BoxFuture<'a, Result<Value, String>> {
        Box::pin(self.exchange(|id| FromChild::WebCall {
            id,
            tool: tool.to_string(),
            arguments,
        }))
    }
}

impl ParentMcp {
    /// The server's result of `tool` with `arguments`, or why there is none.
    async fn ask(&self, server: &str, tool: &str, arguments: Value) -> Result<Value, String> {
        self.exchange(|id| FromChild::McpCall {
            id,
            server: server.to_string(),
            tool: tool.to_string(),
            arguments,
        })
        .await
    }

    /// Sends the call `asked` makes of its id, and waits for its answer:
    /// MCP and web calls share the ids and the waiters.
    async fn exchange(&self, asked: impl FnOnce(u64) -> FromChild) -> Result<Value, String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.waiting
            .lock()
            .map_err(|_| "the pipe to troupe is closed".to_string())?
            .insert(id, tx);
        self.out.send(&asked(id));
        rx.await
            .unwrap_or_else(|_| Err("the pipe to troupe closed before the answer".to_string()))
    }
}

impl ParentModel {
    /// The model, with the stdin reader started behind it.
    pub fn start(out: Outbox, cancel: StopSignal<CancelCause>) -> Self {
        let waiting: Waiters = Arc::default();
        let mcp_waiting: McpWaiters = Arc::default();
        tokio::spawn(read_stdin(
            Arc::clone(&waiting),
            Arc::clone(&mcp_waiting),
            cancel,
        ));
        ParentModel {
            mcp: ParentMcp {
                out: out.clone(),
                waiting: mcp_waiting,
                next_id: Arc::new(AtomicU64::new(1)),
            },
            out,
            waiting,
            next_id: AtomicU64::new(1),
        }
    }

    /// The MCP calls the parent makes for this agent, over the same pipe.
    pub fn mcp(&self) -> ParentMcp {
        self.mcp.clone()
    }

    async fn ask(&self, request: CompletionRequest) -> Result<Completion, LlmError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.waiting
            .lock()
            .map_err(|_| pipe_closed())?
            .insert(id, tx);
        self.out.send(&FromChild::LlmRequest {
            id,
            messages: request.messages,
            tools: request.tools,
            schema: request.schema,
        });
        rx.await.unwrap_or(Err(pipe_closed()))
    }
}

impl ChatModel for ParentModel {
    fn complete(&self, request: CompletionRequest) -> BoxFuture<'_, Result<Completion, LlmError>> {
        Box::pin(self.ask(request))
    }
}

async fn read_stdin(waiting: Waiters, mcp_waiting: McpWaiters, cancel: StopSignal<CancelCause>) {
    let mut lines = LineReader::new(
        tokio::io::BufReader::new(super::stdio::input()),
        DEFAULT_LINE_CAP,
    );
    loop {
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(e) => {
                crate::tell!("troupe-agent: reading from the parent failed: {e}");
                break;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        match decode_line::<ToChild>(&line) {
            Ok(ToChild::LlmResponse {
                id,
                message,
                usage,
                truncated,
            }) => {
                let completion = Completion {
                    message,
                    usage,
                    truncated,
                };
                answer(&waiting, id, Ok(completion));
            }
            Ok(ToChild::LlmError {
                id,
                message,
                retryable,
                kind,
            }) => answer(&waiting, id, Err(relayed(message, retryable, kind))),
            Ok(
                ToChild::McpResult { id, result, error } | ToChild::WebResult { id, result, error },
            ) => {
                let answer = match (result, error) {
                    (Some(result), _) => Ok(result),
                    (None, error) => Err(error.unwrap_or_else(|| "no result".to_string())),
                };
                let waiter = mcp_waiting.lock().ok().and_then(|mut w| w.remove(&id));
                if let Some(waiter) = waiter {
                    let _ = waiter.send(answer);
                }
            }
            Ok(ToChild::Cancel { reason }) => cancel.trigger(CancelCause::Parent(reason)),
            Ok(ToChild::Unknown) => {
                let kind = crate::protocol::codec::type_of(&line);
                crate::tell!("troupe-agent: ignoring a message of unknown type `{kind}`");
            }
            Err(e) => crate::tell!("troupe-agent: ignoring a bad line from the parent: {e}"),
        }
    }
    cancel.trigger(CancelCause::ParentGone);
    if let Ok(mut waiting) = waiting.lock() {
        waiting.clear();
    }
    if let Ok(mut waiting) = mcp_waiting.lock() {
        waiting.clear();
    }
}

/// A failure the parent reported, as the agent's model error.
fn relayed(message: String, retryable: bool, kind: ModelFailure) -> LlmError {
    match kind {
        ModelFailure::ContextExceeded => LlmError::ContextExceeded {
            url: String::new(),
            message,
        },
        ModelFailure::Other => LlmError::Relay { message, retryable },
    }
}

/// The parent went away while the agent waited for an answer.
fn pipe_closed() -> LlmError {
    LlmError::Relay {
        message: "the parent closed the pipe".to_string(),
        retryable: false,
    }
}

fn answer(waiting: &Waiters, id: u64, result: Result<Completion, LlmError>) {
    let waiter = waiting.lock().ok().and_then(|mut w| w.remove(&id));
    match waiter {
        Some(waiter) => {
            let _ = waiter.send(result);
        }
        None => crate::tell!("troupe-agent: an answer for request {id}, which is not waiting"),
    }
}
