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

use std::future::Future;
use std::pin::Pin;

use crate::chat::{Message, ToolSpec, Usage};

pub use config::{ModelConfig, ReasoningEcho, build_model};

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Which agent a request is for. Only the scripted model looks at it (its
/// rules match on role, step and attempt, each agent with its own cursor);
/// a real endpoint never sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AgentKey {
    /// `planner`, `worker` or `reviewer`.
    pub role: String,
    /// The step id in a team run; the agent id for `troupe spawn`.
    pub step: Option<String>,
    /// 1-based attempt of the step.
    pub attempt: Option<u32>,
}

impl std::fmt::Display for AgentKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.role)?;
        if let Some(step) = &self.step {
            write!(f, " of step {step}")?;
        }
        if let Some(attempt) = self.attempt {
            write!(f, " (attempt {attempt})")?;
        }
        Ok(())
    }
}

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
    /// The parent reported a failure for a child's request.
    #[error("the model request failed in the parent: {message}")]
    Parent { message: String, retryable: bool },
    /// The parent went away while a child waited for an answer.
    #[error("the parent closed the pipe")]
    PipeClosed,
}

impl LlmError {
    /// Whether trying the same request again later could succeed.
    pub fn retryable(&self) -> bool {
        match self {
            LlmError::Status { retryable, .. } | LlmError::Parent { retryable, .. } => *retryable,
            LlmError::Transport { .. } => true,
            LlmError::Malformed { .. } | LlmError::Script(_) | LlmError::PipeClosed => false,
        }
    }
}

/// A chat model. Object-safe so the parent can hold whichever one the
/// configuration names.
pub trait ChatModel: Send + Sync {
    fn complete(&self, request: CompletionRequest) -> BoxFuture<'_, Result<Completion, LlmError>>;
}
