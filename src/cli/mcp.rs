//! `troupe mcp list`: each configured MCP server started, its tools
//! printed as the agents would see them, and stopped. Each is an
//! `mcp::managed::ManagedServer` listed through its filter as an agent's
//! is, but run as the user, outside any sandbox.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};

use super::UsageError;
use super::config::Sources;
use crate::mcp::client::ServerLog;
use crate::mcp::config::gather;
use crate::mcp::managed::{ManagedServer, Placement};
use crate::settings::Lookup;

#[derive(Debug, Args)]
pub struct McpArgs {
    #[command(subcommand)]
    pub command: McpCommand,
}

#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Start each configured server (troupe.toml's [mcp_servers.NAME] and
    /// every --mcp), print its tools as an agent sees them, and stop it.
    /// Here the servers run as you, outside any sandbox; an agent starts
    /// them inside its own.
    #[command(
        after_help = "Examples:\n  troupe mcp list\n  troupe mcp list --mcp time=mcp-server-time --json"
    )]
    List(ListArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// A server besides the config file's, as NAME=COMMAND [ARGS...].
    #[arg(long, value_name = "NAME=COMMAND")]
    pub mcp: Vec<String>,

    /// Where the servers start (their working directory).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workspace: PathBuf,

    /// One JSON object per server: {"server", "roles", "tools": [{"name", "tool", "description"}]} or {"server", "error"}.
    #[arg(long)]
    pub json: bool,
}

pub async fn mcp(args: McpArgs, sources: &Sources) -> anyhow::Result<ExitCode> {
    let McpCommand::List(args) = args.command;
    let servers = gather(sources.mcp_servers(), &args.mcp).map_err(UsageError::of)?;
    if servers.is_empty() {
        crate::tell!(
            "troupe: no MCP servers are configured: add [mcp_servers.NAME] to troupe.toml or give --mcp NAME=COMMAND"
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut all_started = true;
    let logs = tempfile::tempdir()?;
    let log_dir = Arc::new(crate::fsutil::RecordDir::open(
        &logs.path().canonicalize()?,
    )?);
    for config in &servers {
        let placement = Placement {
            workspace: args.workspace.clone(),
            log: Some(ServerLog::new(Arc::clone(&log_dir), config.name())),
            narrow: false,
            groups: None,
        };
        let server = ManagedServer::start(config.server.clone(), placement).await;
        let roles: Vec<&str> = config.roles.iter().map(|r| r.as_str()).collect();
        match (server.failure(), args.json) {
            (Some(e), true) => crate::say!(
                "{}",
                serde_json::json!({"server": server.name(), "error": e})
            ),
            (Some(e), false) => crate::say!("{}: {e}", server.name()),
            (None, true) => {
                let tools: Vec<serde_json::Value> = server
                    .tools()
                    .iter()
                    .map(|t| serde_json::json!({"name": t.name, "tool": t.tool, "description": t.description}))
                    .collect();
                crate::say!(
                    "{}",
                    serde_json::json!({"server": server.name(), "roles": roles, "tools": tools})
                );
            }
            (None, false) => {
                let tools = server.tools();
                crate::say!(
                    "{} ({}; for {}): {}",
                    server.name(),
                    config.server.transport.target(),
                    roles.join(", "),
                    crate::text::count(tools.len(), "tool")
                );
                for tool in tools {
                    let first = tool.description.lines().next().unwrap_or("");
                    crate::say!("  {}  {}", tool.name, crate::text::excerpt(first, 100));
                }
            }
        }
        all_started &= server.failure().is_none();
        server.stop().await;
    }
    Ok(match all_started {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    })
}
