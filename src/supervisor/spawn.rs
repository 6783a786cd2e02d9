//! One agent from start to result: the parent's half of `troupe spawn`,
//! and the step a team run repeats for every worker.
//!
//! Prepares the agent's directory (an earlier run's records are moved
//! aside, never overwritten), writes the task file, serves the child,
//! seals the transcript with what only the parent knows, and writes the
//! result object beside it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::renameat;

use super::child::{ChildOutcome, ChildRun, ServeLimits};
use super::command::{ChildSpec, Hygiene, child_command};
use super::events::EventSink;
use super::launcher::{LaunchVars, Launcher};
use super::result::AgentResult;
use super::serve::serve;
use crate::fsutil::{Durability, deliverable_files, nofollow, write_json_atomic};
use crate::llm::ChatModel;
use crate::protocol::{AgentLimits, AgentStatus, SandboxSettings, TaskFile};
use crate::signal::StopSignal;
use crate::telemetry::Span;
use crate::transcript::{self, Conversation};

pub struct SpawnConfig {
    pub task: TaskFile,
    /// The `troupe-agent` binary.
    pub agent_program: PathBuf,
    /// It takes its own session (see `AgentSettings`).
    pub program_takes_session: bool,
    pub limits: ServeLimits,
    pub hygiene: Hygiene,
    pub stop: StopSignal,
    /// Place the child through this launcher, its placeholders filled in
    /// with these values.
    pub launch: Option<(Launcher, LaunchVars)>,
    /// The MCP servers troupe reaches for the child.
    pub remote_mcp: Option<std::sync::Arc<crate::mcp::remote::RemoteServers>>,
    /// The web troupe reads for the child, under its task file's rules.
    pub web: Option<std::sync::Arc<crate::web::Web>>,
    /// The agent's span: its model requests and tool calls are its
    /// children, and the child process is started in it.
    pub span: Span,
}

/// How each agent is started and bounded: what `troupe spawn` and every
/// agent of a run share, resolved from flags, environment and config.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// The `troupe-agent` binary.
    pub program: PathBuf,
    /// It is troupe's own, which takes its session itself (`agent::birth`).
    pub program_takes_session: bool,
    pub serve: ServeLimits,
    pub hygiene: Hygiene,
    pub limits: AgentLimits,
    pub sandbox: SandboxSettings,
    /// The prompt overrides, read once as troupe started.
    pub prompts: crate::prompts::Prompts,
    /// Places each agent elsewhere (`--launcher`).
    pub launcher: Option<Launcher>,
    pub durability: crate::protocol::DurabilityMode,
    /// Every configured MCP server; each agent gets those of its role.
    pub mcp: Vec<crate::mcp::config::ServerConfig>,
    /// The servers troupe reaches for the agents, once connected.
    pub remote_mcp: Option<std::sync::Arc<crate::mcp::remote::RemoteServers>>,
    /// The `host:port`s a step's powers may name, for troupe's broker to
    /// open (`--allow-host`).
    pub allow_hosts: Vec<String>,
    /// The web troupe reads for the agents (`--allow-web`, `[web]`), one
    /// cache and count for all of them; `None` when it reads none.
    pub web: Option<std::sync::Arc<crate::web::Web>>,
}

impl AgentSettings {
    /// What the agent's task file takes of these settings.
    pub fn fill(&self, task: &mut TaskFile) {
        task.timeout_seconds = self.serve.timeout.as_secs();
        task.prompts = self.prompts.clone();
        task.limits = self.limits.clone();
        task.sandbox = self.sandbox.clone();
        task.durability = self.durability;
        let own: Vec<_> = self
            .mcp
            .iter()
            .filter(|config| config.serves(task.role) && !config.is_remote())
            .collect();
        task.mcp = own.iter().map(|config| config.server.clone()).collect();
        // The servers the agent starts read where they are installed.
        let allow_read = &mut task.sandbox.allow_read;
        for path in own.iter().flat_map(|config| &config.installed) {
            if !allow_read.contains(path) {
                allow_read.push(path.clone());
            }
        }
        task.mcp_remote = self
            .remote_mcp
            .as_ref()
            .map(|remote| remote.offer(task.role))
            .unwrap_or_default();
        task.web = self
            .web
            .as_ref()
            .map(|web| crate::protocol::task::WebAccess {
                tools: web.settings().tools(),
                rules: web.settings().rules.clone(),
            });
    }
}

/// What a workspace holds that is the user's or troupe's, never an agent's
/// to write: the repository, and troupe's configuration.
pub const GUARDED: &[&str] = &[".git", "troupe.toml", ".troupe"];

/// Makes the guarded names of the agent's workspace (and of the run's
/// workspace, when the agent works in a checkout) read-only to it, and
/// the repository's `config`, which may hold a token, empty: for a task
/// whose workspace and results are set, before its file is written.
pub fn guard(task: &mut TaskFile) {
    let run_workspace = task
        .results
        .as_ref()
        .and_then(|r| r.parent().map(Path::to_path_buf));
    let roots = std::iter::once(task.workspace.clone()).chain(run_workspace);
    for root in roots {
        let sandbox = &mut task.sandbox;
        sandbox
            .read_only
            .extend(GUARDED.iter().map(|name| root.join(name)));
        sandbox.hidden.push(root.join(".git").join("config"));
    }
}

impl SpawnConfig {
    /// The agent of `task`, started and bounded as `settings` say, in the
    /// run `run_id` (`spawn` for `troupe spawn`).
    pub fn new(task: TaskFile, settings: &AgentSettings, stop: StopSignal, run_id: &str) -> Self {
        let launch = settings.launcher.clone().map(|launcher| {
            let vars = LaunchVars {
                run_id: run_id.to_string(),
                step_id: task.step_key(),
                agent_id: task.agent_id.to_string(),
                role: task.role.as_str().to_string(),
                attempt: task.attempt,
            };
            (launcher, vars)
        });
        SpawnConfig {
            remote_mcp: settings.remote_mcp.clone(),
            web: settings.web.clone(),
            task,
            agent_program: settings.program.clone(),
            program_takes_session: settings.program_takes_session,
            limits: settings.serve.clone(),
            hygiene: settings.hygiene.clone(),
            stop,
            launch,
            span: Span::default(),
        }
    }

    /// The agent runs in `span`, which is named and given the agent's
    /// attributes here.
    pub fn in_span(mut self, span: Span) -> Self {
        let task = &self.task;
        span.set("gen_ai.operation.name", "invoke_agent");
        span.set("gen_ai.agent.name", task.role.as_str());
        span.set("gen_ai.agent.id", task.agent_id.to_string());
        span.set("agent_id", task.agent_id.to_string());
        span.set("troupe.role", task.role.as_str());
        span.set("troupe.attempt", i64::from(task.attempt));
        span.set("troupe.agent.dir", task.agent_dir.display().to_string());
        self.span = span;
        self
    }
}

/// One agent's end: the result object, and what the parent saw of it.
pub struct AgentRun {
    pub result: AgentResult,
    pub outcome: ChildOutcome,
}

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("cannot prepare the agent directory {path}: {source}")]
    Prepare {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "refusing the agent directory {path}: {source}; an agent's command may have planted it, so troupe will not use it"
    )]
    Planted {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Transcript(#[from] transcript::TranscriptError),
    #[error("cannot write the result file {path}: {source}")]
    Result {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The blocking file work could not be waited for.
    #[error("the agent's file work failed: {0}")]
    Blocking(#[from] tokio::task::JoinError),
}

/// What `prepare` does with an agent directory that exists already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// Every agent of a team run gets a directory of its own, so one that
    /// exists was put there by someone else.
    Refuse,
    /// `troupe spawn --id N` again: the earlier run's records move aside.
    MoveAside,
}

/// One agent in a directory of its own: `prepare`, then `run_prepared`.
pub async fn spawn_agent(
    config: SpawnConfig,
    model: Arc<dyn ChatModel>,
    events: &dyn EventSink,
) -> Result<AgentRun, SpawnError> {
    prepare(&config.task, Existing::Refuse, events).await?;
    run_prepared(config, model, events).await
}

/// Runs the agent whose directory and task file `prepare` made.
pub async fn run_prepared(
    config: SpawnConfig,
    model: Arc<dyn ChatModel>,
    events: &dyn EventSink,
) -> Result<AgentRun, SpawnError> {
    let task = &config.task;
    let name = task.agent_id.to_string();
    let spec = ChildSpec {
        program: config.agent_program.clone(),
        task_path: task.subagent_dir().join("task.json"),
        workdir: task.workspace.clone(),
        stderr_log: task.subagent_dir().join("stderr.log"),
        tmp_dir: task.tmp_dir(),
        hygiene: config.hygiene.clone(),
        takes_session: config.program_takes_session,
        launcher: config
            .launch
            .as_ref()
            .map(|(launcher, vars)| launcher.expand(vars)),
        trace: config.span.context(),
    };
    let command = child_command(&spec).map_err(|source| SpawnError::Prepare {
        path: spec.stderr_log.clone(),
        source,
    })?;
    let spawned = std::sync::Arc::new(std::sync::OnceLock::new());
    // Under a launcher the agent is not troupe's child, and its pid is not
    // the launcher's: its broker cannot tell it by pid.
    let caller = spec.launcher.is_none().then(|| spawned.clone());
    let run = ChildRun {
        name: &name,
        key: task.agent_key(),
        role: task.role,
        max_requests: task.limits.max_requests(),
        max_tokens: task.limits.max_tokens,
        max_cost_micros: task.limits.max_cost_micros,
        tools: task.tools.clone(),
        mcp_servers: task.mcp_remote.iter().map(|t| t.server.clone()).collect(),
        model,
        limits: config.limits,
        events,
        stderr_log: spec.stderr_log.clone(),
        stop: config.stop,
        launcher: config
            .launch
            .as_ref()
            .map(|(launcher, _)| launcher.display()),
        mcp: config.remote_mcp.clone(),
        web: config.web.clone().zip(task.web.clone()),
        span: config.span.clone(),
        spawned,
    };
    let free = free_guarded(task);
    // Held while the agent runs; its end stops it.
    let _broker = match task.network_hosts.is_empty() {
        true => None,
        false => Some(
            super::broker::Broker::start(&task.subagent_dir(), task.network_hosts.clone(), caller)
                .map_err(|source| SpawnError::Prepare {
                    path: task.subagent_dir().join(crate::protocol::BROKER_SOCKET),
                    source,
                })?,
        ),
    };
    let outcome = serve(command, run).await;
    let span = config.span;
    span.set("troupe.agent.status", outcome.status.as_str());
    span.tokens(outcome.stats.token_usage);
    match (&outcome.error, outcome.status) {
        (Some(error), _) => span.fail(error.clone()),
        (None, AgentStatus::Completed) => span.succeed(),
        (None, status) => span.fail(status.as_str()),
    }
    let task = config.task;
    let (concluded, planted) = tokio::task::spawn_blocking(move || {
        let planted = set_aside_planted(&task, &free);
        (conclude(task, outcome), planted)
    })
    .await?;
    for message in &planted {
        events.event(&name, super::events::AgentEvent::Warning { message });
    }
    span.end();
    concluded
}

/// The guarded names of the agent's workspace that nothing holds as it
/// starts: one that holds something when it ends is the agent's doing.
fn free_guarded(task: &TaskFile) -> Vec<PathBuf> {
    task.sandbox
        .read_only
        .iter()
        .filter(|path| std::fs::symlink_metadata(path).is_err())
        .cloned()
        .collect()
}

/// Moves what the agent made at a guarded name that was free (a worker's
/// `troupe.toml`, a `.git` in a workspace that had none) into its
/// `.subagent/planted/`, where troupe never reads it, so that no later
/// run takes it for the user's. The agent and everything it started are
/// gone by now. What was done, in words.
fn set_aside_planted(task: &TaskFile, free: &[PathBuf]) -> Vec<String> {
    let planted: Vec<&PathBuf> = free
        .iter()
        .filter(|path| std::fs::symlink_metadata(path).is_ok())
        .collect();
    let aside = task.subagent_dir().join("planted");
    planted
        .into_iter()
        .enumerate()
        .map(|(n, path)| {
            let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
            let to = aside.join(format!("{n}-{name}"));
            let moved = nofollow::create_dir_all(&aside).and_then(|_| std::fs::rename(path, &to));
            match moved {
                Ok(()) => format!(
                    "the agent made {}, which is the user's or troupe's and never an agent's: moved to {}",
                    path.display(),
                    to.display()
                ),
                Err(e) => format!(
                    "the agent made {}, which is the user's or troupe's and never an agent's, and troupe could not move it aside ({e}): remove it before running troupe there again",
                    path.display()
                ),
            }
        })
        .collect()
}

/// The parent's records of an agent that is gone: the transcript sealed
/// when the child could not seal it, and the result file. Blocking file
/// work, run off the agents' thread.
fn conclude(task: TaskFile, outcome: ChildOutcome) -> Result<AgentRun, SpawnError> {
    // A child that ended on its own has sealed its transcript; the parent
    // has the last word only when it had to stop the child, or lost it.
    let sealed_by_child = matches!(outcome.status, AgentStatus::Completed | AgentStatus::Failed)
        && (outcome.finish.is_some() || outcome.verdict.is_some());
    // A write the agent was making when it was killed is garbage; its
    // records are whole without it.
    if let Err(e) =
        crate::fsutil::RecordDir::open(&task.subagent_dir()).and_then(|d| d.remove_torn_writes())
    {
        crate::tell!(
            "troupe: cannot clear torn writes in {}: {e}",
            task.subagent_dir().display()
        );
    }
    if !sealed_by_child {
        transcript::seal(
            &task.transcript_path(),
            || Conversation::for_task(&task),
            outcome.status,
            outcome.stats.clone(),
            outcome.error.clone(),
        )?;
    }
    let result = AgentResult::new(
        &task,
        &outcome,
        deliverable_files(&task.workspace, &task.agent_dir),
    );
    let path = task.subagent_dir().join("result.json");
    write_json_atomic(&path, &result, Durability::Commit)
        .map_err(|source| SpawnError::Result { path, source })?;
    Ok(AgentRun { result, outcome })
}

/// Makes the agent's directory and writes its task file, never through
/// a link: every directory on the way is opened without following one,
/// and a link or a planted entry is refused. An earlier run's `.subagent/`
/// is renamed to `.subagent-<time>` first, so nothing of it is lost. The
/// file work runs off the agents' thread.
pub async fn prepare(
    task: &TaskFile,
    existing: Existing,
    events: &dyn EventSink,
) -> Result<(), SpawnError> {
    let owned = task.clone();
    let aside = tokio::task::spawn_blocking(move || make_dir(&owned, existing)).await??;
    if let Some(aside) = aside {
        let message = format!(
            "the previous run's records were moved to {}",
            aside.display()
        );
        let name = task.agent_id.to_string();
        events.event(
            &name,
            super::events::AgentEvent::Warning { message: &message },
        );
    }
    Ok(())
}

/// `prepare`'s file work; where an earlier `.subagent/` went, if it did.
fn make_dir(task: &TaskFile, existing: Existing) -> Result<Option<PathBuf>, SpawnError> {
    let fail = |path: &Path| {
        let path = path.to_path_buf();
        move |source: std::io::Error| match nofollow::is_refusal(&source) {
            true => SpawnError::Planted { path, source },
            false => SpawnError::Prepare { path, source },
        }
    };
    let dir = match existing {
        Existing::Refuse => nofollow::create_new_dir(&task.agent_dir),
        Existing::MoveAside => nofollow::create_dir_all(&task.agent_dir),
    }
    .map_err(fail(&task.agent_dir))?;
    let subagent = task.subagent_dir();
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S%.3fZ");
    let aside_name = format!("{}-{stamp}", crate::protocol::SUBAGENT_DIR);
    let aside = match renameat(
        &dir,
        crate::protocol::SUBAGENT_DIR,
        &dir,
        aside_name.as_str(),
    ) {
        Ok(()) => Some(task.agent_dir.join(&aside_name)),
        Err(Errno::ENOENT) => None,
        Err(e) => return Err(fail(&subagent)(e.into())),
    };
    nofollow::create_new_dir(&subagent).map_err(fail(&subagent))?;
    let task_path = subagent.join("task.json");
    write_json_atomic(&task_path, task, Durability::Commit).map_err(fail(&task_path))?;
    Ok(aside)
}
