//! A step's `powers`: what its worker may do, narrower than what every
//! worker of the run may (the run's ceiling, `run::ceiling`, checks that).
//! Read here for its shape only: tool names a worker has, paths of the
//! right kind, positive numbers. Without `powers` a step gets what every
//! step gets.

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The tools a worker has, by name: a step's `tools` names some of these.
pub const WORKER_TOOLS: &[&str] = &[
    "read_file",
    "write_file",
    "edit_file",
    "list_dir",
    "search_workspace",
    "run_command",
    "finish_task",
];

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Powers {
    /// The worker's built-in tools (`finish_task` always stays).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// The MCP servers, by name, of those the run gives workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<Vec<String>>,
    /// `"none"`, or the `host:port`s it may reach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
    /// The hosts its worker's web_fetch may read (`*`, `*.domain`, host,
    /// host:port), within the run's `--allow-web`; `[]` for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web: Option<Vec<crate::web::rules::HostRule>>,
    /// Absolute paths it may read besides the run's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<PathBuf>,
    /// Paths inside the workspace, relative to it, that it may write (and
    /// nothing else of it); the whole workspace without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write: Option<Vec<PathBuf>>,
    /// Seconds, model turns and tokens of its worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Network {
    /// Only `"none"` is a word it takes.
    Word(String),
    Hosts(Vec<String>),
}

impl Powers {
    /// `value` as powers, or what is wrong with it, in words.
    pub fn from_value(value: &serde_json::Value) -> Result<Powers, String> {
        let powers: Powers = serde_json::from_value(value.clone()).map_err(|e| e.to_string())?;
        for tool in powers.tools.iter().flatten() {
            if !WORKER_TOOLS.contains(&tool.as_str()) {
                return Err(format!(
                    "`tools` names `{tool}`, which workers do not have (they have {})",
                    WORKER_TOOLS.join(", ")
                ));
            }
        }
        if let Some(Network::Word(word)) = &powers.network
            && word != "none"
        {
            return Err(format!(
                "`network` is \"none\" or a list of host:port, not \"{word}\""
            ));
        }
        if let Some(Network::Hosts(hosts)) = &powers.network
            && let Some(host) = hosts.iter().find(|h| !is_host_port(h))
        {
            return Err(format!("`network` names `{host}`, which is not host:port"));
        }
        let plain = |p: &PathBuf| {
            p.is_absolute() && p.components().all(|c| !matches!(c, Component::ParentDir))
        };
        if let Some(path) = powers.read.iter().find(|p| !plain(p)) {
            return Err(format!(
                "`read` names {}, which is not an absolute path (without ..)",
                path.display()
            ));
        }
        if let Some(path) = powers.read.iter().find(|p| of_the_kernel(p)) {
            return Err(format!(
                "`read` names {}: /proc, /sys and /dev are not given to a step (in its agent they are the agent's own, not these)",
                path.display()
            ));
        }
        if let Some(path) = powers.write.iter().flatten().find(|p| !inside(p)) {
            return Err(format!(
                "`write` names {}, which is not a path inside the workspace (relative, without ..)",
                path.display()
            ));
        }
        if let Some(path) = powers.write.iter().flatten().find(|p| guarded(p)) {
            return Err(format!(
                "`write` names {}: {} are the repository's and troupe's, at any depth, and no step is given them",
                path.display(),
                GUARDED.join(", ")
            ));
        }
        let zero = [
            powers.timeout,
            powers.max_tokens,
            powers.max_turns.map(u64::from),
        ];
        if zero.contains(&Some(0)) {
            return Err("`timeout`, `max_turns` and `max_tokens` must be above 0".to_string());
        }
        Ok(powers)
    }

    /// The powers in one line, as `troupe plan` and `validate` show them.
    pub fn describe(&self) -> String {
        let mut said = Vec::new();
        let list = |items: &[String]| match items.is_empty() {
            true => "none".to_string(),
            false => items.join(", "),
        };
        if let Some(tools) = &self.tools {
            said.push(format!("tools {} (and finish_task)", list(tools)));
        }
        if let Some(write) = &self.write {
            let paths: Vec<String> = write.iter().map(|p| p.display().to_string()).collect();
            said.push(format!("writes only {}", list(&paths)));
        }
        if !self.read.is_empty() {
            let paths: Vec<String> = self.read.iter().map(|p| p.display().to_string()).collect();
            said.push(format!("reads {}", list(&paths)));
        }
        if let Some(mcp) = &self.mcp {
            said.push(format!("MCP servers {}", list(mcp)));
        }
        if self.network.is_some() {
            said.push(format!("network {}", list(self.hosts())));
        }
        if let Some(web) = &self.web {
            let hosts: Vec<String> = web.iter().map(ToString::to_string).collect();
            said.push(format!("web {}", list(&hosts)));
        }
        for (name, value) in [
            ("timeout", self.timeout.map(|s| format!("{s} s"))),
            ("max_turns", self.max_turns.map(|n| n.to_string())),
            ("max_tokens", self.max_tokens.map(|n| n.to_string())),
        ] {
            if let Some(value) = value {
                said.push(format!("{name} {value}"));
            }
        }
        match said.is_empty() {
            true => "those of every step".to_string(),
            false => said.join("; "),
        }
    }

    /// The hosts it asks to reach, if any.
    pub fn hosts(&self) -> &[String] {
        match &self.network {
            Some(Network::Hosts(hosts)) => hosts,
            _ => &[],
        }
    }
}

/// `host:port` with a port that is a number.
fn is_host_port(text: &str) -> bool {
    text.rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0))
}

/// What no step may be given to write, wherever it stands in the
/// workspace: the repository, troupe's configuration and records.
const GUARDED: [&str; 5] = [
    ".git",
    ".troupe",
    "troupe.toml",
    crate::protocol::RESULTS_DIR,
    crate::protocol::SUBAGENT_DIR,
];

/// Whether `path` is, or passes through, one of the `GUARDED` names.
fn guarded(path: &Path) -> bool {
    path.components().any(|c| match c {
        Component::Normal(name) => GUARDED.iter().any(|g| name == *g),
        _ => false,
    })
}

/// Whether `path` lies in one of the kernel's own trees, which name
/// another thing in an agent's namespaces than in troupe's.
fn of_the_kernel(path: &Path) -> bool {
    ["/proc", "/sys", "/dev"]
        .iter()
        .any(|tree| path.starts_with(tree))
}

/// A relative path that stays inside where it is joined to.
fn inside(path: &Path) -> bool {
    path.components().next().is_some()
        && path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn powers_are_read_for_their_shape() {
        let powers = Powers::from_value(&json!({
            "tools": ["read_file", "finish_task"], "write": ["docs/"], "max_turns": 5,
            "network": ["127.0.0.1:8080"], "read": ["/opt/data"]
        }))
        .unwrap();
        assert_eq!(powers.hosts(), ["127.0.0.1:8080"]);
        let wrong = [
            (json!({"tools": ["rm_rf"]}), "workers do not have"),
            (
                json!({"write": ["../x"]}),
                "not a path inside the workspace",
            ),
            (
                json!({"write": ["/etc"]}),
                "not a path inside the workspace",
            ),
            (json!({"read": ["data"]}), "not an absolute path"),
            (
                json!({"read": ["/usr/../root"]}),
                "not an absolute path (without ..)",
            ),
            (json!({"network": "all"}), "not \"all\""),
            (json!({"network": ["example.org"]}), "not host:port"),
            (json!({"max_turns": 0}), "above 0"),
            (json!({"sudo": true}), "unknown field"),
        ];
        for (value, said) in wrong {
            let error = Powers::from_value(&value).unwrap_err();
            assert!(error.contains(said), "{value}: {error}");
        }
    }
}
