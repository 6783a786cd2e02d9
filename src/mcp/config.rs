//! An MCP server as the user configures it (`[mcp_servers.NAME]` in
//! troupe.toml, `--mcp NAME=COMMAND`): the server itself, as an agent's
//! task file carries it (`protocol::McpServer`), and what only troupe
//! reads, which roles get it and whether troupe runs it for them. Each is
//! checked as it is read, so nothing downstream meets one that cannot run.

use serde::Deserialize;

use crate::protocol::{AgentRole, McpServer, ToolFilter, Transport};

/// The default time a server may take to start, or to answer one call.
pub const DEFAULT_TIMEOUT_SECS: u64 = 60;

/// One configured server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    pub server: McpServer,
    /// The roles whose agents get its tools.
    pub roles: Vec<AgentRole>,
    /// The server needs the network: troupe runs it, outside the agents'
    /// sandboxes, and relays their calls.
    pub network: bool,
    /// What it reads to start, outside the system directories
    /// (`install::read_paths`), found once when the config is read.
    pub installed: Vec<std::path::PathBuf>,
}

/// `[mcp_servers.NAME]` as the user writes it: a `command` (with its
/// `args`) or a `url`, which `ServerConfig::from_table` turns into one
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

impl ServerConfig {
    /// A stdio server from `--mcp NAME=COMMAND [ARGS...]`, its words
    /// split as a shell would.
    pub fn from_flag(flag: &str) -> Result<ServerConfig, McpConfigError> {
        let (name, command) = flag
            .split_once('=')
            .filter(|(name, command)| !name.is_empty() && !command.trim().is_empty())
            .ok_or_else(|| McpConfigError::NoName(flag.to_string()))?;
        let mut words =
            shlex::split(command).ok_or_else(|| McpConfigError::BadWords(flag.to_string()))?;
        let program = words.remove(0);
        let server = McpServer {
            name: checked_name(name)?,
            transport: Transport::Stdio {
                command: program,
                args: words,
            },
            env: Vec::new(),
            tools: ToolFilter::default(),
            timeout_secs: DEFAULT_TIMEOUT_SECS,
        };
        Ok(ServerConfig {
            server,
            roles: workers_only(),
            network: false,
            installed: Vec::new(),
        })
    }

    /// The server of table `name`, refused when its name is not plain or
    /// it gives no way, or two, to reach it.
    fn from_table(name: &str, table: ServerTable) -> Result<ServerConfig, McpConfigError> {
        let name = checked_name(name)?;
        let transport = match (table.command, table.url) {
            (Some(command), None) => Transport::Stdio {
                command,
                args: table.args,
            },
            (None, Some(url)) => Transport::Http { url },
            (Some(_), Some(_)) | (None, None) => return Err(McpConfigError::NoWay(name)),
        };
        let server = McpServer {
            name,
            transport,
            env: table.env,
            tools: table.tools,
            timeout_secs: table.timeout_secs,
        };
        Ok(ServerConfig {
            server,
            roles: table.roles,
            network: table.network,
            installed: Vec::new(),
        })
    }

    pub fn name(&self) -> &str {
        &self.server.name
    }

    /// Whether troupe reaches the server for the agents (a `url`, or one
    /// that needs the network), rather than each agent starting its own.
    pub fn is_remote(&self) -> bool {
        matches!(self.server.transport, Transport::Http { .. }) || self.network
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
pub fn read_table<'de, D>(deserializer: D) -> Result<Vec<ServerConfig>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let tables = std::collections::BTreeMap::<String, ServerTable>::deserialize(deserializer)?;
    tables
        .into_iter()
        .map(|(name, table)| ServerConfig::from_table(&name, table))
        .collect::<Result<_, _>>()
        .map_err(serde::de::Error::custom)
}

/// Every server, the config file's and the flags', no name twice.
pub fn gather(
    from_file: Vec<ServerConfig>,
    flags: &[String],
) -> Result<Vec<ServerConfig>, McpConfigError> {
    let mut servers = from_file;
    for flag in flags {
        servers.push(ServerConfig::from_flag(flag)?);
    }
    for (i, config) in servers.iter().enumerate() {
        if servers[..i].iter().any(|s| s.name() == config.name()) {
            return Err(McpConfigError::Twice(config.name().to_string()));
        }
    }
    // The system directories are the read scope's to open.
    for config in &mut servers {
        config.installed = super::install::read_paths(&config.server)
            .into_iter()
            .filter(|p| !crate::sandbox::in_system_dirs(p))
            .collect();
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
        let config =
            ServerConfig::from_flag("git=python3 -m mcp_server_git --repository '.'").unwrap();
        let server = &config.server;
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
        assert_eq!(config.roles, [AgentRole::Worker]);
        assert!(matches!(
            ServerConfig::from_flag("python3 -m x"),
            Err(McpConfigError::NoName(_))
        ));
        assert!(matches!(
            ServerConfig::from_flag("a b=x"),
            Err(McpConfigError::BadName(_))
        ));
        assert!(matches!(
            ServerConfig::from_flag("x='unclosed"),
            Err(McpConfigError::BadWords(_))
        ));
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
        mcp_servers: Vec<ServerConfig>,
    }

    fn read(text: &str) -> Result<Vec<ServerConfig>, String> {
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
        assert_eq!(servers[0].name(), "far");
        assert_eq!(
            servers[0].server.transport,
            Transport::Http {
                url: "http://h/mcp".into()
            }
        );
        assert!(servers[0].is_remote());
        assert_eq!(servers[0].roles, [AgentRole::Reviewer]);
        assert_eq!(
            servers[1].server.transport,
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
