//! The MCP servers troupe reaches for its agents: a remote (`url`) one, or
//! a stdio one that needs the network, which no agent's sandbox allows.
//! troupe starts each once per run (or spawn) as a `ManagedServer` (in the
//! workspace, with a Landlock domain of its own), lists its tools into
//! every agent's task file, and answers an agent's `mcp_call` only for a
//! server its role was given and a tool its filter admits: the agent's
//! word is never enough to reach anything else.

use std::path::Path;

use serde_json::Value;

use super::config::ServerConfig;
use super::managed::{ManagedServer, Placement};
use crate::protocol::{AgentRole, ListedTool};

/// A server, and the roles whose agents may call it.
struct Reached {
    roles: Vec<AgentRole>,
    server: ManagedServer,
}

pub struct RemoteServers {
    servers: Vec<Reached>,
}

impl std::fmt::Debug for RemoteServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.servers.iter().map(|s| s.server.name()).collect();
        f.debug_struct("RemoteServers")
            .field("servers", &names)
            .finish()
    }
}

impl RemoteServers {
    /// Starts (at once) every server of `servers` that troupe must reach,
    /// and lists its tools; `None` when there are none. A server that
    /// cannot be reached is said on stderr, and its calls answer why.
    pub async fn connect(servers: &[ServerConfig], workspace: &Path) -> Option<Self> {
        let wanted: Vec<&ServerConfig> = servers.iter().filter(|s| s.is_remote()).collect();
        if wanted.is_empty() {
            return None;
        }
        let starts = wanted.into_iter().map(|config| async move {
            let placement = Placement {
                workspace: workspace.to_path_buf(),
                log: None,
                narrow: true,
                groups: None,
            };
            let server = ManagedServer::start(config.server.clone(), placement).await;
            if let Some(failure) = server.failure() {
                crate::tell!("troupe: {failure}; its tools are not available");
            }
            Reached {
                roles: config.roles.clone(),
                server,
            }
        });
        Some(RemoteServers {
            servers: futures_util::future::join_all(starts).await,
        })
    }

    /// The tools an agent of `role` gets.
    pub fn offer(&self, role: AgentRole) -> Vec<ListedTool> {
        self.servers
            .iter()
            .filter(|s| s.roles.contains(&role))
            .flat_map(|s| s.server.tools().iter().cloned())
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
        let Some(reached) = self
            .servers
            .iter()
            .find(|s| s.server.name() == server && s.roles.contains(&role))
        else {
            return Err(format!("no MCP server `{server}` is given to a {role}"));
        };
        let Value::Object(arguments) = arguments else {
            return Err(format!("the arguments of {tool} must be a JSON object"));
        };
        reached
            .server
            .call(tool, arguments)
            .await
            .map_err(|e| e.to_string())
    }
}
