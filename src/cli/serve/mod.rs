//! `troupe mcp serve`: troupe as an MCP server, so that a host agent
//! (Claude Code, Codex, Cursor, Goose, ...) creates, follows and stops
//! sub-agents and team runs with the first seed's tools.
//!
//! Every call does what the command line does for a script, by the same
//! code: a created agent is admitted as `troupe spawn` admits it and
//! supervised by its own `troupe spawn --supervise`; a team run is its own
//! `troupe run`. The server holds no agent state a restart would lose:
//! the results directory is the record, as it is for `status` and `wait`.
//! The server's flags are the ceiling of every call ([`ceiling`]).

mod agents;
mod answers;
mod calls;
mod ceiling;
mod handler;
mod http;
mod notices;
mod progress;
mod resources;
mod runs;
mod session;
mod tasks;
mod tied;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};

use clap::{Args, ValueEnum};

use super::UsageError;
use super::agent_args::AgentArgs;
use super::config::Sources;
use super::run::TeamArgs;
use crate::chat::Actor;
use crate::settings::model::{ModelFlags, RoleFlags};
use calls::CallError;
use ceiling::Ceiling;

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  claude mcp add troupe -- troupe mcp serve --workspace .\n  troupe mcp serve --workspace ~/repo --model gpt-4o-mini --timeout 1200 --max-concurrent 3\n  TROUPE_MCP_TOKEN=$(openssl rand -hex 24) troupe mcp serve --listen 127.0.0.1:8765 --token-env TROUPE_MCP_TOKEN"
)]
pub struct ServeArgs {
    /// The workspace every agent and run works in; a call cannot name
    /// another.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workspace: PathBuf,

    /// Serve streamable HTTP on this loopback address (127.0.0.1:PORT or
    /// [::1]:PORT) instead of stdio; every request must carry the bearer
    /// token.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,

    /// With --listen: the variable that holds the bearer token (at least
    /// 16 characters). Left out, troupe makes one and prints it once on
    /// stderr.
    #[arg(long, value_name = "VAR", requires = "listen")]
    pub token_env: Option<String>,

    /// With --listen: seconds without a message before an HTTP session
    /// ends, which counts as the host leaving.
    #[arg(long, value_name = "SECS", default_value_t = 900, allow_negative_numbers = true, value_parser = crate::settings::numbers::seconds)]
    pub session_idle: u64,

    /// What happens to the agents and runs a session started in the
    /// background when the host leaves (stdin closed, HTTP session ended):
    /// keep them running, as `spawn --background` agents run, or
    /// terminate them. Blocking calls are always stopped.
    #[arg(long, value_enum, value_name = "WHAT", default_value_t = OnDisconnect::Keep)]
    pub on_disconnect: OnDisconnect,

    /// Agents that may run at once in the workspace's results directory,
    /// blocking or in the background; a create beyond it is refused, or
    /// waits for a slot with --queue.
    #[arg(long, value_name = "N", default_value_t = 5, allow_negative_numbers = true, value_parser = crate::settings::numbers::positive::<usize>)]
    pub max_concurrent: usize,

    /// When --max-concurrent agents run, a create waits for a slot
    /// instead of being refused.
    #[arg(long)]
    pub queue: bool,

    #[command(flatten)]
    pub team: TeamArgs,

    #[command(flatten)]
    pub agent: AgentArgs,

    #[command(flatten)]
    pub model: ModelFlags,

    #[command(flatten)]
    pub roles: RoleFlags,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnDisconnect {
    Keep,
    Terminate,
}

/// What every call is bounded by.
pub struct Bounds {
    /// `--timeout`: the longest `timeout_seconds` a create may ask for.
    pub timeout: u64,
    pub max_concurrent: usize,
    pub queue: bool,
    /// `--no-apply`: no run may apply.
    pub no_apply: bool,
    /// `--isolation`: the least a run keeps its workers apart.
    pub isolation: crate::record::IsolationMode,
    pub on_disconnect: OnDisconnect,
}

/// What every session of the server shares.
pub struct Server {
    pub workspace: PathBuf,
    /// `<workspace>/sub_agent_results`.
    pub results: PathBuf,
    pub ceiling: Ceiling,
    pub bounds: Bounds,
    pub sources: Sources,
    /// Held while a create picks an agent number and admits it.
    pub numbering: tokio::sync::Mutex<()>,
    /// Task, goal and plan files the calls hand to `spawn` and `run`,
    /// and the runs' event logs; gone with the server.
    scratch: tempfile::TempDir,
    files: AtomicU64,
    /// The calls run as MCP tasks, of every session.
    pub tasks: rmcp::task_manager::TaskManager,
}

impl Server {
    /// A new file name in the scratch directory.
    pub fn scratch_path(&self, kind: &str, extension: &str) -> PathBuf {
        let n = self.files.fetch_add(1, Ordering::Relaxed);
        self.scratch.path().join(format!("{kind}-{n}.{extension}"))
    }

    /// A new scratch file holding `bytes`.
    pub fn write_scratch(
        &self,
        kind: &str,
        extension: &str,
        bytes: &[u8],
    ) -> Result<PathBuf, CallError> {
        let path = self.scratch_path(kind, extension);
        std::fs::write(&path, bytes)
            .map_err(|e| CallError::failed(format!("cannot write {}: {e}", path.display())))?;
        Ok(path)
    }

    /// The `troupe spawn` arguments `argv` as the command line would take
    /// them, or the error it would print.
    pub fn parse_spawn(&self, argv: &[OsString]) -> Result<super::spawn::SpawnArgs, CallError> {
        use clap::{CommandFactory, FromArgMatches};
        let whole = std::iter::once(OsString::from("troupe")).chain(argv.iter().cloned());
        let matches = super::Cli::command()
            .try_get_matches_from(whole)
            .and_then(|m| super::Cli::from_arg_matches(&m))
            .map_err(|e| CallError::invalid(e.render().to_string()))?;
        match matches.command {
            super::Command::Spawn(args) => Ok(*args),
            _ => Err(CallError::failed(
                "the spawn arguments parsed as another command",
            )),
        }
    }
}

pub async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let listen = args.listen.as_deref().map(loopback).transpose()?;
    let argv: Vec<OsString> = std::env::args_os().collect();
    let sources = Sources::load(&argv)?;
    let workspace = super::workspace::open_workspace(&args.workspace)?;
    let results = workspace.join(crate::protocol::RESULTS_DIR);
    crate::llm::openai::share_pauses_in(&results);
    check_settings(&args, &sources, &results)?;
    let token = match &listen {
        Some(_) => Some(token(args.token_env.as_deref())?),
        None => None,
    };
    let scratch = tempfile::Builder::new()
        .prefix("troupe-mcp-")
        .tempdir()
        .map_err(|e| anyhow::anyhow!("cannot make a scratch directory: {e}"))?;
    let server = std::sync::Arc::new(Server {
        workspace,
        results,
        ceiling: Ceiling::from_command_line(&argv),
        bounds: Bounds {
            timeout: args.agent.timeout,
            max_concurrent: args.max_concurrent,
            queue: args.queue,
            no_apply: args.team.no_apply,
            isolation: args.team.isolation,
            on_disconnect: args.on_disconnect,
        },
        sources,
        numbering: tokio::sync::Mutex::new(()),
        scratch,
        files: AtomicU64::new(0),
        tasks: rmcp::task_manager::TaskManager::new(),
    });
    match (listen, token) {
        (Some(address), Some(token)) => {
            http::serve(server, address, token, args.session_idle).await
        }
        _ => handler::serve_stdio(server).await,
    }
}

/// The server's own flags, checked as a spawn and a run would check them,
/// so that a bad flag stops the server, not every call.
fn check_settings(args: &ServeArgs, sources: &Sources, results: &Path) -> anyhow::Result<()> {
    let role = args
        .model
        .resolve_single(Actor::Worker, sources)
        .map_err(UsageError::Said)?;
    let _ = args.agent.settings(
        sources,
        results,
        std::slice::from_ref(&role.api_key_env),
        None,
    )?;
    crate::llm::build_model(&role.config).map_err(UsageError::of)?;
    Ok(())
}

/// `--listen`, which must be a loopback address: anyone who reaches the
/// port could run agents in the workspace.
fn loopback(given: &str) -> Result<SocketAddr, UsageError> {
    let text = match given.strip_prefix("localhost:") {
        Some(port) => format!("127.0.0.1:{port}"),
        None => given.to_string(),
    };
    let address: SocketAddr = text.parse().map_err(|_| {
        UsageError::Said(format!(
            "--listen {given}: give an address and port, such as 127.0.0.1:8765"
        ))
    })?;
    if !address.ip().is_loopback() {
        return Err(UsageError::Said(format!(
            "--listen {given} is refused: troupe serves MCP over HTTP on a loopback address only (127.0.0.1 or [::1]), since whoever reaches the port runs agents in this workspace; for a host on another machine, forward the port over SSH"
        )));
    }
    Ok(address)
}

/// The bearer token: from `--token-env`, or a new one, said once on
/// stderr.
fn token(env: Option<&str>) -> Result<String, UsageError> {
    if let Some(name) = env {
        let value = std::env::var(name).unwrap_or_default();
        if value.trim().chars().count() < 16 {
            return Err(UsageError::Said(format!(
                "--token-env {name}: the variable is unset or holds under 16 characters; put a long random token in it (e.g. openssl rand -hex 24)"
            )));
        }
        return Ok(value.trim().to_string());
    }
    let mut bytes = [0u8; 24];
    let mut random = std::fs::File::open("/dev/urandom")
        .map_err(|e| UsageError::Said(format!("cannot make a token: /dev/urandom: {e}")))?;
    std::io::Read::read_exact(&mut random, &mut bytes)
        .map_err(|e| UsageError::Said(format!("cannot make a token: /dev/urandom: {e}")))?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    crate::tell!("troupe: bearer token for this server (shown once): {token}");
    Ok(token)
}

/// The argument that ties a troupe a blocking call starts to this
/// server: it stops, its records kept, when the server is gone.
pub fn tie_to_server() -> OsString {
    format!("--tied-to={}", std::process::id()).into()
}

/// `--flag=PATH`, as one argument.
pub fn path_flag(flag: &str, path: &Path) -> OsString {
    let mut arg = OsString::from(format!("{flag}="));
    arg.push(path);
    arg
}
