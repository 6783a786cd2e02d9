//! The model flags of every `troupe` command that talks to a model, the
//! per-role ones of a team run, and their resolution into a plain
//! `ModelConfig` per role.
//!
//! Each role's setting comes from, in order: its role flag
//! (`--worker-model`), its role variable (`TROUPE_WORKER_MODEL`), its
//! `[roles.worker]` key in the config file, and then the setting every
//! role shares (`--model`, `TROUPE_MODEL`, `model`).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::{Lookup, pick};
use crate::chat::Actor;
use crate::llm::openai::{OpenAiSettings, RateCaps, ReasoningEchoChoice, RetryPolicy, Structured};
use crate::llm::{ModelConfig, ReasoningEcho};
use crate::protocol::AgentLimits;

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

    /// Seconds to wait for one model answer; a request that times out is
    /// tried once more, no more.
    #[arg(long, value_name = "SECS", default_value_t = 300, allow_negative_numbers = true, value_parser = crate::settings::numbers::seconds)]
    pub request_timeout: u64,

    /// Retries of a request that failed with 429, a 5xx or no answer, with
    /// exponential backoff that honours Retry-After.
    #[arg(long, value_name = "N", default_value_t = 4, allow_negative_numbers = true, value_parser = crate::settings::numbers::count::<u32>)]
    pub http_retries: u32,

    /// Whether assistant messages carry reasoning_content back to the
    /// endpoint: auto (always for DeepSeek, never for Mistral, otherwise as
    /// received), keep (as received), always ("" when none), never
    /// [env: TROUPE_REASONING_ECHO] [default: auto].
    #[arg(long, value_name = "MODE")]
    pub reasoning_echo: Option<ReasoningEchoChoice>,

    /// The longest answer the model may give, in tokens (sent as
    /// max_tokens) [env: TROUPE_MAX_OUTPUT_TOKENS] [default: 4096 for the
    /// planner and workers, 2048 for reviewers].
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = crate::settings::numbers::positive::<u32>)]
    pub max_output_tokens: Option<u32>,

    /// Sampling temperature sent to the endpoint [env: TROUPE_TEMPERATURE]
    /// [default: the endpoint's].
    #[arg(long, value_name = "T")]
    pub temperature: Option<f32>,

    /// Tokens the model's context holds: an agent's conversation is
    /// compacted before it outgrows them [env: TROUPE_CONTEXT_WINDOW]
    /// [default: unknown, compacted when the endpoint refuses].
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = crate::settings::numbers::context_tokens)]
    pub context_window: Option<u32>,

    /// Ask the endpoint for plans and verdicts that follow their schema
    /// (response_format): auto (for answers without tools, and no more
    /// once the endpoint refuses), on, off [env: TROUPE_STRUCTURED]
    /// [default: auto].
    #[arg(long, value_name = "MODE")]
    pub structured: Option<Structured>,

    /// Requests a minute troupe sends to each endpoint, all agents
    /// together, spaced evenly; the endpoint's own limits, from its
    /// x-ratelimit-* headers and Retry-After, are kept besides
    /// [env: TROUPE_MAX_REQUESTS_PER_MINUTE] [default: the endpoint's].
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = crate::settings::numbers::positive::<u32>)]
    pub max_requests_per_minute: Option<u32>,

    /// Tokens a minute troupe sends to each endpoint, all agents together
    /// (a request's prompt, as estimated before it goes, then as the
    /// answer counts it) [env: TROUPE_MAX_TOKENS_PER_MINUTE] [default: the
    /// endpoint's].
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = crate::settings::numbers::positive::<u32>)]
    pub max_tokens_per_minute: Option<u32>,
}

/// The model of one role of a team run, where it is not the shared one.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "A model per role")]
pub struct RoleFlags {
    /// The Planner's model [env: TROUPE_PLANNER_MODEL].
    #[arg(long, value_name = "NAME")]
    pub planner_model: Option<String>,
    /// The Planner's endpoint [env: TROUPE_PLANNER_BASE_URL].
    #[arg(long, value_name = "URL")]
    pub planner_base_url: Option<String>,
    /// The variable of the Planner's API key [env: TROUPE_PLANNER_API_KEY_ENV].
    #[arg(long, value_name = "VAR")]
    pub planner_api_key_env: Option<String>,
    /// The Workers' model [env: TROUPE_WORKER_MODEL].
    #[arg(long, value_name = "NAME")]
    pub worker_model: Option<String>,
    /// The Workers' endpoint [env: TROUPE_WORKER_BASE_URL].
    #[arg(long, value_name = "URL")]
    pub worker_base_url: Option<String>,
    /// The variable of the Workers' API key [env: TROUPE_WORKER_API_KEY_ENV].
    #[arg(long, value_name = "VAR")]
    pub worker_api_key_env: Option<String>,
    /// The Reviewers' model [env: TROUPE_REVIEWER_MODEL].
    #[arg(long, value_name = "NAME")]
    pub reviewer_model: Option<String>,
    /// The Reviewers' endpoint [env: TROUPE_REVIEWER_BASE_URL].
    #[arg(long, value_name = "URL")]
    pub reviewer_base_url: Option<String>,
    /// The variable of the Reviewers' API key [env:
    /// TROUPE_REVIEWER_API_KEY_ENV].
    #[arg(long, value_name = "VAR")]
    pub reviewer_api_key_env: Option<String>,
}

impl RoleFlags {
    /// The role's flags: model, base URL, key variable.
    fn of(&self, role: Actor) -> [&Option<String>; 3] {
        match role {
            Actor::Planner => [
                &self.planner_model,
                &self.planner_base_url,
                &self.planner_api_key_env,
            ],
            Actor::Worker => [
                &self.worker_model,
                &self.worker_base_url,
                &self.worker_api_key_env,
            ],
            Actor::Reviewer => [
                &self.reviewer_model,
                &self.reviewer_base_url,
                &self.reviewer_api_key_env,
            ],
        }
    }
}

/// A cap from its flag, variable or file key, which must be above zero.
fn positive(flag: Option<u32>, lookup: &dyn Lookup, env: &str) -> Result<Option<u32>, String> {
    super::pick_with(flag, lookup, env, |text| match text.parse::<u32>() {
        Ok(0) => Err("must be at least 1".to_string()),
        parsed => parsed.map_err(|e| e.to_string()),
    })
}

/// Why a cap in money (`flag`) cannot hold for `model`.
pub fn needs_price(flag: &str, model: &str) -> String {
    format!(
        "{flag} needs a price for every model it caps; [prices] names none for {model} (add [prices.\"{model}\"] input and output, in dollars per million tokens, to troupe.toml)"
    )
}

/// One role's model, resolved.
#[derive(Debug, Clone)]
pub struct RoleModel {
    pub config: ModelConfig,
    /// The variable that holds its API key, which no agent may be given.
    pub api_key_env: String,
    /// Tokens its context holds, if known.
    pub context_window: Option<u32>,
    /// What the user should hear before it is used (no API key).
    pub notice: Option<String>,
}

impl RoleModel {
    /// Its model's name when it is an endpoint's with no price: what
    /// `--max-cost` cannot count.
    pub fn unpriced(&self) -> Option<&str> {
        match &self.config {
            ModelConfig::OpenAi(settings) if settings.price.is_none() => Some(&settings.model),
            _ => None,
        }
    }

    /// The settings of `role` as the variables that give them back
    /// (`TROUPE_WORKER_MODEL`, ...), for a run's record: the key's
    /// variable by its name only, a script by its absolute path.
    pub fn as_variables(&self, role: Actor) -> Vec<(String, String)> {
        let role = role.as_str().to_ascii_uppercase();
        let key = |name: &str| format!("TROUPE_{role}_{name}");
        let mut variables = vec![(key("API_KEY_ENV"), self.api_key_env.clone())];
        if let Some(window) = self.context_window {
            variables.push((key("CONTEXT_WINDOW"), window.to_string()));
        }
        match &self.config {
            ModelConfig::Scripted { path } => {
                let path = std::path::absolute(path).unwrap_or_else(|_| path.clone());
                variables.push((key("MODEL"), format!("scripted:{}", path.display())));
            }
            ModelConfig::OpenAi(settings) => {
                variables.push((key("MODEL"), settings.model.clone()));
                variables.push((key("BASE_URL"), settings.base_url.clone()));
                if let Some(tokens) = settings.max_output_tokens {
                    variables.push((key("MAX_OUTPUT_TOKENS"), tokens.to_string()));
                }
                if let Some(temperature) = settings.temperature {
                    variables.push((key("TEMPERATURE"), temperature.to_string()));
                }
            }
        }
        variables
    }

    /// Tells an agent of this model what its context holds and how long
    /// an answer may be.
    pub fn bound(&self, limits: &mut AgentLimits) {
        limits.context_window = self.context_window;
        limits.max_output_tokens = self.config.max_output_tokens();
    }
}

/// The settings of one role: the role's own, then the shared ones.
struct Resolver<'a> {
    flags: &'a ModelFlags,
    role_flags: [&'a Option<String>; 3],
    role: &'a str,
    lookup: &'a dyn Lookup,
}

impl Resolver<'_> {
    /// The text setting `key` (`MODEL`): role flag, role variable or file
    /// key, then `shared` (the shared flag), the shared variable or file key.
    fn text(&self, index: usize, key: &str, shared: &Option<String>) -> Option<String> {
        self.role_flags[index]
            .clone()
            .or_else(|| self.role_env(key).map(|s| s.value))
            .or_else(|| shared.clone())
            .or_else(|| self.lookup.get(&format!("TROUPE_{key}")).map(|s| s.value))
    }

    /// A setting only the config file and the variables give per role.
    fn parsed<T>(&self, key: &str, shared: Option<T>) -> Result<Option<T>, String>
    where
        T: std::str::FromStr,
        T::Err: std::fmt::Display,
    {
        let own = match self.role_env(key) {
            Some(sourced) => Some(
                sourced
                    .value
                    .parse()
                    .map_err(|e| format!("{}: {e}", sourced.origin))?,
            ),
            None => None,
        };
        match own {
            Some(value) => Ok(Some(value)),
            None => pick(shared, self.lookup, &format!("TROUPE_{key}")),
        }
    }

    fn role_env(&self, key: &str) -> Option<super::Sourced> {
        self.lookup.get(&format!("TROUPE_{}_{key}", self.role))
    }
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

    /// The model every role shares, or an error that says how to name one.
    pub fn resolve(&self, lookup: &dyn Lookup) -> Result<ModelConfig, String> {
        Ok(self.resolve_single(Actor::Worker, lookup)?.config)
    }

    /// The model of `role` where no per-role flags exist (`troupe plan`,
    /// `troupe spawn`), its notice said.
    pub fn resolve_single(&self, role: Actor, lookup: &dyn Lookup) -> Result<RoleModel, String> {
        let resolved = self.resolve_role(role, &RoleFlags::default(), lookup)?;
        if let Some(notice) = &resolved.notice {
            crate::tell!("troupe: {notice}");
        }
        Ok(resolved)
    }

    /// The model of `role`.
    pub fn resolve_role(
        &self,
        role: Actor,
        roles: &RoleFlags,
        lookup: &dyn Lookup,
    ) -> Result<RoleModel, String> {
        let name = role.as_str().to_ascii_uppercase();
        let r = Resolver {
            flags: self,
            role_flags: roles.of(role),
            role: &name,
            lookup,
        };
        let model = r.text(0, "MODEL", &self.model);
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
        let api_key_env = r
            .text(2, "API_KEY_ENV", &self.api_key_env)
            .unwrap_or_else(|| DEFAULT_API_KEY_ENV.to_string());
        let context_window = r.parsed("CONTEXT_WINDOW", r.flags.context_window)?;
        if let Some(path) = model.strip_prefix("scripted:") {
            return Ok(RoleModel {
                config: ModelConfig::Scripted {
                    path: PathBuf::from(path),
                },
                api_key_env,
                context_window,
                notice: None,
            });
        }
        let base_url = r
            .text(1, "BASE_URL", &self.base_url)
            .unwrap_or_else(|| DEFAULT_BASE_URL.to_string());
        if !base_url.starts_with("http://") && !base_url.starts_with("https://") {
            return Err(format!(
                "--base-url {base_url} is not an http:// or https:// URL"
            ));
        }
        if let Some(root) = base_url
            .trim_end_matches('/')
            .strip_suffix("/chat/completions")
        {
            return Err(format!(
                "--base-url {base_url} ends in /chat/completions, which troupe appends itself; give {root}"
            ));
        }
        let api_key = std::env::var(&api_key_env)
            .ok()
            .filter(|key| !key.trim().is_empty());
        let prices = lookup.prices();
        let price = prices.get(&model).copied();
        if let Some(price) = price {
            price
                .check()
                .map_err(|e| format!("[prices.\"{model}\"]: {e}"))?;
        }
        let unpriced = (price.is_none() && !prices.is_empty()).then(|| {
            format!("[prices] names no price for {model}: its cost is recorded as unknown")
        });
        let keyless = api_key.is_none().then(|| {
            format!("{api_key_env} is not set; sending requests to {base_url} without an API key")
        });
        let notice = match (keyless, unpriced) {
            (Some(a), Some(b)) => Some(format!("{a}; {b}")),
            (a, b) => a.or(b),
        };
        let echo: Option<ReasoningEchoChoice> =
            pick(self.reasoning_echo, lookup, "TROUPE_REASONING_ECHO")?;
        let reasoning_echo = echo
            .and_then(|choice| choice.0)
            .unwrap_or_else(|| ReasoningEcho::for_endpoint(&base_url));
        let default_tokens = match role {
            Actor::Reviewer => 2048,
            Actor::Planner | Actor::Worker => 4096,
        };
        let max_output_tokens = r
            .parsed("MAX_OUTPUT_TOKENS", self.max_output_tokens)?
            .unwrap_or(default_tokens);
        let settings = OpenAiSettings {
            base_url,
            model,
            api_key,
            request_timeout: Duration::from_secs(self.request_timeout.max(1)),
            retry: RetryPolicy {
                retries: self.http_retries,
                ..RetryPolicy::default()
            },
            reasoning_echo,
            max_output_tokens: Some(max_output_tokens),
            temperature: r.parsed("TEMPERATURE", self.temperature)?,
            structured: pick(self.structured, lookup, "TROUPE_STRUCTURED")?.unwrap_or_default(),
            price,
            rate: RateCaps {
                requests_per_minute: positive(
                    self.max_requests_per_minute,
                    lookup,
                    "TROUPE_MAX_REQUESTS_PER_MINUTE",
                )?,
                tokens_per_minute: positive(
                    self.max_tokens_per_minute,
                    lookup,
                    "TROUPE_MAX_TOKENS_PER_MINUTE",
                )?,
            },
        };
        Ok(RoleModel {
            config: ModelConfig::OpenAi(settings),
            api_key_env,
            context_window,
            notice,
        })
    }
}
