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
    pub name: String,
    pub transport: Transport,
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

/// `[mcp_servers.NAME]` as the user writes it: a `command` (with its
/// `args`) or a `url`, which `McpServer::from_table` turns into one
/// `Transport`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerTable {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    url: Option<String>,
    #[serde(default)]
    env: Vec<String>,
    #[serde(default = "workers_only")]
    roles: Vec<AgentRole>,
    #[serde(default)]
    tools: ToolFilter,
    #[serde(default = "default_timeout")]
    timeout_secs: u64,
    #[serde(default)]
    network: bool,
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
        Ok(McpServer {
            name: checked_name(name)?,
            transport: Transport::Stdio {
                command: program,
                args: words,
            },
            env: Vec::new(),
            roles: workers_only(),
            tools: ToolFilter::default(),
            timeout_secs: DEFAULT_TIMEOUT_SECS,
            network: false,
        })
    }

    /// The server of table `name`, refused when its name is not plain or
    /// it gives no way, or two, to reach it.
    fn from_table(name: &str, table: ServerTable) -> Result<McpServer, McpConfigError> {
        let name = checked_name(name)?;
        let transport = match (table.command, table.url) {
            (Some(command), None) => Transport::Stdio {
                command,
                args: table.args,
            },
            (None, Some(url)) => Transport::Http { url },
            (Some(_), Some(_)) | (None, None) => return Err(McpConfigError::NoWay(name)),
        };
        Ok(McpServer {
            name,
            transport,
            env: table.env,
            roles: table.roles,
            tools: table.tools,
            timeout_secs: table.timeout_secs,
            network: table.network,
        })
    }

    /// Whether troupe reaches the server for the agents (a `url`, or one
    /// that needs the network), rather than each agent starting its own.
    pub fn is_remote(&self) -> bool {
        matches!(self.transport, Transport::Http { .. }) || self.network
    }

    pub fn serves(&self, role: AgentRole) -> bool {
        self.roles.contains(&role)
    }
}

/// `name`, when it holds only letters, digits, `_` and `-`: it becomes
/// part of the tools' names and of its log's.
fn checked_name(name: &str) -> Result<String, McpConfigError> {
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match plain {
        true => Ok(name.to_string()),
        false => Err(McpConfigError::BadName(name.to_string())),
    }
}

/// Reads the `[mcp_servers]` table of a config file, each server checked
/// as it is read and named by its key, in the order of their names. For
/// `#[serde(deserialize_with)]`.
pub fn read_table<'de, D>(deserializer: D) -> Result<Vec<McpServer>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let tables = std::collections::BTreeMap::<String, ServerTable>::deserialize(deserializer)?;
    tables
        .into_iter()
        .map(|(name, table)| McpServer::from_table(&name, table))
        .collect::<Result<_, _>>()
        .map_err(serde::de::Error::custom)
}

/// Every server, the config file's and the flags', no name twice.
pub fn gather(
    from_file: Vec<McpServer>,
    flags: &[String],
) -> Result<Vec<McpServer>, McpConfigError> {
    let mut servers = from_file;
    for flag in flags {
        servers.push(McpServer::from_flag(flag)?);
    }
    for (i, server) in servers.iter().enumerate() {
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
        assert_eq!(
            server.transport,
            Transport::Stdio {
                command: "python3".into(),
                args: ["-m", "mcp_server_git", "--repository", "."]
                    .map(String::from)
                    .to_vec(),
            }
        );
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

    #[derive(Debug, Deserialize)]
    struct File {
        #[serde(deserialize_with = "read_table")]
        mcp_servers: Vec<McpServer>,
    }

    fn read(text: &str) -> Result<Vec<McpServer>, String> {
        toml::from_str::<File>(text)
            .map(|file| file.mcp_servers)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_table_gives_one_transport_or_is_refused() {
        let servers = read(
            "[mcp_servers.git]\ncommand = \"git-mcp\"\nargs = [\"-v\"]\n\n[mcp_servers.far]\nurl = \"http://h/mcp\"\nroles = [\"reviewer\"]\n",
        )
        .unwrap();
        assert_eq!(servers[0].name, "far");
        assert_eq!(
            servers[0].transport,
            Transport::Http {
                url: "http://h/mcp".into()
            }
        );
        assert!(servers[0].is_remote());
        assert_eq!(servers[0].roles, [AgentRole::Reviewer]);
        assert_eq!(
            servers[1].transport,
            Transport::Stdio {
                command: "git-mcp".into(),
                args: vec!["-v".into()]
            }
        );
        assert!(!servers[1].is_remote());
        let both = read("[mcp_servers.both]\ncommand = \"x\"\nurl = \"http://h\"\n").unwrap_err();
        assert!(
            both.contains(&McpConfigError::NoWay("both".into()).to_string()),
            "{both}"
        );
        let neither = read("[mcp_servers.neither]\nargs = [\"x\"]\n").unwrap_err();
        assert!(
            neither.contains("MCP server `neither`: give it"),
            "{neither}"
        );
        let named = read("[mcp_servers.\"a b\"]\ncommand = \"x\"\n").unwrap_err();
        assert!(named.contains("MCP server `a b`: its name"), "{named}");
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
