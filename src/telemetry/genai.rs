//! A model request as the GenAI semantic conventions name it: a client
//! span `chat <model>` with the provider, the model, the tokens of the
//! answer and why it ended, and each retry as an event.

use std::sync::Arc;

use opentelemetry::KeyValue;

use super::Span;
use crate::llm::{ChatModel, Completion, CompletionRequest, Delay, DelayObserver, LlmError};
use crate::protocol::TraceParent;

/// `model.complete(request)`, in a span under `parent` when there is one.
pub async fn complete(
    parent: Option<TraceParent>,
    model: &dyn ChatModel,
    mut request: CompletionRequest,
) -> Result<Completion, LlmError> {
    // Untraced, a request costs nothing more than itself.
    if parent.is_none() {
        return model.complete(request).await;
    }
    let (provider, name) = model.identity();
    let span = Span::under(parent, format!("chat {name}")).client();
    span.set("gen_ai.operation.name", "chat");
    span.set("gen_ai.provider.name", provider);
    span.set("gen_ai.request.model", name.to_string());
    span.set("gen_ai.agent.id", request.agent.to_string());
    let told = request.on_delay.take();
    let delays = span.clone();
    request.on_delay = Some(DelayObserver(Arc::new(move |delay: &Delay| {
        match delay {
            Delay::Retry(retry) => delays.event(
                "gen_ai.request.retry",
                vec![
                    KeyValue::new("troupe.retry.attempt", i64::from(retry.attempt)),
                    KeyValue::new("troupe.retry.of", i64::from(retry.of)),
                    KeyValue::new("troupe.retry.reason", retry.reason.clone()),
                    KeyValue::new("troupe.retry.wait_ms", retry.wait.as_millis() as i64),
                ],
            ),
            Delay::Wait(wait) => {
                let mut attributes = vec![KeyValue::new("troupe.wait.reason", wait.reason.clone())];
                if let Some(wait) = wait.wait {
                    attributes.push(KeyValue::new("troupe.wait.ms", wait.as_millis() as i64));
                }
                delays.event("troupe.rate_limit.wait", attributes);
            }
        }
        if let Some(told) = &told {
            (told.0)(delay);
        }
    })));
    let result = model.complete(request).await;
    match &result {
        Ok(completion) => {
            span.tokens(completion.usage);
            span.set(
                "gen_ai.response.finish_reasons",
                opentelemetry::Value::Array(opentelemetry::Array::String(vec![
                    opentelemetry::StringValue::from(finish_reason(completion)),
                ])),
            );
            span.succeed();
        }
        Err(error) => {
            span.set("error.type", error_type(error));
            span.fail(error.to_string());
        }
    }
    span.end();
    result
}

/// Why the answer ended, in the OpenAI words the conventions use.
fn finish_reason(completion: &Completion) -> &'static str {
    match (
        completion.truncated,
        completion.message.tool_calls.is_empty(),
    ) {
        (true, _) => "length",
        (false, false) => "tool_calls",
        (false, true) => "stop",
    }
}

fn error_type(error: &LlmError) -> &'static str {
    match error {
        LlmError::ContextExceeded { .. } => "context_exceeded",
        _ if error.retryable() => "retryable",
        _ => "failed",
    }
}
