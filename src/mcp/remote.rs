//! The MCP servers troupe reaches for its agents: a remote (`url`) one, or
//! a stdio one that needs the network, which no agent's sandbox allows.
//! troupe connects each once per run (or spawn), lists its tools into
//! every agent's task file, and answers an agent's `mcp_call` only for a
//! server its role was given and a tool its filter admits: the agent's
//! word is never enough to reach anything else.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;

use super::client::{Connection, McpError};
use super::config::{ServerConfig, tool_name};
use crate::protocol::{AgentRole, ListedTool};

struct Remote {
    config: ServerConfig,
    connection: tokio::sync::Mutex<Option<Connection>>,
    tools: Vec<ListedTool>,
    restarted: AtomicBool,
    /// Why it could not be reached at the start, if so.
    failure: Option<String>,
}

pub struct RemoteServers {
    servers: Vec<Remote>,
    workspace: PathBuf,
}

impl std::fmt::Debug for RemoteServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.servers.iter().map(|s| s.config.name()).collect();
        f.debug_struct("RemoteServers")
            .field("servers", &names)
            .finish()
    }
}

impl RemoteServers {
    /// Connects every server of `servers` that troupe must reach, and
    /// lists its tools; `None` when there are none. A server that cannot
    /// be reached is said on stderr, and its calls answer why.
    pub async fn connect(servers: &[ServerConfig], workspace: &std::path::Path) -> Option<Self> {
        let wanted: Vec<&ServerConfig> = servers.iter().filter(|s| s.is_remote()).collect();
        if wanted.is_empty() {
            return None;
        }
        let mut connected = Vec::new();
        for config in wanted {
            let started = async {
                let connection = Connection::start(&config.server, workspace, None, true).await?;
                let tools = connection.tools(&config.server).await?;
                Ok::<_, McpError>((connection, tools))
            }
            .await;
            let (connection, tools, failure) = match started {
                Ok((connection, tools)) => (Some(connection), tools, None),
                Err(e) => {
                    crate::tell!("troupe: {e}; its tools are not available");
                    (None, Vec::new(), Some(e.to_string()))
                }
            };
            let tools = tools
                .iter()
                .filter(|t| config.server.tools.admits(&t.name))
                .map(|t| ListedTool {
                    server: config.name().to_string(),
                    tool: t.name.to_string(),
                    name: tool_name(config.name(), &t.name),
                    description: t
                        .description
                        .as_deref()
                        .unwrap_or("(the server gives no description)")
                        .to_string(),
                    input_schema: Value::Object((*t.input_schema).clone()),
                })
                .collect();
            connected.push(Remote {
                config: config.clone(),
                connection: tokio::sync::Mutex::new(connection),
                tools,
                restarted: AtomicBool::new(false),
                failure,
            });
        }
        Some(RemoteServers {
            servers: connected,
            workspace: workspace.to_path_buf(),
        })
    }

    /// The tools an agent of `role` gets.
    pub fn offer(&self, role: AgentRole) -> Vec<ListedTool> {
        self.servers
            .iter()
            .filter(|s| s.config.serves(role))
            .flat_map(|s| s.tools.iter().cloned())
            .collect()
    }

    /// An agent's call, when its role may make it: the server's result as
    /// JSON, or why not.
    pub async fn call(
        &self,
        role: AgentRole,
        server: &str,
        tool: &str,
        arguments: Value,
    ) -> Result<Value, String> {
        let Some(remote) = self
            .servers
            .iter()
            .find(|s| s.config.name() == server && s.config.serves(role))
        else {
            return Err(format!("no MCP server `{server}` is given to a {role}"));
        };
        if !remote.tools.iter().any(|t| t.tool == tool) {
            return Err(match &remote.failure {
                Some(failure) => failure.clone(),
                None => format!("the MCP server `{server}` gives no tool `{tool}` to agents"),
            });
        }
        let Value::Object(arguments) = arguments else {
            return Err(format!("the arguments of {tool} must be a JSON object"));
        };
        let mut connection = remote.connection.lock().await;
        // As an agent does for its own servers: one found gone is reached
        // again once, and the call made again.
        for _ in 0..2 {
            if connection.as_ref().is_none_or(Connection::is_closed) {
                if remote.restarted.swap(true, Ordering::SeqCst) {
                    return Err(format!(
                        "the MCP server `{server}` is gone and was reached again once already"
                    ));
                }
                *connection = Some(
                    Connection::start(&remote.config.server, &self.workspace, None, true)
                        .await
                        .map_err(|e| e.to_string())?,
                );
            }
            let Some(live) = connection.as_ref() else {
                continue;
            };
            match live
                .call(&remote.config.server, tool, arguments.clone())
                .await
            {
                Ok(result) => return Ok(result),
                Err(McpError::Gone { .. }) => {
                    if let Some(old) = connection.take() {
                        old.stop().await;
                    }
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        Err(format!(
            "the MCP server `{server}` is gone and was reached again once already"
        ))
    }
}
