//! The MCP servers of an agent's task file: each server the agent starts
//! itself, as the agent needs it (how to reach it, its variables, its
//! tool filter, its timeout), and the tools of those troupe reaches for
//! it, which the agent calls with `mcp_call`. Which agents get a server
//! (its roles) and whether troupe runs it stay with troupe's own
//! configuration, `mcp::config`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One server, as the agent that uses it needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServer {
    /// The `<server>` in `mcp__<server>__<tool>`.
    pub name: String,
    pub transport: Transport,
    /// The environment variables the server gets besides PATH, HOME,
    /// LANG, TERM, TZ and TMPDIR, by name; their values come from troupe's
    /// environment and never reach a file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    #[serde(default, skip_serializing_if = "ToolFilter::is_open")]
    pub tools: ToolFilter,
    /// The time the server may take to start, or to answer one call.
    pub timeout_secs: u64,
}

/// How a server is reached: one way, chosen when the configuration is
/// read, so nothing downstream meets a server with two ways or none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Transport {
    /// A program found on PATH, spoken to over its stdin and stdout.
    Stdio {
        command: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        args: Vec<String>,
    },
    /// A streamable-HTTP server's address.
    Http { url: String },
}

impl Transport {
    /// How a person names the server: its program, or its address.
    pub fn target(&self) -> &str {
        match self {
            Transport::Stdio { command, .. } => command,
            Transport::Http { url } => url,
        }
    }
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

/// One tool of a server, as an agent is given it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListedTool {
    pub server: String,
    /// Its name on the server.
    pub tool: String,
    /// Its name for the model, `mcp__<server>__<tool>`.
    pub name: String,
    /// The server's own description of it.
    pub description: String,
    pub input_schema: Value,
}

/// A server the agent was given that did not start (or list its tools),
/// and why: in its stats, so that `troupe mcp list` and a reader of
/// `result.json` see it, and in the tool error of each call of its tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnstartedServer {
    pub server: String,
    pub error: String,
}

impl UnstartedServer {
    /// Whether the model's `name` is one of this server's tools.
    pub fn names(&self, name: &str) -> bool {
        name.strip_prefix("mcp__")
            .and_then(|rest| rest.strip_prefix(self.server.as_str()))
            .is_some_and(|rest| rest.starts_with("__"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
