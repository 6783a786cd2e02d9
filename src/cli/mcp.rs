//! `troupe mcp list`: each configured MCP server started where a run
//! starts it, its tools printed as the agents would see them, and stopped.
//! A server an agent starts is started by a real agent of its role, in
//! that agent's sandbox (`mcp_probe`); one that needs the network, or is
//! reached by URL, is started as troupe starts it for a run (an
//! `mcp::managed::ManagedServer` with a Landlock domain of its own).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};

use super::UsageError;
use super::agent_args::AgentArgs;
use super::config::Sources;
use super::mcp_probe::{Probed, probe};
use crate::mcp::client::ServerLog;
use crate::mcp::config::{ServerConfig, gather};
use crate::mcp::managed::{ManagedServer, Placement};
use crate::protocol::AgentRole;
use crate::settings::Lookup;

#[derive(Debug, Args)]
pub struct McpArgs {
    #[command(subcommand)]
    pub command: McpCommand,
}

#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Start each configured server (troupe.toml's [mcp_servers.NAME] and
    /// every --mcp) where a run would, print its tools as an agent sees
    /// them, and stop it. A server an agent starts is started by an agent
    /// of its role, in the sandbox the same flags and config give a run's
    /// agents: a server listed here is one the agents can start.
    #[command(
        after_help = "Examples:\n  troupe mcp list\n  troupe mcp list --mcp time=mcp-server-time --json\n  troupe mcp list --read-scope workspace --allow-read ~/tools"
    )]
    List(Box<ListArgs>),
    /// Serve troupe's sub-agents to an MCP host (Claude Code, Codex,
    /// Cursor, Goose, ...): create_sub_agent, get_sub_agent_status,
    /// wait_sub_agents, terminate_sub_agent, run_team, get_run_status;
    /// completion notices; transcripts as resources. Over stdio, or
    /// streamable HTTP on a loopback address with --listen. The flags
    /// here bound every call.
    Serve(Box<super::serve::ServeArgs>),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Where the servers start (their working directory), as in a run
    /// there.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workspace: PathBuf,

    /// One JSON object per server: {"server", "roles", "tools": [{"name", "tool", "description"}]} or {"server", "error"}.
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub agent: AgentArgs,
}

/// One server's tools, or why it has none.
enum Listing {
    Tools(Vec<Tool>),
    Failed(String),
}

struct Tool {
    name: String,
    tool: String,
    description: String,
}

pub async fn mcp(args: McpArgs, sources: &Sources) -> anyhow::Result<ExitCode> {
    let args = match args.command {
        McpCommand::List(args) => *args,
        McpCommand::Serve(args) => return super::serve::serve(*args).await,
    };
    let servers = gather(sources.mcp_servers(), &args.agent.mcp).map_err(UsageError::of)?;
    if servers.is_empty() {
        crate::tell!(
            "troupe: no MCP servers are configured: add [mcp_servers.NAME] to troupe.toml or give --mcp NAME=COMMAND"
        );
        return Ok(ExitCode::SUCCESS);
    }
    let workspace = args
        .workspace
        .canonicalize()
        .map_err(|e| UsageError::Said(format!("--workspace {}: {e}", args.workspace.display())))?;
    let scratch = tempfile::Builder::new()
        .prefix("troupe-mcp-list-")
        .tempdir()?;
    let scratch_dir = scratch.path().canonicalize()?;
    let settings = args.agent.settings(sources, &scratch_dir, &[], None)?;
    let mut probes: Vec<(AgentRole, Probed)> = Vec::new();
    for role in [AgentRole::Worker, AgentRole::Reviewer] {
        if servers.iter().any(|c| c.serves(role) && !c.is_remote()) {
            probes.push((
                role,
                probe(role, &workspace, &scratch_dir, &settings).await?,
            ));
        }
    }
    let logs = Arc::new(crate::fsutil::RecordDir::open(&scratch_dir)?);
    let mut all_started = true;
    for config in &servers {
        let listing = match config.is_remote() {
            true => reached(config, &workspace, &logs).await,
            false => started_by_agent(config, &servers, &probes),
        };
        all_started &= matches!(listing, Listing::Tools(_));
        print(config, &listing, args.json);
    }
    Ok(match all_started {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    })
}

/// What the probe of the first role `config` serves saw of it.
fn started_by_agent(
    config: &ServerConfig,
    servers: &[ServerConfig],
    probes: &[(AgentRole, Probed)],
) -> Listing {
    let name = config.name();
    let Some((_, probed)) = probes.iter().find(|(role, _)| config.serves(*role)) else {
        return Listing::Failed("it serves no role".to_string());
    };
    if let Some(failure) = &probed.failure {
        return Listing::Failed(format!("the agent that would start it failed: {failure}"));
    }
    if let Some(unstarted) = probed.unstarted.iter().find(|u| u.server == name) {
        return Listing::Failed(unstarted.error.clone());
    }
    let tools = probed
        .tools
        .iter()
        .filter_map(|spec| {
            let tool = spec.name.strip_prefix(&format!("mcp__{name}__"))?;
            // `a__b`'s tools are not `a`'s.
            let longer = servers.iter().any(|other| {
                other.name().len() > name.len()
                    && spec.name.starts_with(&format!("mcp__{}__", other.name()))
            });
            (!longer).then(|| Tool {
                name: spec.name.clone(),
                tool: tool.to_string(),
                description: spec.description.clone(),
            })
        })
        .collect();
    Listing::Tools(tools)
}

/// A server troupe reaches for its agents, reached as a run reaches it.
async fn reached(
    config: &ServerConfig,
    workspace: &std::path::Path,
    logs: &Arc<crate::fsutil::RecordDir>,
) -> Listing {
    let placement = Placement {
        workspace: workspace.to_path_buf(),
        log: Some(ServerLog::new(Arc::clone(logs), config.name())),
        narrow: true,
        groups: None,
    };
    let server = ManagedServer::start(config.server.clone(), placement).await;
    let listing = match server.failure() {
        Some(e) => Listing::Failed(e.to_string()),
        None => Listing::Tools(
            server
                .tools()
                .iter()
                .map(|t| Tool {
                    name: t.name.clone(),
                    tool: t.tool.clone(),
                    description: t.description.clone(),
                })
                .collect(),
        ),
    };
    server.stop().await;
    listing
}

fn print(config: &ServerConfig, listing: &Listing, json: bool) {
    let name = config.name();
    let roles: Vec<&str> = config.roles.iter().map(|r| r.as_str()).collect();
    match (listing, json) {
        (Listing::Failed(e), true) => {
            crate::say!("{}", serde_json::json!({"server": name, "error": e}));
        }
        (Listing::Failed(e), false) => crate::say!("{name}: {e}"),
        (Listing::Tools(tools), true) => {
            let tools: Vec<serde_json::Value> = tools
                .iter()
                .map(|t| serde_json::json!({"name": t.name, "tool": t.tool, "description": t.description}))
                .collect();
            crate::say!(
                "{}",
                serde_json::json!({"server": name, "roles": roles, "tools": tools})
            );
        }
        (Listing::Tools(tools), false) => {
            crate::say!(
                "{name} ({}; for {}): {}",
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
}
