//! Models: one trait, and the implementations behind it.
//!
//! The parent holds a model (the OpenAI-compatible HTTP client or the
//! scripted replay) and answers every child's requests through it; a child
//! holds the model that asks its parent over the pipe. Neither side can
//! tell which one it has, which is what makes the scripted model a faithful
//! stand-in for tests and demos.

pub mod config;
pub mod openai;
pub mod scripted;

use futures_util::future::BoxFuture;

use crate::chat::{AgentKey, Message, ToolSpec, Usage};

pub use config::{ModelConfig, build_model};
pub use openai::ReasoningEcho;

#[derive(Debug, Clone)]
pub struct CompletionRequest {
    pub agent: AgentKey,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
}

/// The model's turn: an assistant message and what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub message: Message,
    pub usage: Usage,
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
    /// No answer at all: connection refused, reset, timed out.
    #[error("request to {url} failed: {message}")]
    Transport { url: String, message: String },
    /// An answer troupe cannot read as a chat completion.
    #[error("{url} sent a response that is not a chat completion ({reason}); it starts: {excerpt}")]
    Malformed {
        url: String,
        reason: String,
        excerpt: String,
    },
    /// The scripted model has no answer for this agent.
    #[error("{0}")]
    Script(String),
    /// What stands between the agent and the model failed, as `message`
    /// says (for a child: its parent).
    #[error("{message}")]
    Relay { message: String, retryable: bool },
}

impl LlmError {
    /// An endpoint's error status. 429 and every 5xx are worth retrying;
    /// other statuses will not change.
    pub fn status(url: String, status: u16, message: String) -> Self {
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
            LlmError::Malformed { .. } | LlmError::Script(_) => false,
        }
    }
}

/// A chat model. Object-safe so the parent can hold whichever one the
/// configuration names.
pub trait ChatModel: Send + Sync {
    fn complete(&self, request: CompletionRequest) -> BoxFuture<'_, Result<Completion, LlmError>>;
}
