//! Which model a run uses, as plain values, and the one function that
//! builds it.

use std::path::PathBuf;
use std::sync::Arc;

use super::ChatModel;
use super::openai::{OpenAiClient, OpenAiSettings};
use super::scripted::{ScriptError, ScriptedModel};

#[derive(Debug, Clone)]
pub enum ModelConfig {
    /// `--model scripted:PATH`.
    Scripted { path: PathBuf },
    /// Any OpenAI-compatible endpoint.
    OpenAi(OpenAiSettings),
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
