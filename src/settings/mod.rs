//! Settings that come from more than a flag: each may also come from its
//! environment variable (`TROUPE_MODEL`, ...) and, for `troupe`, from the
//! config file. A flag beats its variable, which beats the file.
//!
//! The flags are parsed as they are typed (`Option`s, no defaults); one
//! resolve step per group of flags (`model` here, the agents' in `cli`)
//! asks a `Lookup` for what the flag left open and turns it all into a
//! plain configuration. Nothing is written into the process environment.

pub mod model;
pub mod numbers;

use std::str::FromStr;

/// A setting's value from somewhere other than its flag, and where from,
/// for an error message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sourced {
    pub value: String,
    /// `$TROUPE_SANDBOX`, or `sandbox in /path/troupe.toml`.
    pub origin: String,
}

/// Where settings come from besides their flags.
pub trait Lookup {
    /// The setting whose variable is `env` (e.g. `TROUPE_MODEL`).
    fn get(&self, env: &str) -> Option<Sourced>;

    /// A setting that is a list of paths: `:`-separated in its variable,
    /// as in `PATH`.
    fn paths(&self, env: &str) -> Option<Vec<std::path::PathBuf>> {
        from_environment(env).map(|sourced| split_paths(&sourced.value))
    }

    /// The MCP servers a config file names (`[mcp_servers.NAME]`).
    fn mcp_servers(&self) -> Vec<crate::mcp::config::ServerConfig> {
        Vec::new()
    }

    /// `[prices."MODEL"]`: what each model's tokens cost.
    fn prices(&self) -> std::collections::BTreeMap<String, crate::llm::Price> {
        std::collections::BTreeMap::new()
    }

    /// The `[web]` table of a config file.
    fn web(&self) -> crate::web::WebConfig {
        crate::web::WebConfig::default()
    }

    /// The config file the settings were read from, if one was.
    fn config_file(&self) -> Option<&std::path::Path> {
        None
    }
}

/// The environment alone: what `troupe-agent` stand-alone uses.
pub struct Environment;

impl Lookup for Environment {
    fn get(&self, env: &str) -> Option<Sourced> {
        from_environment(env)
    }
}

/// `env` from the environment, when set and not empty.
pub fn from_environment(env: &str) -> Option<Sourced> {
    let value = std::env::var(env).ok().filter(|v| !v.trim().is_empty())?;
    Some(Sourced {
        value,
        origin: format!("${env}"),
    })
}

/// A `:`-separated list of paths, empty parts left out.
pub fn split_paths(value: &str) -> Vec<std::path::PathBuf> {
    value
        .split(':')
        .filter(|part| !part.is_empty())
        .map(std::path::PathBuf::from)
        .collect()
}

/// An amount of dollars from its flag, else from `env` or its file key,
/// checked as the flag is.
pub fn money(flag: Option<f64>, lookup: &dyn Lookup, env: &str) -> Result<Option<f64>, String> {
    pick_with(flag, lookup, env, numbers::dollars)
}

/// `flag`, or else the setting `env` from `lookup`, parsed as the flag
/// would be; a bad value says where it came from.
pub fn pick<T>(flag: Option<T>, lookup: &dyn Lookup, env: &str) -> Result<Option<T>, String>
where
    T: FromStr,
    T::Err: std::fmt::Display,
{
    pick_with(flag, lookup, env, |text| {
        text.parse().map_err(|e: T::Err| e.to_string())
    })
}

/// `pick`, the setting parsed by `parse`.
pub fn pick_with<T>(
    flag: Option<T>,
    lookup: &dyn Lookup,
    env: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Option<T>, String> {
    if flag.is_some() {
        return Ok(flag);
    }
    lookup
        .get(env)
        .map(|sourced| parse(&sourced.value).map_err(|e| format!("{}: {e}", sourced.origin)))
        .transpose()
}
