//! One MCP server, started (stdio) or reached (streamable HTTP) and
//! spoken to with the official SDK (rmcp), once: whether it is started
//! again is `managed`'s to say. A stdio server runs in the workspace with
//! the spawn policy of a server (`process::Spawn::server`: a scrubbed
//! environment, a process group of its own that dies with its owner),
//! its stderr in a `ServerLog`; one troupe runs for its agents gets a
//! Landlock domain (`sandbox::Narrow`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, Tool};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::Value;

use crate::process::Spawn;
use crate::protocol::{McpServer, Transport};

#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("the MCP server `{server}` did not start ({command}): {why}")]
    Start {
        server: String,
        command: String,
        why: String,
    },
    #[error("the MCP server `{server}` did not answer within {secs} s")]
    Timeout { server: String, secs: u64 },
    #[error("the MCP server `{server}` failed: {why}")]
    Failed { server: String, why: String },
    #[error("the MCP server `{server}` is gone (it exited, or closed its pipe)")]
    Gone { server: String },
}

/// A running server. Only `managed` holds one: it alone decides when a
/// server is started, again or not.
pub(super) struct Connection {
    service: RunningService<RoleClient, ()>,
    /// Its process group, for whoever must kill it.
    pub pgid: Option<i32>,
}

impl Connection {
    /// Starts `server` in `workspace` (or reaches its `url`), its stderr
    /// appended to `log`, and shakes hands, within its timeout. A server
    /// troupe runs for its agents (`narrow`) takes arguments a model chose
    /// outside any agent's sandbox, so it gets a Landlock domain of its
    /// own: it writes only the workspace, and keeps the network it runs in
    /// troupe for.
    pub async fn start(
        server: &McpServer,
        workspace: &Path,
        log: Option<&ServerLog>,
        narrow: bool,
    ) -> Result<Connection, McpError> {
        match &server.transport {
            Transport::Http { url } => Self::reach(server, url).await,
            Transport::Stdio { command, args } => {
                Self::spawn(server, command, args, workspace, log, narrow).await
            }
        }
    }

    /// A stdio server: `program` with `args`.
    async fn spawn(
        server: &McpServer,
        program: &str,
        args: &[String],
        workspace: &Path,
        log: Option<&ServerLog>,
        narrow: bool,
    ) -> Result<Connection, McpError> {
        let command_line = std::iter::once(program)
            .chain(args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        // The shim's root is looked for on PATH only when the server did
        // not start, not at every start.
        let failed = |why: String| McpError::Start {
            server: server.name.clone(),
            command: command_line.clone(),
            why: format!("{why}{}", shim_hint(program)),
        };
        let mut command = Spawn::server(&server.env).command_for(program);
        command.args(args).current_dir(workspace);
        if crate::sandbox::git_config_closed() {
            command.env("GIT_CONFIG_GLOBAL", "/dev/null");
        }
        let domain = narrow
            .then(|| crate::sandbox::Narrow::new(&[workspace.to_path_buf()], true))
            .flatten();
        if let Some(domain) = &domain {
            domain
                .confine(&mut command)
                .map_err(|e| failed(format!("cannot confine it: {e}")))?;
        }
        let stderr = match log {
            Some(log) => Stdio::from(
                log.open()
                    .map_err(|e| failed(format!("{}: {e}", log.path().display())))?,
            ),
            None => Stdio::null(),
        };
        let (transport, _) = TokioChildProcess::builder(command)
            .stderr(stderr)
            .spawn()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::PermissionDenied => failed(format!(
                    "{e}: the agent's sandbox may not read the program or what it loads; name their directories with --allow-read, or install the server under a system directory"
                )),
                std::io::ErrorKind::NotFound => failed(format!("{e}: no such program on PATH")),
                _ => failed(e.to_string()),
            })?;
        let pgid = transport.id().and_then(|id| i32::try_from(id).ok());
        let limit = Duration::from_secs(server.timeout_secs);
        let service = match tokio::time::timeout(limit, ().serve(transport)).await {
            Ok(Ok(service)) => service,
            Ok(Err(e)) => {
                let said = log.map(|log| last_words(&log.path())).unwrap_or_default();
                return Err(failed(format!(
                    "{e} (it exited, or does not speak MCP on stdio){said}"
                )));
            }
            Err(_) => {
                if let Some(pgid) = pgid {
                    crate::process::kill_group(pgid);
                }
                return Err(failed(format!(
                    "no answer to the handshake within {} s",
                    server.timeout_secs
                )));
            }
        };
        Ok(Connection { service, pgid })
    }

    /// A streamable-HTTP server at `url`.
    async fn reach(server: &McpServer, url: &str) -> Result<Connection, McpError> {
        // reqwest is built without a crypto provider (see Cargo.toml);
        // ring is the process's, as for the model client.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let transport = rmcp::transport::StreamableHttpClientTransport::<reqwest::Client>::from_uri(
            url.to_string(),
        );
        let limit = Duration::from_secs(server.timeout_secs);
        let failed = |why: String| McpError::Start {
            server: server.name.clone(),
            command: url.to_string(),
            why,
        };
        match tokio::time::timeout(limit, ().serve(transport)).await {
            Ok(Ok(service)) => Ok(Connection {
                service,
                pgid: None,
            }),
            Ok(Err(e)) => Err(failed(e.to_string())),
            Err(_) => Err(failed(format!(
                "no answer to the handshake within {} s",
                server.timeout_secs
            ))),
        }
    }

    /// Every tool the server offers.
    pub async fn tools(&self, server: &McpServer) -> Result<Vec<Tool>, McpError> {
        let limit = Duration::from_secs(server.timeout_secs);
        match tokio::time::timeout(limit, self.service.peer().list_all_tools()).await {
            Ok(Ok(tools)) => Ok(tools),
            Ok(Err(e)) => Err(McpError::Failed {
                server: server.name.clone(),
                why: format!("listing its tools: {e}"),
            }),
            Err(_) => Err(McpError::Timeout {
                server: server.name.clone(),
                secs: server.timeout_secs,
            }),
        }
    }

    /// Calls `tool` with `arguments`; the result as the protocol's JSON
    /// (`content`, `isError`, `structuredContent`).
    pub async fn call(
        &self,
        server: &McpServer,
        tool: &str,
        arguments: serde_json::Map<String, Value>,
    ) -> Result<Value, McpError> {
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = Some(arguments);
        let limit = Duration::from_secs(server.timeout_secs);
        match tokio::time::timeout(limit, self.service.peer().call_tool(params)).await {
            Ok(Ok(result)) => serde_json::to_value(&result).map_err(|e| McpError::Failed {
                server: server.name.clone(),
                why: e.to_string(),
            }),
            Ok(Err(rmcp::ServiceError::TransportClosed | rmcp::ServiceError::TransportSend(_))) => {
                Err(McpError::Gone {
                    server: server.name.clone(),
                })
            }
            Ok(Err(e)) => Err(McpError::Failed {
                server: server.name.clone(),
                why: e.to_string(),
            }),
            Err(_) => Err(McpError::Timeout {
                server: server.name.clone(),
                secs: server.timeout_secs,
            }),
        }
    }

    /// Whether the server is gone (exited, or its pipe closed).
    pub fn is_closed(&self) -> bool {
        self.service.is_transport_closed()
    }

    /// Stops the server: the protocol's shutdown, then its group killed.
    pub async fn stop(self) {
        let _ = self.service.cancel().await;
        if let Some(pgid) = self.pgid {
            crate::process::kill_group(pgid);
        }
    }
}

/// What to allow when `program` is a version manager's shim (pyenv,
/// rbenv, asdf, nodenv, mise: a script in a `shims` directory that reads
/// the manager's whole root), which an agent's sandbox does not read
/// unless asked: `; ... give --allow-read ROOT`, or nothing.
fn shim_hint(program: &str) -> String {
    let found = match program.contains('/') {
        true => Some(PathBuf::from(program)),
        false => std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(program))
                .find(|candidate| candidate.is_file())
        }),
    };
    let root = found.and_then(|path| {
        let shims = path
            .ancestors()
            .find(|dir| dir.file_name() == Some(std::ffi::OsStr::new("shims")))?;
        shims.parent().map(Path::to_path_buf)
    });
    match root {
        Some(root) => format!(
            "; {program} is a shim of {root}, which runs the real program from there: give the agents --allow-read {root} (or the server's real path)",
            root = root.display()
        ),
        None => String::new(),
    }
}

/// A server's stderr, for the error that says it did not start: `; it
/// said: ...` with its first and last lines (where an interpreter names
/// the file it could not open, and where a traceback ends), or nothing.
fn last_words(log: &Path) -> String {
    let text = crate::fsutil::read_record(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return String::new();
    }
    let said = match lines.len() {
        0..=6 => lines.join(" | "),
        n => format!(
            "{} | ... | {}",
            lines[..3].join(" | "),
            lines[n - 3..].join(" | ")
        ),
    };
    format!("; it said: {}", crate::text::excerpt(&said, 600))
}

/// Where a server keeps its stderr: `mcp-<name>.log` in a records
/// directory (an agent's `.subagent/`), appended to through the
/// directory's descriptor.
pub struct ServerLog {
    dir: std::sync::Arc<crate::fsutil::RecordDir>,
    name: String,
}

impl ServerLog {
    pub fn new(dir: std::sync::Arc<crate::fsutil::RecordDir>, server: &str) -> Self {
        ServerLog {
            dir,
            name: format!("mcp-{server}.log"),
        }
    }

    fn open(&self) -> std::io::Result<std::fs::File> {
        self.dir.open_append(&self.name)
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join(&self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::shim_hint;

    // Issue 43, friction 6: a server started through a pyenv shim failed
    // under the sandbox, and the error did not say what to allow.
    #[test]
    fn a_shim_names_its_manager_s_root() {
        let home = tempfile::tempdir().unwrap();
        let shims = home.path().join(".pyenv/shims");
        std::fs::create_dir_all(&shims).unwrap();
        std::fs::write(shims.join("python3"), "#!/bin/sh\n").unwrap();
        let program = shims.join("python3").display().to_string();
        let hint = shim_hint(&program);
        assert!(
            hint.contains(&format!(
                "is a shim of {}, which runs the real program from there: give the agents --allow-read {}",
                home.path().join(".pyenv").display(),
                home.path().join(".pyenv").display()
            )),
            "{hint}"
        );
        assert_eq!(shim_hint("/usr/bin/env"), "");
    }
}
