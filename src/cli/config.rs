//! The config file: settings a user keeps instead of repeating flags.
//!
//! The file `--config FILE` or `$TROUPE_CONFIG` names, else `troupe.toml`
//! in the current directory, else `~/.config/troupe/config.toml`;
//! `TROUPE_CONFIG=` (empty) reads none. Each key
//! stands for a flag; a flag on the command line beats the environment
//! variable, which beats the file. It is read before the flags are parsed
//! and handed on as those variables, so every command sees the same
//! settings the same way.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::UsageError;

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
    allow_read: Option<Vec<PathBuf>>,
    agent_bin: Option<PathBuf>,
    prompts_dir: Option<PathBuf>,
}

/// Finds and reads the config file, and sets the variables of the keys it
/// sets that the environment does not. Must run before any thread starts.
pub fn apply(args: &[std::ffi::OsString]) -> Result<Option<PathBuf>, UsageError> {
    let Some(path) = locate(args)? else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(&path).map_err(|e| {
        UsageError(format!(
            "cannot read the config file {}: {e}",
            path.display()
        ))
    })?;
    let file: ConfigFile = toml::from_str(&text).map_err(|e| {
        UsageError(format!(
            "the config file {} is not valid: {e}",
            path.display()
        ))
    })?;
    let relative = |p: PathBuf| -> String {
        let base = path.parent().unwrap_or(Path::new("."));
        base.join(p).display().to_string()
    };
    let settings = [
        ("TROUPE_MODEL", file.model),
        ("TROUPE_BASE_URL", file.base_url),
        ("TROUPE_API_KEY_ENV", file.api_key_env),
        ("TROUPE_REASONING_ECHO", file.reasoning_echo),
        ("TROUPE_LAUNCHER", file.launcher),
        ("TROUPE_SANDBOX", file.sandbox),
        ("TROUPE_READ_SCOPE", file.read_scope),
        (
            "TROUPE_ALLOW_READ",
            file.allow_read.map(|paths| {
                let paths: Vec<String> = paths.into_iter().map(relative).collect();
                paths.join(":")
            }),
        ),
        ("TROUPE_AGENT_BIN", file.agent_bin.map(relative)),
        ("TROUPE_PROMPTS_DIR", file.prompts_dir.map(relative)),
    ];
    for (name, value) in settings {
        if let Some(value) = value
            && std::env::var_os(name).is_none()
        {
            // SAFETY: called from `main` before the runtime or any other
            // thread exists, so nothing reads the environment concurrently.
            unsafe { std::env::set_var(name, value) };
        }
    }
    Ok(Some(path))
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
            return Err(UsageError(format!(
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
