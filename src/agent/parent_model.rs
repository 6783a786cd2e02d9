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
use tokio::sync::oneshot;

use super::outbox::Outbox;

use crate::llm::{ChatModel, Completion, CompletionRequest, LlmError};
use crate::protocol::{
    DEFAULT_LINE_CAP, FromChild, LineReader, ModelFailure, ToChild, decode_line,
};
use crate::signal::StopSignal;

type Waiters = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Completion, LlmError>>>>>;

pub struct ParentModel {
    out: Outbox,
    waiting: Waiters,
    next_id: AtomicU64,
}

impl ParentModel {
    /// The model, with the stdin reader started behind it.
    pub fn start(out: Outbox, cancel: StopSignal) -> Self {
        let waiting: Waiters = Arc::default();
        tokio::spawn(read_stdin(Arc::clone(&waiting), cancel));
        ParentModel {
            out,
            waiting,
            next_id: AtomicU64::new(1),
        }
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

async fn read_stdin(waiting: Waiters, cancel: StopSignal) {
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
            Ok(ToChild::Cancel { reason }) => cancel.trigger(reason.as_str()),
            Ok(ToChild::Unknown) => {
                let kind = crate::protocol::codec::type_of(&line);
                crate::tell!("troupe-agent: ignoring a message of unknown type `{kind}`");
            }
            Err(e) => crate::tell!("troupe-agent: ignoring a bad line from the parent: {e}"),
        }
    }
    cancel.trigger("the parent closed the pipe");
    if let Ok(mut waiting) = waiting.lock() {
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
