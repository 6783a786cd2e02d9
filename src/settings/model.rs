//! The model flags both binaries take (`troupe` for every command that
//! talks to a model, `troupe-agent` stand-alone), and their resolution
//! into a plain `ModelConfig`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::{Lookup, pick};
use crate::llm::openai::{OpenAiSettings, ReasoningEchoChoice, RetryPolicy};
use crate::llm::{ModelConfig, ReasoningEcho};

const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
const DEFAULT_API_KEY_ENV: &str = "OPENAI_API_KEY";

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Model")]
pub struct ModelFlags {
    /// The model name at the endpoint (e.g. gpt-4o-mini, deepseek-chat,
    /// qwen2.5:7b), or scripted:PATH for the deterministic offline replay
    /// [env: TROUPE_MODEL].
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,

    /// The OpenAI-compatible endpoint; /chat/completions is appended
    /// [env: TROUPE_BASE_URL] [default: https://api.openai.com/v1].
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,

    /// The environment variable that holds the API key. Local servers
    /// (Ollama, llama.cpp) need none [env: TROUPE_API_KEY_ENV] [default:
    /// OPENAI_API_KEY].
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,

    /// Seconds to wait for one model answer.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub request_timeout: u64,

    /// Retries of a request that failed with 429, a 5xx or no answer, with
    /// exponential backoff that honours Retry-After.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub http_retries: u32,

    /// Whether assistant messages carry reasoning_content back to the
    /// endpoint: auto (always for DeepSeek, never for Mistral, otherwise as
    /// received), keep (as received), always ("" when none), never
    /// [env: TROUPE_REASONING_ECHO] [default: auto].
    #[arg(long, value_name = "MODE")]
    pub reasoning_echo: Option<ReasoningEchoChoice>,
}

impl ModelFlags {
    /// Whether a model is named at all.
    pub fn named(&self, lookup: &dyn Lookup) -> bool {
        self.model.is_some() || lookup.get("TROUPE_MODEL").is_some()
    }

    /// The variable that holds the API key.
    pub fn api_key_env(&self, lookup: &dyn Lookup) -> String {
        self.api_key_env
            .clone()
            .or_else(|| lookup.get("TROUPE_API_KEY_ENV").map(|s| s.value))
            .unwrap_or_else(|| DEFAULT_API_KEY_ENV.to_string())
    }

    /// The configured model, or an error that says how to name one.
    pub fn resolve(&self, lookup: &dyn Lookup) -> Result<ModelConfig, String> {
        let model: Option<String> = pick(self.model.clone(), lookup, "TROUPE_MODEL")?;
        let Some(model) = model
            .map(|m| m.trim().to_string())
            .filter(|m| !m.is_empty())
        else {
            return Err(
                "no model given: pass --model NAME (with --base-url for endpoints other than OpenAI), \
                 or --model scripted:PATH for the offline replay"
                    .to_string(),
            );
        };
        if let Some(path) = model.strip_prefix("scripted:") {
            return Ok(ModelConfig::Scripted {
                path: PathBuf::from(path),
            });
        }
        let base_url: String = pick(self.base_url.clone(), lookup, "TROUPE_BASE_URL")?
            .unwrap_or_else(|| DEFAULT_BASE_URL.to_string());
        if !base_url.starts_with("http://") && !base_url.starts_with("https://") {
            return Err(format!(
                "--base-url {base_url} is not an http:// or https:// URL"
            ));
        }
        let api_key_env = self.api_key_env(lookup);
        let api_key = std::env::var(&api_key_env)
            .ok()
            .filter(|key| !key.trim().is_empty());
        if api_key.is_none() {
            eprintln!(
                "troupe: {api_key_env} is not set; sending requests to {base_url} without an API key"
            );
        }
        let echo: Option<ReasoningEchoChoice> =
            pick(self.reasoning_echo, lookup, "TROUPE_REASONING_ECHO")?;
        let reasoning_echo = echo
            .and_then(|choice| choice.0)
            .unwrap_or_else(|| ReasoningEcho::for_endpoint(&base_url));
        Ok(ModelConfig::OpenAi(OpenAiSettings {
            base_url,
            model,
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
