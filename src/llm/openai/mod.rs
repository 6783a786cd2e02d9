//! The OpenAI-compatible chat-completions client.
//!
//! Written by hand on reqwest rather than with a general crate because real
//! providers break strict types; `wire` holds the lenient ones. Retries
//! live here, in the one process that talks to the endpoint, so a whole run
//! shares one policy and one connection pool.

mod echo;
mod governor;
mod limits;
mod retry;
mod wire;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures_util::future::BoxFuture;
use reqwest::header::{AUTHORIZATION, HeaderMap};

use super::{ChatModel, Completion, CompletionRequest, Delay, DelayObserver, LlmError, Retrying};
use crate::chat::Usage;
use crate::text::excerpt;

pub use echo::{ReasoningEcho, ReasoningEchoChoice};
pub use governor::{RateCaps, share_pauses_in};
pub use retry::RetryPolicy;

#[derive(Debug, Clone, PartialEq)]
pub struct OpenAiSettings {
    /// e.g. `https://api.openai.com/v1`; `/chat/completions` is appended.
    pub base_url: String,
    pub model: String,
    pub api_key: Option<String>,
    pub request_timeout: Duration,
    pub retry: RetryPolicy,
    pub reasoning_echo: ReasoningEcho,
    /// The longest answer asked for (`max_tokens`).
    pub max_output_tokens: Option<u32>,
    pub temperature: Option<f32>,
    /// Whether answers that must be JSON are constrained by a schema.
    pub structured: Structured,
    /// The model's price (`[prices."MODEL"]`), where one is set.
    pub price: Option<crate::llm::Price>,
    /// The user's bounds on the endpoint's pace.
    pub rate: RateCaps,
}

/// `--structured`: whether to ask the endpoint for answers that follow a
/// schema (`response_format`), for the plan and the verdict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Structured {
    /// For answers without tools; an endpoint that refuses it is asked
    /// without from then on.
    #[default]
    Auto,
    /// Always where there is a schema, tools or not.
    On,
    Off,
}

impl std::str::FromStr for Structured {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "auto" => Ok(Structured::Auto),
            "on" => Ok(Structured::On),
            "off" => Ok(Structured::Off),
            other => Err(format!(
                "`{other}` is not a structured mode; use auto, on or off"
            )),
        }
    }
}

pub struct OpenAiClient {
    http: reqwest::Client,
    url: String,
    settings: OpenAiSettings,
    turns: AtomicU64,
    /// Set once the endpoint refused `response_format`.
    no_schema: AtomicBool,
    /// The pace every client of this endpoint and key keeps.
    governor: Arc<governor::Governor>,
}

impl OpenAiClient {
    pub fn new(settings: OpenAiSettings) -> Result<Self, LlmError> {
        let url = format!(
            "{}/chat/completions",
            settings.base_url.trim_end_matches('/')
        );
        // reqwest is built without a crypto provider (see Cargo.toml): ring
        // is installed as the process's, once; a second call changes nothing.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(settings.request_timeout)
            .connect_timeout(Duration::from_secs(10))
            .tcp_keepalive(Duration::from_secs(30))
            .user_agent(concat!("troupe/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| LlmError::Transport {
                url: url.clone(),
                message: format!("cannot set up the HTTP client: {e}"),
            })?;
        let governor = governor::shared(&url, settings.api_key.as_deref(), settings.rate);
        Ok(OpenAiClient {
            http,
            url,
            governor,
            settings,
            turns: AtomicU64::new(0),
            no_schema: AtomicBool::new(false),
        })
    }

    fn body<'a>(&'a self, request: &CompletionRequest, with_schema: bool) -> wire::ChatRequest<'a> {
        let settings = &self.settings;
        // OpenAI's own endpoint wants `max_completion_tokens` (its reasoning
        // models refuse `max_tokens`); everyone else takes `max_tokens`.
        let openai = settings.base_url.contains("api.openai.com");
        let limit = settings.max_output_tokens;
        wire::ChatRequest {
            model: &settings.model,
            messages: request
                .messages
                .iter()
                .map(|m| wire::message_json(m, settings.reasoning_echo))
                .collect(),
            tools: request.tools.iter().map(wire::tool_json).collect(),
            max_tokens: limit.filter(|_| !openai),
            max_completion_tokens: limit.filter(|_| openai),
            temperature: settings.temperature,
            response_format: request
                .schema
                .as_ref()
                .filter(|_| with_schema)
                .map(wire::response_format),
        }
    }

    /// Whether this request asks for its schema.
    fn wants_schema(&self, request: &CompletionRequest) -> bool {
        request.schema.is_some()
            && match self.settings.structured {
                Structured::Off => false,
                Structured::On => true,
                Structured::Auto => {
                    request.tools.is_empty() && !self.no_schema.load(Ordering::Relaxed)
                }
            }
    }

    async fn complete_with_retries(
        &self,
        request: CompletionRequest,
    ) -> Result<Completion, LlmError> {
        let mut with_schema = self.wants_schema(&request);
        let mut body = self.body(&request, with_schema);
        let prompt_chars: usize = request.messages.iter().map(|m| m.text().len()).sum();
        let policy = self.settings.retry;
        let mut causes: Vec<String> = Vec::new();
        let mut timeouts = 0;
        loop {
            let failure = match self
                .attempt(&body, prompt_chars, request.on_delay.as_ref())
                .await
            {
                Ok(completion) => return Ok(completion),
                Err(failure) => failure,
            };
            let refused_schema = with_schema
                && self.settings.structured == Structured::Auto
                && matches!(
                    failure.error,
                    LlmError::Status {
                        status: 400 | 422,
                        ..
                    }
                );
            if refused_schema {
                self.no_schema.store(true, Ordering::Relaxed);
                with_schema = false;
                body = self.body(&request, false);
                continue;
            }
            causes.push(failure.error.to_string());
            let attempt = u32::try_from(causes.len()).unwrap_or(u32::MAX);
            let timed_out = failure.timed_out;
            timeouts += u32::from(timed_out);
            // A request that timed out is tried once more: a model that
            // generates for the whole timeout will do it again.
            let can_retry = failure.error.retryable()
                && attempt <= policy.retries
                && !(timed_out && timeouts > 1);
            let wait = failure
                .retry_after
                .unwrap_or_else(|| policy.backoff(attempt - 1));
            if can_retry && wait > retry::MAX_RETRY_AFTER {
                return Err(gave_up(
                    failure.error,
                    &causes,
                    Some(format!(
                        "the server asked to wait {:.0} s before a retry, more than the {} s troupe waits",
                        wait.as_secs_f64(),
                        retry::MAX_RETRY_AFTER.as_secs()
                    )),
                ));
            }
            if !can_retry {
                return Err(gave_up(failure.error, &causes, None));
            }
            if let Some(observer) = &request.on_delay {
                (observer.0)(&Delay::Retry(Retrying {
                    attempt,
                    of: policy.retries + 1,
                    reason: failure.short,
                    wait,
                }));
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// One request, once the governor lets it start.
    async fn attempt(
        &self,
        body: &wire::ChatRequest<'_>,
        prompt_chars: usize,
        told: Option<&DelayObserver>,
    ) -> Result<Completion, Failure> {
        let estimate = Usage::estimate(prompt_chars, 0).prompt;
        let permit = self.governor.admit(estimate, told).await?;
        let mut post = self.http.post(&self.url).json(body);
        if let Some(key) = &self.settings.api_key {
            post = post.header(AUTHORIZATION, format!("Bearer {key}"));
        }
        let response = post.send().await.map_err(|e| self.transport(e))?;
        let status = response.status();
        let headers = response.headers().clone();
        let text = response.text().await.map_err(|e| self.transport(e))?;
        let mut answer = governor::Answer {
            status: status.as_u16(),
            headers: &limits::RateHeaders::read(&headers),
            retry_after: None,
            tokens: None,
        };
        if !status.is_success() {
            let failure = self.status_failure(status.as_u16(), &headers, &text);
            answer.retry_after = failure.retry_after;
            permit.answered(&answer);
            return Err(failure);
        }
        let turn = self.turns.fetch_add(1, Ordering::Relaxed) + 1;
        let completion = self.decode(&text, turn, prompt_chars);
        answer.tokens = completion.as_ref().ok().map(|c| c.usage.total);
        permit.answered(&answer);
        completion.map_err(Failure::from)
    }

    fn transport(&self, error: reqwest::Error) -> Failure {
        if let Some(why) = refused(&error) {
            return Failure {
                short: why.clone(),
                ..Failure::from(LlmError::Unreachable {
                    url: self.settings.base_url.clone(),
                    why,
                })
            };
        }
        let timed_out = error.is_timeout();
        let what = if timed_out {
            format!(
                "no answer within {} s (--request-timeout)",
                self.settings.request_timeout.as_secs()
            )
        } else {
            error_chain(&error)
        };
        Failure {
            short: if timed_out {
                "timed out".to_string()
            } else {
                "no connection".to_string()
            },
            timed_out,
            ..Failure::from(LlmError::Transport {
                url: self.url.clone(),
                message: what,
            })
        }
    }

    fn status_failure(&self, status: u16, headers: &HeaderMap, body: &str) -> Failure {
        let mut message = body_message(body);
        if status == 401 || status == 403 {
            message
                .push_str(" (check the API key: --api-key-env names the variable that holds it)");
        }
        Failure {
            retry_after: retry::retry_after(headers),
            short: status.to_string(),
            ..Failure::from(LlmError::status(self.url.clone(), status, message))
        }
    }

    fn decode(&self, text: &str, turn: u64, prompt_chars: usize) -> Result<Completion, LlmError> {
        let malformed = |reason: String| LlmError::Malformed {
            url: self.url.clone(),
            reason,
            excerpt: excerpt(text, 300),
        };
        let response: wire::ChatResponse =
            serde_json::from_str(text).map_err(|e| malformed(e.to_string()))?;
        if let Some(error) = response.error {
            // A gateway's 200 that carries a server error is that error.
            let code = error_code(&error);
            return Err(match code {
                Some(code) if code == 429 || code >= 500 => {
                    LlmError::status(self.url.clone(), code, error_text(&error))
                }
                _ => malformed(format!("it carries an error: {}", error_text(&error))),
            });
        }
        let choice = response
            .choices
            .into_iter()
            .next()
            .ok_or_else(|| malformed("it has no choices[0].message".to_string()))?;
        let truncated = choice.finish_reason.as_deref() == Some("length");
        let message = choice
            .message
            .ok_or_else(|| malformed("it has no choices[0].message".to_string()))?
            .into_message(&turn.to_string());
        let usage = match response.usage {
            Some(usage) => usage.into_usage(self.settings.price.as_ref()),
            None => {
                let answer = message.text().len()
                    + message
                        .tool_calls
                        .iter()
                        .map(|c| c.function.arguments.len() + c.function.name.len())
                        .sum::<usize>();
                crate::llm::priced(
                    Usage::estimate(prompt_chars, answer),
                    self.settings.price.as_ref(),
                )
            }
        };
        Ok(Completion {
            message,
            usage,
            truncated,
        })
    }
}

impl ChatModel for OpenAiClient {
    fn complete(&self, request: CompletionRequest) -> BoxFuture<'_, Result<Completion, LlmError>> {
        Box::pin(self.complete_with_retries(request))
    }

    /// Any OpenAI-compatible endpoint speaks OpenAI's API.
    fn identity(&self) -> (&'static str, &str) {
        ("openai", &self.settings.model)
    }
}

/// One failed attempt, with the wait the server asked for.
struct Failure {
    error: LlmError,
    retry_after: Option<Duration>,
    /// A few words for a progress line: `503`, `timed out`.
    short: String,
    timed_out: bool,
}

impl From<LlmError> for Failure {
    fn from(error: LlmError) -> Self {
        Failure {
            error,
            retry_after: None,
            short: "failed".to_string(),
            timed_out: false,
        }
    }
}

/// The last error, saying how many attempts there were and what each
/// one met, and `why` the retries stopped when that is not plain.
fn gave_up(error: LlmError, causes: &[String], why: Option<String>) -> LlmError {
    if causes.len() <= 1 && why.is_none() {
        return error;
    }
    let mut note = match causes.len() {
        0 | 1 => String::new(),
        n => {
            let each: Vec<String> = causes
                .iter()
                .enumerate()
                .map(|(i, cause)| format!("{}. {}", i + 1, excerpt(cause, 200)))
                .collect();
            format!(" (gave up after {n} attempts: {})", each.join("; "))
        }
    };
    if let Some(why) = why {
        note.push_str(&format!(" ({why})"));
    }
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

/// The numeric code of an error object (`code` or `status`).
fn error_code(error: &serde_json::Value) -> Option<u16> {
    let found = error
        .get("code")
        .or_else(|| error.get("status"))
        .or_else(|| error.pointer("/error/code"));
    match found? {
        serde_json::Value::Number(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
        serde_json::Value::String(s) => s.parse().ok(),
        _ => None,
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

/// Why a connection was refused outright, if it was: the only transport
/// failure that no retry mends.
fn refused(error: &reqwest::Error) -> Option<String> {
    if !error.is_connect() {
        return None;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::ConnectionRefused => Some("connection refused".to_string()),
                _ => None,
            };
        }
        source = cause.source();
    }
    None
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
