//! `troupe mcp list`: each configured MCP server started, its tools
//! printed as the agents would see them, and stopped.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::UsageError;
use super::config::Sources;
use crate::mcp::client::Connection;
use crate::mcp::config::{gather, tool_name};
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
    let log_dir = std::sync::Arc::new(crate::fsutil::RecordDir::open(
        &logs.path().canonicalize()?,
    )?);
    for config in &servers {
        let server = &config.server;
        let log = crate::mcp::client::ServerLog::new(std::sync::Arc::clone(&log_dir), &server.name);
        let roles: Vec<&str> = config.roles.iter().map(|r| r.as_str()).collect();
        let listed = match Connection::start(server, &args.workspace, Some(&log), false).await {
            Ok(connection) => {
                let tools = connection.tools(server).await;
                connection.stop().await;
                tools
            }
            Err(e) => Err(e),
        };
        match listed {
            Ok(tools) => {
                let tools: Vec<serde_json::Value> = tools
                    .iter()
                    .filter(|t| server.tools.admits(&t.name))
                    .map(|t| {
                        serde_json::json!({
                            "name": tool_name(&server.name, &t.name),
                            "tool": t.name,
                            "description": t.description.as_deref().unwrap_or(""),
                        })
                    })
                    .collect();
                match args.json {
                    true => crate::say!(
                        "{}",
                        serde_json::json!({"server": server.name, "roles": roles, "tools": tools})
                    ),
                    false => {
                        crate::say!(
                            "{} ({}; for {}): {} tool{}",
                            server.name,
                            server.transport.target(),
                            roles.join(", "),
                            tools.len(),
                            if tools.len() == 1 { "" } else { "s" }
                        );
                        for tool in &tools {
                            let description = tool["description"].as_str().unwrap_or("");
                            let first = description.lines().next().unwrap_or("");
                            crate::say!(
                                "  {}  {}",
                                tool["name"].as_str().unwrap_or(""),
                                crate::text::excerpt(first, 100)
                            );
                        }
                    }
                }
            }
            Err(e) => {
                all_started = false;
                match args.json {
                    true => crate::say!(
                        "{}",
                        serde_json::json!({"server": server.name, "error": e.to_string()})
                    ),
                    false => crate::say!("{}: {e}", server.name),
                }
            }
        }
    }
    Ok(match all_started {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    })
}
