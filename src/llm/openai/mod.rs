//! The OpenAI-compatible chat-completions client.
//!
//! Written by hand on reqwest rather than with a general crate because real
//! providers break strict types; `wire` holds the lenient ones. Retries
//! live here, in the one process that talks to the endpoint, so a whole run
//! shares one policy and one connection pool.

mod echo;
mod retry;
mod wire;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::future::BoxFuture;
use reqwest::header::{AUTHORIZATION, HeaderMap};

use crate::text::excerpt;

use super::{ChatModel, Completion, CompletionRequest, LlmError};

pub use echo::{ReasoningEcho, ReasoningEchoChoice};
pub use retry::RetryPolicy;

#[derive(Debug, Clone)]
pub struct OpenAiSettings {
    /// e.g. `https://api.openai.com/v1`; `/chat/completions` is appended.
    pub base_url: String,
    pub model: String,
    pub api_key: Option<String>,
    pub request_timeout: Duration,
    pub retry: RetryPolicy,
    pub reasoning_echo: ReasoningEcho,
}

pub struct OpenAiClient {
    http: reqwest::Client,
    url: String,
    settings: OpenAiSettings,
    turns: AtomicU64,
}

impl OpenAiClient {
    pub fn new(settings: OpenAiSettings) -> Result<Self, LlmError> {
        let url = format!(
            "{}/chat/completions",
            settings.base_url.trim_end_matches('/')
        );
        let http = reqwest::Client::builder()
            .timeout(settings.request_timeout)
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("troupe/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| LlmError::Transport {
                url: url.clone(),
                message: format!("cannot set up the HTTP client: {e}"),
            })?;
        Ok(OpenAiClient {
            http,
            url,
            settings,
            turns: AtomicU64::new(0),
        })
    }

    async fn complete_with_retries(
        &self,
        request: CompletionRequest,
    ) -> Result<Completion, LlmError> {
        let body = wire::ChatRequest {
            model: &self.settings.model,
            messages: request
                .messages
                .iter()
                .map(|m| wire::message_json(m, self.settings.reasoning_echo))
                .collect(),
            tools: request.tools.iter().map(wire::tool_json).collect(),
        };
        let policy = self.settings.retry;
        let mut retry = 0;
        loop {
            let failure = match self.attempt(&body).await {
                Ok(completion) => return Ok(completion),
                Err(failure) => failure,
            };
            let can_retry = failure.error.retryable() && retry < policy.retries;
            let wait = failure.retry_after.unwrap_or_else(|| policy.backoff(retry));
            if !can_retry || wait > retry::MAX_RETRY_AFTER {
                return Err(with_attempts(failure.error, retry + 1));
            }
            tokio::time::sleep(wait).await;
            retry += 1;
        }
    }

    async fn attempt(&self, body: &wire::ChatRequest<'_>) -> Result<Completion, Failure> {
        let mut post = self.http.post(&self.url).json(body);
        if let Some(key) = &self.settings.api_key {
            post = post.header(AUTHORIZATION, format!("Bearer {key}"));
        }
        let response = post.send().await.map_err(|e| self.transport(e))?;
        let status = response.status();
        let headers = response.headers().clone();
        let text = response.text().await.map_err(|e| self.transport(e))?;
        if !status.is_success() {
            return Err(self.status_failure(status.as_u16(), &headers, &text));
        }
        let turn = self.turns.fetch_add(1, Ordering::Relaxed) + 1;
        self.decode(&text, turn).map_err(Failure::from)
    }

    fn transport(&self, error: reqwest::Error) -> Failure {
        let what = if error.is_timeout() {
            format!(
                "no answer within {} s (--request-timeout)",
                self.settings.request_timeout.as_secs()
            )
        } else {
            error_chain(&error)
        };
        Failure::from(LlmError::Transport {
            url: self.url.clone(),
            message: what,
        })
    }

    fn status_failure(&self, status: u16, headers: &HeaderMap, body: &str) -> Failure {
        let mut message = body_message(body);
        if status == 401 || status == 403 {
            message
                .push_str(" (check the API key: --api-key-env names the variable that holds it)");
        }
        Failure {
            error: LlmError::status(self.url.clone(), status, message),
            retry_after: retry::retry_after(headers),
        }
    }

    fn decode(&self, text: &str, turn: u64) -> Result<Completion, LlmError> {
        let malformed = |reason: String| LlmError::Malformed {
            url: self.url.clone(),
            reason,
            excerpt: excerpt(text, 300),
        };
        let response: wire::ChatResponse =
            serde_json::from_str(text).map_err(|e| malformed(e.to_string()))?;
        if let Some(error) = response.error {
            return Err(malformed(format!(
                "it carries an error: {}",
                error_text(&error)
            )));
        }
        let message = response
            .choices
            .into_iter()
            .next()
            .and_then(|choice| choice.message)
            .ok_or_else(|| malformed("it has no choices[0].message".to_string()))?;
        Ok(Completion {
            message: message.into_message(&turn.to_string()),
            usage: response.usage.unwrap_or_default().into_usage(),
        })
    }
}

impl ChatModel for OpenAiClient {
    fn complete(&self, request: CompletionRequest) -> BoxFuture<'_, Result<Completion, LlmError>> {
        Box::pin(self.complete_with_retries(request))
    }
}

/// One failed attempt, with the wait the server asked for.
struct Failure {
    error: LlmError,
    retry_after: Option<Duration>,
}

impl From<LlmError> for Failure {
    fn from(error: LlmError) -> Self {
        Failure {
            error,
            retry_after: None,
        }
    }
}

fn with_attempts(error: LlmError, attempts: u32) -> LlmError {
    if attempts <= 1 {
        return error;
    }
    let note = format!(" (gave up after {attempts} attempts)");
    match error {
        LlmError::Status {
            url,
            status,
            message,
            retryable,
        } => LlmError::Status {
            url,
            status,
            message: message + &note,
            retryable,
        },
        LlmError::Transport { url, message } => LlmError::Transport {
            url,
            message: message + &note,
        },
        other => other,
    }
}

/// The human part of an error body: `error.message`, `message` or `error`
/// when the body is JSON that has one, else the start of the body.
fn body_message(body: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(body) {
        Ok(value) => error_text(&value),
        Err(_) if body.trim().is_empty() => "(empty body)".to_string(),
        Err(_) => excerpt(body, 300),
    }
}

fn error_text(value: &serde_json::Value) -> String {
    let found = value
        .pointer("/error/message")
        .or_else(|| value.get("message"))
        .or_else(|| value.get("error"))
        .or_else(|| value.get("detail"));
    match found {
        Some(serde_json::Value::String(text)) => text.clone(),
        Some(other) => excerpt(&other.to_string(), 300),
        None => excerpt(&value.to_string(), 300),
    }
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
