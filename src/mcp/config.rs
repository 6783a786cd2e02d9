//! An MCP server as the user configures it (`[mcp_servers.NAME]` in
//! troupe.toml, `--mcp NAME=COMMAND`), and as the parent hands it to an
//! agent in its task file.

use serde::{Deserialize, Serialize};

use crate::protocol::AgentRole;

/// The default time a server may take to start, or to answer one call.
pub const DEFAULT_TIMEOUT_SECS: u64 = 60;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServer {
    /// The table's key: the `<server>` in `mcp__<server>__<tool>`.
    #[serde(default)]
    pub name: String,
    /// The program of a stdio server, found on PATH.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// A remote (streamable HTTP) server's address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The environment variables the server gets besides PATH, HOME,
    /// LANG, TERM, TZ and TMPDIR, by name; their values come from troupe's
    /// environment and never reach a file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// The roles whose agents get its tools.
    #[serde(default = "workers_only")]
    pub roles: Vec<AgentRole>,
    #[serde(default, skip_serializing_if = "ToolFilter::is_open")]
    pub tools: ToolFilter,
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
    /// The server needs the network: troupe runs it, outside the agents'
    /// sandboxes, and relays their calls.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub network: bool,
}

/// Which of a server's tools an agent gets: those in `allow` (all when it
/// is absent), less those in `deny`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolFilter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

impl ToolFilter {
    fn is_open(&self) -> bool {
        self.allow.is_none() && self.deny.is_empty()
    }

    pub fn admits(&self, tool: &str) -> bool {
        let allowed = self
            .allow
            .as_ref()
            .is_none_or(|allow| allow.iter().any(|t| t == tool));
        allowed && !self.deny.iter().any(|t| t == tool)
    }
}

fn workers_only() -> Vec<AgentRole> {
    vec![AgentRole::Worker]
}

fn default_timeout() -> u64 {
    DEFAULT_TIMEOUT_SECS
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum McpConfigError {
    #[error(
        "--mcp {0}: expected NAME=COMMAND [ARGS...] (e.g. --mcp git='python3 -m mcp_server_git')"
    )]
    NoName(String),
    #[error("--mcp {0}: the command cannot be split into words (an unclosed quote?)")]
    BadWords(String),
    #[error("MCP server `{0}`: its name may hold only letters, digits, `_` and `-`")]
    BadName(String),
    #[error(
        "MCP server `{0}`: give it a `command` (a stdio server) or a `url`, not both and not neither"
    )]
    NoWay(String),
    #[error("MCP server `{0}` is given twice")]
    Twice(String),
}

impl McpServer {
    /// A stdio server from `--mcp NAME=COMMAND [ARGS...]`, its words
    /// split as a shell would.
    pub fn from_flag(flag: &str) -> Result<McpServer, McpConfigError> {
        let (name, command) = flag
            .split_once('=')
            .filter(|(name, command)| !name.is_empty() && !command.trim().is_empty())
            .ok_or_else(|| McpConfigError::NoName(flag.to_string()))?;
        let mut words =
            shlex::split(command).ok_or_else(|| McpConfigError::BadWords(flag.to_string()))?;
        let program = words.remove(0);
        let server = McpServer {
            name: name.to_string(),
            command: Some(program),
            args: words,
            url: None,
            env: Vec::new(),
            roles: workers_only(),
            tools: ToolFilter::default(),
            timeout_secs: DEFAULT_TIMEOUT_SECS,
            network: false,
        };
        server.check()?;
        Ok(server)
    }

    /// Refuses what cannot run: a bad name, no way to reach it, or one
    /// that needs the parent.
    pub fn check(&self) -> Result<(), McpConfigError> {
        let plain = !self.name.is_empty()
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !plain {
            return Err(McpConfigError::BadName(self.name.clone()));
        }
        if self.command.is_some() == self.url.is_some() {
            return Err(McpConfigError::NoWay(self.name.clone()));
        }
        Ok(())
    }

    /// Whether troupe reaches the server for the agents (a `url`, or one
    /// that needs the network), rather than each agent starting its own.
    pub fn is_remote(&self) -> bool {
        self.url.is_some() || self.network
    }

    pub fn serves(&self, role: AgentRole) -> bool {
        self.roles.contains(&role)
    }
}

/// Every server, the config file's and the flags', each checked once.
pub fn gather(
    from_file: Vec<McpServer>,
    flags: &[String],
) -> Result<Vec<McpServer>, McpConfigError> {
    let mut servers = from_file;
    for flag in flags {
        servers.push(McpServer::from_flag(flag)?);
    }
    for (i, server) in servers.iter().enumerate() {
        server.check()?;
        if servers[..i].iter().any(|s| s.name == server.name) {
            return Err(McpConfigError::Twice(server.name.clone()));
        }
    }
    Ok(servers)
}

/// The name the model sees: `mcp__<server>__<tool>`, cut to the 64
/// characters endpoints take, with anything but letters, digits, `_` and
/// `-` made `_`.
pub fn tool_name(server: &str, tool: &str) -> String {
    let name: String = format!("mcp__{server}__{tool}")
        .chars()
        .map(
            |c| match c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                true => c,
                false => '_',
            },
        )
        .collect();
    name.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_is_a_name_and_shell_words() {
        let server =
            McpServer::from_flag("git=python3 -m mcp_server_git --repository '.'").unwrap();
        assert_eq!(server.name, "git");
        assert_eq!(server.command.as_deref(), Some("python3"));
        assert_eq!(server.args, ["-m", "mcp_server_git", "--repository", "."]);
        assert_eq!(server.roles, [AgentRole::Worker]);
        assert!(matches!(
            McpServer::from_flag("python3 -m x"),
            Err(McpConfigError::NoName(_))
        ));
        assert!(matches!(
            McpServer::from_flag("a b=x"),
            Err(McpConfigError::BadName(_))
        ));
        assert!(matches!(
            McpServer::from_flag("x='unclosed"),
            Err(McpConfigError::BadWords(_))
        ));
    }

    #[test]
    fn allow_and_deny_pick_the_tools() {
        let filter = ToolFilter {
            allow: Some(vec!["git_status".into(), "git_log".into()]),
            deny: vec!["git_log".into()],
        };
        assert!(filter.admits("git_status"));
        assert!(!filter.admits("git_log"));
        assert!(!filter.admits("git_commit"));
        assert!(ToolFilter::default().admits("anything"));
    }

    #[test]
    fn names_fit_what_endpoints_take() {
        assert_eq!(tool_name("git", "git_status"), "mcp__git__git_status");
        assert_eq!(tool_name("a", "b.c/d"), "mcp__a__b_c_d");
        assert_eq!(tool_name("s", &"x".repeat(100)).len(), 64);
    }

    #[test]
    fn twice_the_same_name_is_refused() {
        let flags = ["t=a".to_string(), "t=b".to_string()];
        assert_eq!(
            gather(Vec::new(), &flags),
            Err(McpConfigError::Twice("t".into()))
        );
    }
}
