//! One MCP server, managed: started once, its tools listed through its
//! filter, each call made on its connection, and a server found gone
//! (before a call, or by it) started (or reached) again once in its
//! owner's life and the call made again. The agent's own servers
//! (`tools::mcp`), those troupe reaches for its agents (`remote`) and
//! `troupe mcp list` each hold one of these; they differ only in where
//! the server runs (`Placement`). Built on `client`'s `Connection`.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value};

use super::client::{Connection, McpError, ServerLog};
use super::config::tool_name;
use crate::process::ProcessGroups;
use crate::protocol::{ListedTool, McpServer, Transport};

/// Where and how a server runs.
pub struct Placement {
    /// Its working directory.
    pub workspace: PathBuf,
    /// Where its stderr goes; `None` discards it.
    pub log: Option<ServerLog>,
    /// A Landlock domain of its own, for a server troupe runs with
    /// arguments a model chose (see `Connection::start`).
    pub narrow: bool,
    /// The process groups that must die with the agent: each start of the
    /// server joins them.
    pub groups: Option<Arc<ProcessGroups>>,
}

/// Why a call has no result. Each is said to the model as the tool's
/// error; none ends an agent.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The server did not start, or list its tools, when it was first
    /// started: no call is tried, and the reason is said as it was then.
    #[error("{0}")]
    NotStarted(String),
    #[error("the MCP server `{server}` gives no tool `{tool}` to agents")]
    NoTool { server: String, tool: String },
    /// It was found gone after it had been started again already.
    #[error(
        "the MCP server `{server}` is gone and was {again} once already; its tools are not available"
    )]
    GoneAgain { server: String, again: &'static str },
    /// The call took longer than the server's timeout; the server is kept.
    #[error("{error}; the call was abandoned (timeout_secs {secs})")]
    Abandoned { error: McpError, secs: u64 },
    #[error(transparent)]
    Server(#[from] McpError),
}

pub struct ManagedServer {
    server: McpServer,
    placement: Placement,
    tools: Vec<ListedTool>,
    /// Why it did not start, or list its tools, at first.
    failure: Option<String>,
    /// Held through a call: one call at a time per server, and one
    /// restart however many calls find it gone.
    connection: tokio::sync::Mutex<Option<Connection>>,
    restarted: AtomicBool,
}

impl ManagedServer {
    /// Starts `server` and lists the tools its filter admits. One that
    /// does not start, or cannot list its tools, is stopped and kept with
    /// why: its calls answer that, and the tools its filter names are
    /// listed anyway, so that the model, told of them, learns why they
    /// fail.
    pub async fn start(server: McpServer, placement: Placement) -> ManagedServer {
        let listed = async {
            let connection = connect(&server, &placement).await?;
            match connection.tools(&server).await {
                Ok(tools) => Ok((connection, tools)),
                Err(e) => {
                    connection.stop().await;
                    Err(e)
                }
            }
        }
        .await;
        let (connection, tools, failure) = match listed {
            Ok((connection, tools)) => {
                let tools = tools
                    .iter()
                    .filter(|t| server.tools.admits(&t.name))
                    .map(|t| ListedTool {
                        server: server.name.clone(),
                        tool: t.name.to_string(),
                        name: tool_name(&server.name, &t.name),
                        description: t
                            .description
                            .as_deref()
                            .unwrap_or("(the server gives no description)")
                            .to_string(),
                        input_schema: Value::Object((*t.input_schema).clone()),
                    })
                    .collect();
                (Some(connection), tools, None)
            }
            Err(e) => (None, unstarted_tools(&server), Some(e.to_string())),
        };
        ManagedServer {
            server,
            placement,
            tools,
            failure,
            connection: tokio::sync::Mutex::new(connection),
            restarted: AtomicBool::new(false),
        }
    }

    pub fn name(&self) -> &str {
        &self.server.name
    }

    /// The tools an agent is given.
    pub fn tools(&self) -> &[ListedTool] {
        &self.tools
    }

    /// Why the server did not start, if it did not.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// Calls `tool` with `arguments`: the result as the protocol's JSON
    /// (`content`, `isError`, `structuredContent`), or why there is none.
    pub async fn call(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<Value, CallError> {
        if let Some(failure) = &self.failure {
            return Err(CallError::NotStarted(failure.clone()));
        }
        if !self.tools.iter().any(|t| t.tool == tool) {
            return Err(CallError::NoTool {
                server: self.server.name.clone(),
                tool: tool.to_string(),
            });
        }
        let mut connection = self.connection.lock().await;
        // Twice at most: a server found gone, before the call or by it, is
        // started again once, and the call made again.
        for _ in 0..2 {
            if connection.as_ref().is_none_or(Connection::is_closed) {
                if let Some(dead) = connection.take() {
                    dead.stop().await;
                }
                if self.restarted.swap(true, Ordering::SeqCst) {
                    return Err(self.gone_again());
                }
                *connection = Some(connect(&self.server, &self.placement).await?);
            }
            let Some(live) = connection.as_ref() else {
                continue;
            };
            match live.call(&self.server, tool, arguments.clone()).await {
                Err(McpError::Gone { .. }) => {
                    if let Some(dead) = connection.take() {
                        dead.stop().await;
                    }
                }
                Err(error @ McpError::Timeout { .. }) => {
                    return Err(CallError::Abandoned {
                        error,
                        secs: self.server.timeout_secs,
                    });
                }
                answer => return Ok(answer?),
            }
        }
        Err(self.gone_again())
    }

    /// Stops the server, if it runs.
    pub async fn stop(self) {
        if let Some(connection) = self.connection.into_inner() {
            connection.stop().await;
        }
    }

    fn gone_again(&self) -> CallError {
        let again = match self.server.transport {
            Transport::Stdio { .. } => "started again",
            Transport::Http { .. } => "reached again",
        };
        CallError::GoneAgain {
            server: self.server.name.clone(),
            again,
        }
    }
}

/// Starts (or reaches) `server` as `placement` says; its process group,
/// if it has one, joins those that die with the agent.
async fn connect(server: &McpServer, placement: &Placement) -> Result<Connection, McpError> {
    let connection = Connection::start(
        server,
        &placement.workspace,
        placement.log.as_ref(),
        placement.narrow,
    )
    .await?;
    if let (Some(groups), Some(pgid)) = (&placement.groups, connection.pgid) {
        groups.add(pgid);
    }
    Ok(connection)
}

/// The tools the filter of a server that did not start names: each
/// answers why.
fn unstarted_tools(server: &McpServer) -> Vec<ListedTool> {
    server
        .tools
        .allow
        .iter()
        .flatten()
        .filter(|name| server.tools.admits(name))
        .map(|name| ListedTool {
            server: server.name.clone(),
            tool: name.clone(),
            name: tool_name(&server.name, name),
            description: format!(
                "{name} of the MCP server {} (which did not start)",
                server.name
            ),
            input_schema: Value::Object(Map::new()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ToolFilter;

    fn missing(tools: ToolFilter) -> McpServer {
        McpServer {
            name: "gone".into(),
            transport: Transport::Stdio {
                command: "/nonexistent/mcp-server".into(),
                args: Vec::new(),
            },
            env: Vec::new(),
            tools,
            timeout_secs: 5,
        }
    }

    fn nowhere() -> Placement {
        Placement {
            workspace: std::env::temp_dir(),
            log: None,
            narrow: false,
            groups: None,
        }
    }

    #[tokio::test]
    async fn a_server_that_did_not_start_lists_its_allowed_tools_and_says_why() {
        let filter = ToolFilter {
            allow: Some(vec!["kept".into(), "denied".into()]),
            deny: vec!["denied".into()],
        };
        let server = ManagedServer::start(missing(filter), nowhere()).await;
        let failure = server.failure().unwrap_or_default().to_string();
        assert!(failure.contains("`gone` did not start"), "{failure}");
        let names: Vec<&str> = server.tools().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["mcp__gone__kept"]);
        let said = server.call("kept", Map::new()).await.unwrap_err();
        assert_eq!(said.to_string(), failure);
        assert!(
            !server.restarted.load(Ordering::SeqCst),
            "a server that never ran is not started again"
        );
        let said = server.call("other", Map::new()).await.unwrap_err();
        assert_eq!(said.to_string(), failure);
    }
}
