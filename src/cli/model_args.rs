//! The model flags every command that talks to a model shares, and their
//! resolution into a plain `ModelConfig`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::UsageError;
use crate::llm::config::ReasoningEchoChoice;
use crate::llm::openai::{OpenAiSettings, RetryPolicy};
use crate::llm::{ModelConfig, ReasoningEcho};

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Model")]
pub struct ModelArgs {
    /// The model name at the endpoint (e.g. gpt-4o-mini, deepseek-chat,
    /// qwen2.5:7b), or scripted:PATH for the deterministic offline replay.
    #[arg(long, env = "TROUPE_MODEL", value_name = "NAME")]
    pub model: Option<String>,

    /// The OpenAI-compatible endpoint; /chat/completions is appended.
    #[arg(
        long,
        env = "TROUPE_BASE_URL",
        value_name = "URL",
        default_value = "https://api.openai.com/v1"
    )]
    pub base_url: String,

    /// The environment variable that holds the API key. Local servers
    /// (Ollama, llama.cpp) need none.
    #[arg(
        long,
        value_name = "VAR",
        env = "TROUPE_API_KEY_ENV",
        default_value = "OPENAI_API_KEY"
    )]
    pub api_key_env: String,

    /// Seconds to wait for one model answer.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub request_timeout: u64,

    /// Retries of a request that failed with 429, a 5xx or no answer, with
    /// exponential backoff that honours Retry-After.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub http_retries: u32,

    /// Whether assistant messages carry reasoning_content back to the
    /// endpoint: auto (always for DeepSeek, never for Mistral, otherwise as
    /// received), keep (as received), always ("" when none), never.
    #[arg(
        long,
        value_name = "MODE",
        env = "TROUPE_REASONING_ECHO",
        default_value = "auto"
    )]
    pub reasoning_echo: ReasoningEchoChoice,
}

impl ModelArgs {
    /// The configured model, or a usage error that says how to name one.
    pub fn resolve(&self) -> Result<ModelConfig, UsageError> {
        let Some(model) = self
            .model
            .as_deref()
            .map(str::trim)
            .filter(|m| !m.is_empty())
        else {
            return Err(UsageError(
                "no model given: pass --model NAME (with --base-url for endpoints other than OpenAI), \
                 or --model scripted:PATH for the offline replay"
                    .to_string(),
            ));
        };
        if let Some(path) = model.strip_prefix("scripted:") {
            return Ok(ModelConfig::Scripted {
                path: PathBuf::from(path),
            });
        }
        if !self.base_url.starts_with("http://") && !self.base_url.starts_with("https://") {
            return Err(UsageError(format!(
                "--base-url {} is not an http:// or https:// URL",
                self.base_url
            )));
        }
        let api_key = std::env::var(&self.api_key_env)
            .ok()
            .filter(|key| !key.trim().is_empty());
        if api_key.is_none() {
            eprintln!(
                "troupe: {} is not set; sending requests to {} without an API key",
                self.api_key_env, self.base_url
            );
        }
        let reasoning_echo = self
            .reasoning_echo
            .0
            .unwrap_or_else(|| ReasoningEcho::for_endpoint(&self.base_url));
        Ok(ModelConfig::OpenAi(OpenAiSettings {
            base_url: self.base_url.clone(),
            model: model.to_string(),
            api_key,
            request_timeout: Duration::from_secs(self.request_timeout.max(1)),
            retry: RetryPolicy {
                retries: self.http_retries,
                ..RetryPolicy::default()
            },
            reasoning_echo,
        }))
    }
}
