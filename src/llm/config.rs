//! Which model a run uses, as plain values, and the one function that
//! builds it.

use std::path::PathBuf;
use std::sync::Arc;

use super::ChatModel;
use super::openai::{OpenAiClient, OpenAiSettings};
use super::scripted::{ScriptError, ScriptedModel};

#[derive(Debug, Clone, PartialEq)]
pub enum ModelConfig {
    /// `--model scripted:PATH`.
    Scripted { path: PathBuf },
    /// Any OpenAI-compatible endpoint.
    OpenAi(OpenAiSettings),
}

impl ModelConfig {
    /// The longest answer requested of the model, in tokens, if bounded.
    pub fn max_output_tokens(&self) -> Option<u32> {
        match self {
            ModelConfig::Scripted { .. } => None,
            ModelConfig::OpenAi(settings) => settings.max_output_tokens,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ModelSetupError {
    #[error(transparent)]
    Script(#[from] ScriptError),
    #[error("cannot set up the model client: {0}")]
    Client(#[from] super::LlmError),
}

pub fn build_model(config: &ModelConfig) -> Result<Arc<dyn ChatModel>, ModelSetupError> {
    Ok(match config {
        ModelConfig::Scripted { path } => Arc::new(ScriptedModel::load(path)?),
        ModelConfig::OpenAi(settings) => Arc::new(OpenAiClient::new(settings.clone())?),
    })
}
