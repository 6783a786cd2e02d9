//! Models: one trait, and the implementations behind it.
//!
//! The parent holds a model (the OpenAI-compatible HTTP client or the
//! scripted replay) and answers every child's requests through it; a child
//! holds the model that asks its parent over the pipe. Neither side can
//! tell which one it has, which is what makes the scripted model a faithful
//! stand-in for tests and demos.

pub mod config;
pub mod openai;
mod price;
pub mod scripted;

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::chat::{AgentKey, Message, ToolSpec, Usage};

pub use config::{ModelConfig, build_model};
pub use openai::ReasoningEcho;
pub use price::{Price, priced};

#[derive(Debug, Clone)]
pub struct CompletionRequest {
    pub agent: AgentKey,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    /// A JSON Schema the answer should follow, where the endpoint can
    /// constrain it (`response_format`); the answer is still checked.
    pub schema: Option<serde_json::Value>,
    /// Told of each retry and each wait for a rate limit, so that a
    /// person sees a model that struggles.
    pub on_delay: Option<DelayObserver>,
}

impl CompletionRequest {
    pub fn new(agent: AgentKey, messages: Vec<Message>, tools: Vec<ToolSpec>) -> Self {
        CompletionRequest {
            agent,
            messages,
            tools,
            schema: None,
            on_delay: None,
        }
    }
}

/// The model's turn: an assistant message and what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub message: Message,
    pub usage: Usage,
    /// The answer hit its length limit (`finish_reason: length`) and was
    /// cut off.
    pub truncated: bool,
}

/// One retry of a model request, for a progress line.
#[derive(Debug, Clone, PartialEq)]
pub struct Retrying {
    /// The attempt that failed, from 1.
    pub attempt: u32,
    /// How many attempts there may be in all.
    pub of: u32,
    pub reason: String,
    pub wait: Duration,
}

/// A model request held back by the endpoint's rate limits, or the
/// user's, as the wait begins.
#[derive(Debug, Clone, PartialEq)]
pub struct Waiting {
    /// What it waits for, in words.
    pub reason: String,
    /// How long, where that is known; else until a request in flight ends.
    pub wait: Option<Duration>,
}

/// Why a model request is not answered yet, beyond the model's own time.
#[derive(Debug, Clone, PartialEq)]
pub enum Delay {
    Retry(Retrying),
    Wait(Waiting),
}

impl std::fmt::Display for Delay {
    /// The words of a progress line: `model: 503, retrying in 1.0 s (2 of
    /// 5)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Delay::Retry(retry) => write!(
                f,
                "model: {}, retrying in {:.1} s ({} of {})",
                retry.reason,
                retry.wait.as_secs_f64(),
                retry.attempt + 1,
                retry.of
            ),
            Delay::Wait(Waiting {
                reason,
                wait: Some(wait),
            }) => write!(f, "model: waiting {:.1} s for {reason}", wait.as_secs_f64()),
            Delay::Wait(Waiting { reason, wait: None }) => {
                write!(f, "model: waiting for {reason}")
            }
        }
    }
}

/// What is told of every delay.
#[derive(Clone)]
pub struct DelayObserver(pub Arc<dyn Fn(&Delay) + Send + Sync>);

impl std::fmt::Debug for DelayObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DelayObserver")
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum LlmError {
    /// The endpoint answered with an error status. 429 and 5xx are retried
    /// by the HTTP client before this is returned.
    #[error("{url} answered {status}: {message}")]
    Status {
        url: String,
        status: u16,
        message: String,
        retryable: bool,
    },
    /// No answer at all: the connection was reset, or timed out.
    #[error("request to {url} failed: {message}")]
    Transport { url: String, message: String },
    /// Nothing listens at the endpoint: the server is not running, or
    /// the URL is wrong. Not worth a retry.
    #[error("cannot reach the model at {url}: {why}; is the server running? check --base-url")]
    Unreachable { url: String, why: String },
    /// An answer troupe cannot read as a chat completion.
    #[error("{url} sent a response that is not a chat completion ({reason}); it starts: {excerpt}")]
    Malformed {
        url: String,
        reason: String,
        excerpt: String,
    },
    /// The conversation no longer fits the model's context window.
    /// `url` is empty where `message` already says it all (relayed to a
    /// child).
    #[error("{}", too_long(url, message))]
    ContextExceeded { url: String, message: String },
    /// The scripted model has no answer for this agent.
    #[error("{0}")]
    Script(String),
    /// What stands between the agent and the model failed, as `message`
    /// says (for a child: its parent).
    #[error("{message}")]
    Relay { message: String, retryable: bool },
}

fn too_long(url: &str, message: &str) -> String {
    match url {
        "" => message.to_string(),
        url => {
            format!("{url} says the conversation is too long for the model's context: {message}")
        }
    }
}

impl LlmError {
    /// An endpoint's error status. 429 and every 5xx are worth retrying;
    /// other statuses will not change. A refusal in the words providers use
    /// for a conversation too long for the model is `ContextExceeded`.
    pub fn status(url: String, status: u16, message: String) -> Self {
        let lower = message.to_ascii_lowercase();
        let too_long = CONTEXT_WORDING.iter().any(|words| lower.contains(words));
        if matches!(status, 400 | 413 | 422) && too_long {
            return LlmError::ContextExceeded { url, message };
        }
        LlmError::Status {
            retryable: status == 429 || (500..=599).contains(&status),
            url,
            status,
            message,
        }
    }

    /// Whether trying the same request again later could succeed.
    pub fn retryable(&self) -> bool {
        match self {
            LlmError::Status { retryable, .. } | LlmError::Relay { retryable, .. } => *retryable,
            LlmError::Transport { .. } => true,
            LlmError::Malformed { .. }
            | LlmError::Script(_)
            | LlmError::ContextExceeded { .. }
            | LlmError::Unreachable { .. } => false,
        }
    }
}

/// How OpenAI, DeepSeek, Mistral, SGLang, vLLM and llama.cpp say that a
/// conversation is longer than the model's context.
const CONTEXT_WORDING: &[&str] = &[
    "context length",
    "context_length",
    "context window",
    "context size",
    "exceed_context",
    "maximum context",
    "prompt is too long",
    "too many tokens",
];

/// A chat model. Object-safe so the parent can hold whichever one the
/// configuration names.
pub trait ChatModel: Send + Sync {
    fn complete(&self, request: CompletionRequest) -> BoxFuture<'_, Result<Completion, LlmError>>;

    /// Who serves the model and its name, as a model request's span
    /// names them (`gen_ai.provider.name`, `gen_ai.request.model`).
    fn identity(&self) -> (&'static str, &str) {
        ("unknown", "unknown")
    }
}
