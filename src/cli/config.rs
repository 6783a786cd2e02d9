//! The config file: settings a user keeps instead of repeating flags.
//!
//! The file `--config FILE` or `$TROUPE_CONFIG` names, else `troupe.toml`
//! in the current directory, else `~/.config/troupe/config.toml`;
//! `TROUPE_CONFIG=` (empty) reads none. Each key stands for a flag, and
//! `Sources` answers for the flags left open: the key's environment
//! variable first, then the file (see `crate::settings`). Paths in the file
//! are relative to it.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::UsageError;
use crate::settings::{Lookup, Sourced, from_environment, split_paths};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    model: Option<String>,
    base_url: Option<String>,
    api_key_env: Option<String>,
    reasoning_echo: Option<String>,
    launcher: Option<String>,
    sandbox: Option<String>,
    read_scope: Option<String>,
    durability: Option<String>,
    allow_read: Option<Vec<PathBuf>>,
    agent_bin: Option<PathBuf>,
    prompts_dir: Option<PathBuf>,
    max_output_tokens: Option<u32>,
    temperature: Option<f32>,
    context_window: Option<u32>,
    structured: Option<String>,
    max_requests_per_minute: Option<u32>,
    max_tokens_per_minute: Option<u32>,
    max_cost: Option<f64>,
    max_agent_cost: Option<f64>,
    otlp_endpoint: Option<String>,
    /// `[roles.planner]`, `[roles.worker]`, `[roles.reviewer]`.
    #[serde(default)]
    roles: std::collections::BTreeMap<Role, RoleConfig>,
    /// `[mcp_servers.NAME]`, each checked as it is read.
    #[serde(default, deserialize_with = "crate::mcp::config::read_table")]
    mcp_servers: Vec<crate::mcp::config::ServerConfig>,
    /// `[prices."MODEL"]`: dollars per million tokens.
    #[serde(default)]
    prices: std::collections::BTreeMap<String, crate::llm::Price>,
    /// `[web]`: the hosts agents' web_fetch may reach, and `[web.search]`.
    #[serde(default)]
    web: crate::web::WebConfig,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Role {
    Planner,
    Worker,
    Reviewer,
}

/// One role's model, where it is not the shared one.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RoleConfig {
    model: Option<String>,
    base_url: Option<String>,
    api_key_env: Option<String>,
    max_output_tokens: Option<u32>,
    temperature: Option<f32>,
    context_window: Option<u32>,
}

/// The environment, then the config file.
#[derive(Debug, Default)]
pub struct Sources {
    file: ConfigFile,
    /// The file read, if any.
    path: Option<PathBuf>,
}

impl Sources {
    /// Finds and reads the config file, if there is one.
    pub fn load(args: &[std::ffi::OsString]) -> Result<Self, UsageError> {
        let Some(path) = locate(args)? else {
            return Ok(Sources::default());
        };
        let text = std::fs::read_to_string(&path).map_err(|e| {
            UsageError::Said(format!(
                "cannot read the config file {}: {e}",
                path.display()
            ))
        })?;
        let file: ConfigFile = toml::from_str(&text).map_err(|e| {
            UsageError::Said(format!(
                "the config file {} is not valid: {e}",
                path.display()
            ))
        })?;
        Ok(Sources {
            file,
            path: Some(path),
        })
    }

    /// The directory the file's relative paths are relative to.
    fn base(&self) -> &Path {
        self.path
            .as_deref()
            .and_then(Path::parent)
            .unwrap_or(Path::new("."))
    }

    /// A model setting from the file: a `scripted:PATH` is relative to the
    /// file, like its other paths.
    fn model_value(&self, model: &Option<String>) -> Option<String> {
        let model = model.as_ref()?;
        Some(match model.strip_prefix("scripted:") {
            Some(script) => format!("scripted:{}", self.base().join(script).display()),
            None => model.clone(),
        })
    }

    /// The file's value for the setting of variable `env`, as text.
    fn file_value(&self, env: &str) -> Option<(&'static str, String)> {
        let f = &self.file;
        let base = self.base();
        let path = |p: &PathBuf| base.join(p).display().to_string();
        let (key, value) = match env {
            "TROUPE_MODEL" => ("model", self.model_value(&f.model)),
            "TROUPE_BASE_URL" => ("base_url", f.base_url.clone()),
            "TROUPE_API_KEY_ENV" => ("api_key_env", f.api_key_env.clone()),
            "TROUPE_REASONING_ECHO" => ("reasoning_echo", f.reasoning_echo.clone()),
            "TROUPE_LAUNCHER" => ("launcher", f.launcher.clone()),
            "TROUPE_SANDBOX" => ("sandbox", f.sandbox.clone()),
            "TROUPE_READ_SCOPE" => ("read_scope", f.read_scope.clone()),
            "TROUPE_DURABILITY" => ("durability", f.durability.clone()),
            "TROUPE_AGENT_BIN" => ("agent_bin", f.agent_bin.as_ref().map(path)),
            "TROUPE_PROMPTS_DIR" => ("prompts_dir", f.prompts_dir.as_ref().map(path)),
            "TROUPE_MAX_OUTPUT_TOKENS" => ("max_output_tokens", text(f.max_output_tokens)),
            "TROUPE_TEMPERATURE" => ("temperature", text(f.temperature)),
            "TROUPE_CONTEXT_WINDOW" => ("context_window", text(f.context_window)),
            "TROUPE_STRUCTURED" => ("structured", f.structured.clone()),
            "TROUPE_MAX_REQUESTS_PER_MINUTE" => {
                ("max_requests_per_minute", text(f.max_requests_per_minute))
            }
            "TROUPE_MAX_COST" => ("max_cost", text(f.max_cost)),
            "TROUPE_MAX_AGENT_COST" => ("max_agent_cost", text(f.max_agent_cost)),
            "TROUPE_MAX_TOKENS_PER_MINUTE" => {
                ("max_tokens_per_minute", text(f.max_tokens_per_minute))
            }
            "TROUPE_OTLP_ENDPOINT" => ("otlp_endpoint", f.otlp_endpoint.clone()),
            _ => return self.role_value(env),
        };
        value.map(|value| (key, value))
    }
}

impl Sources {
    /// `TROUPE_<ROLE>_<KEY>` from the file's `[roles.<role>]`.
    fn role_value(&self, env: &str) -> Option<(&'static str, String)> {
        let rest = env.strip_prefix("TROUPE_")?;
        let (role, key) = [
            ("PLANNER_", Role::Planner),
            ("WORKER_", Role::Worker),
            ("REVIEWER_", Role::Reviewer),
        ]
        .into_iter()
        .find_map(|(prefix, role)| rest.strip_prefix(prefix).map(|key| (role, key)))?;
        let r = self.file.roles.get(&role)?;
        let (name, value) = match key {
            "MODEL" => ("model", self.model_value(&r.model)),
            "BASE_URL" => ("base_url", r.base_url.clone()),
            "API_KEY_ENV" => ("api_key_env", r.api_key_env.clone()),
            "MAX_OUTPUT_TOKENS" => ("max_output_tokens", text(r.max_output_tokens)),
            "TEMPERATURE" => ("temperature", text(r.temperature)),
            "CONTEXT_WINDOW" => ("context_window", text(r.context_window)),
            _ => return None,
        };
        value.map(|value| (name, value))
    }
}

/// A number from the file as the text a flag would have.
fn text<T: ToString>(value: Option<T>) -> Option<String> {
    value.map(|v| v.to_string())
}

impl Lookup for Sources {
    fn get(&self, env: &str) -> Option<Sourced> {
        from_environment(env).or_else(|| {
            let (key, value) = self.file_value(env)?;
            let file = self.path.as_deref().unwrap_or(Path::new("troupe.toml"));
            Some(Sourced {
                value,
                origin: format!("{key} in {}", file.display()),
            })
        })
    }

    /// The file's lists are lists: a path in one may hold a `:`.
    fn paths(&self, env: &str) -> Option<Vec<PathBuf>> {
        if let Some(sourced) = from_environment(env) {
            return Some(split_paths(&sourced.value));
        }
        let listed = match env {
            "TROUPE_ALLOW_READ" => self.file.allow_read.as_ref()?,
            _ => return None,
        };
        Some(listed.iter().map(|p| self.base().join(p)).collect())
    }

    fn config_file(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    fn mcp_servers(&self) -> Vec<crate::mcp::config::ServerConfig> {
        self.file.mcp_servers.clone()
    }

    fn prices(&self) -> std::collections::BTreeMap<String, crate::llm::Price> {
        self.file.prices.clone()
    }

    fn web(&self) -> crate::web::WebConfig {
        self.file.web.clone()
    }
}

/// `--config FILE` (or `--config=FILE`) from the raw arguments, then
/// `$TROUPE_CONFIG`, then the usual places; `None` when there is no file.
fn locate(args: &[std::ffi::OsString]) -> Result<Option<PathBuf>, UsageError> {
    let mut given = None;
    let mut words = args.iter().map(|a| a.to_string_lossy().into_owned());
    while let Some(word) = words.next() {
        if word == "--config" {
            given = words.next();
        } else if let Some(path) = word.strip_prefix("--config=") {
            given = Some(path.to_string());
        }
    }
    let from_env = std::env::var("TROUPE_CONFIG").ok();
    if given.is_none() && from_env.as_deref() == Some("") {
        return Ok(None);
    }
    if let Some(path) = given.or(from_env) {
        let path = PathBuf::from(path);
        if !path.is_file() {
            return Err(UsageError::Said(format!(
                "the config file {} does not exist",
                path.display()
            )));
        }
        return Ok(Some(path));
    }
    let home =
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config/troupe/config.toml"));
    Ok([Some(PathBuf::from("troupe.toml")), home]
        .into_iter()
        .flatten()
        .find(|p| p.is_file()))
}
