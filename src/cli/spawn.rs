//! `troupe spawn`: one agent, its result object on stdout; or, with
//! `--background`, a detached supervisor for it and an answer at once.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use super::UsageError;
use super::agent_args::AgentArgs;
use super::config::Sources;
use crate::chat::Actor;
use crate::llm::build_model;
use crate::mcp::remote::RemoteServers;
use crate::protocol::AgentStatus;
use crate::protocol::{AgentId, AgentRole, TaskFile};
use crate::settings::model::ModelFlags;
use crate::signal::{StopCause, StopSignal};
use crate::supervisor::interrupt::{EXIT_INTERRUPTED, Interrupts};
use crate::supervisor::notify::on_finish;
use crate::supervisor::registry::{self, AgentLock};
use crate::supervisor::spawn::{Existing, prepare, run_prepared};
use crate::supervisor::status::StatusTracker;
use crate::supervisor::{AgentSettings, Progress, SpawnConfig};

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  troupe spawn --id 1 --summary greet --task \"write hello.txt\" --model scripted:examples/hello/script.json\n  troupe spawn --id 2 --summary docs --task-file t2.md --model gpt-4o-mini --background\n  troupe wait 2"
)]
pub struct SpawnArgs {
    /// The agent's number; its directory defaults to
    /// sub_agent_results/agent_<ID> in the workspace.
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = crate::settings::numbers::agent_id)]
    pub id: u32,

    /// A one-line summary of the task, at most 80 characters (it names
    /// the agent in `troupe status` and its transcript).
    #[arg(long, value_name = "TEXT")]
    pub summary: String,

    /// The task: goal, requirements, deliverables, scope.
    #[arg(
        long,
        value_name = "TEXT",
        required_unless_present = "task_file",
        conflicts_with = "task_file"
    )]
    pub task: Option<String>,

    /// Read the task from a file instead (- for standard input).
    #[arg(long, value_name = "FILE")]
    pub task_file: Option<PathBuf>,

    /// The shared workspace the agent works in (its last level made if
    /// missing).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workspace: PathBuf,

    /// The agent's own directory, relative to the workspace; its transcript
    /// goes to .subagent/ inside.
    #[arg(long, value_name = "DIR")]
    pub deliverables_dir: Option<PathBuf>,

    /// Total tokens before the agent must wrap up (default: no limit); for
    /// the one agent of a spawn, the same as --max-agent-tokens.
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = crate::settings::numbers::positive::<u64>)]
    pub max_tokens: Option<u64>,

    /// Return at once with status "running": a detached supervisor runs
    /// the agent (its output in the agent's .subagent/supervisor.log).
    /// Follow it with `troupe status`, `wait`, `terminate`, `show`.
    #[arg(long)]
    pub background: bool,

    /// Agents that may run at once in the results directory; a background
    /// spawn beyond it is refused with exit code 75 (try again later),
    /// or waits for a slot with --queue.
    #[arg(long, value_name = "N", default_value_t = 5, allow_negative_numbers = true, value_parser = crate::settings::numbers::positive::<usize>)]
    pub max_concurrent: usize,

    /// With --background: when --max-concurrent agents run, wait until
    /// one ends instead of refusing.
    #[arg(long, requires = "background")]
    pub queue: bool,

    /// When the agent ends, run this shell command; the result file's path
    /// is $1 and $TROUPE_RESULT there (e.g. './hook.sh "$1"').
    #[arg(long, value_name = "CMD")]
    pub on_finish: Option<String>,

    /// Supervise the agent of this task file: what --background starts.
    #[arg(long, value_name = "TASK", hide = true)]
    pub supervise: Option<PathBuf>,

    #[command(flatten)]
    pub agent: AgentArgs,

    #[command(flatten)]
    pub model: ModelFlags,
}

pub async fn run(args: SpawnArgs, sources: &Sources) -> anyhow::Result<ExitCode> {
    if let Some(task_path) = &args.supervise {
        let setup = Setup::of(&args, sources).await?;
        let task = load_task(task_path)?;
        return supervise(&args, setup, task, true).await;
    }
    let Admitted {
        task,
        setup,
        counting: _counting,
    } = match admit(&args, sources).await {
        Ok(admitted) => admitted,
        Err(Refusal::Busy(e)) => {
            crate::tell!("troupe: {e}, or spawn with --queue to wait for a slot");
            return Ok(ExitCode::from(EXIT_BUSY));
        }
        Err(Refusal::Other(e)) => return Err(e),
    };
    if args.background {
        // The supervisor runs the agent itself: it neither detaches again
        // nor waits for a slot, which this spawn took.
        let argv = std::env::args_os()
            .skip(1)
            .filter(|arg| arg != "--background" && arg != "--queue")
            .collect();
        let launched = match super::background::launch(&task, argv).await {
            Ok(launched) => launched,
            Err(super::background::LaunchError::Ended { code, log }) => {
                crate::tell!(
                    "troupe: the background supervisor ended ({code}) before starting agent {}:\n{}",
                    task.agent_id,
                    log.trim_end()
                );
                return Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)));
            }
            Err(e) => return Err(e.into()),
        };
        crate::say!("{}", serde_json::to_string_pretty(&launched.started)?);
        return Ok(ExitCode::SUCCESS);
    }
    supervise(&args, setup, task, false).await
}

/// Why a spawn did not admit its agent.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// `--max-concurrent` agents run, and there is no `--queue`.
    #[error(transparent)]
    Busy(crate::supervisor::registry::RegistryError),
    /// Anything else: a usage error, or one of troupe's own.
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// What an agent runs with, from the spawn's flags and the config file.
pub struct Setup {
    settings: AgentSettings,
    model: std::sync::Arc<dyn crate::llm::ChatModel>,
    workspace: PathBuf,
}

impl Setup {
    async fn of(args: &SpawnArgs, sources: &Sources) -> anyhow::Result<Setup> {
        let role = args
            .model
            .resolve_single(Actor::Worker, sources)
            .map_err(UsageError::Said)?;
        if args.agent.max_agent_cost(sources)?.is_some()
            && let Some(model) = role.unpriced()
        {
            return Err(UsageError::Said(crate::settings::model::needs_price(
                "--max-agent-cost",
                model,
            ))
            .into());
        }
        let workspace = super::workspace::open_workspace(&args.workspace)?;
        let results = workspace.join(crate::protocol::RESULTS_DIR);
        crate::llm::openai::share_pauses_in(&results);
        let mut settings = args.agent.settings(
            sources,
            &results,
            std::slice::from_ref(&role.api_key_env),
            args.max_tokens,
        )?;
        role.bound(&mut settings.limits);
        // The remote servers' tools go into the task file.
        settings.remote_mcp = RemoteServers::connect(&settings.mcp, &workspace)
            .await
            .map(std::sync::Arc::new);
        // The model (a script that must exist, an endpoint URL that must
        // parse) is checked before any record is touched.
        let model = build_model(&role.config).map_err(UsageError::of)?;
        Ok(Setup {
            settings,
            model,
            workspace,
        })
    }
}

/// Checks the spawn's flags, waits for a slot (with `--queue`) and makes
/// the agent's directory and task file, indexed for `status` and `wait`:
/// everything before the agent is started.
pub async fn admit(args: &SpawnArgs, sources: &Sources) -> Result<Admitted, Refusal> {
    let setup = Setup::of(args, sources).await?;
    let results = setup.workspace.join(crate::protocol::RESULTS_DIR);
    let task =
        build_task(args, setup.workspace.clone(), &setup.settings).map_err(anyhow::Error::from)?;
    let id = task.agent_id.to_string();
    let max = args.background.then_some(args.max_concurrent);
    // Held from the count to the launch, so that two spawns do not both
    // take the last slot; let go while a queued one waits.
    let mut said = false;
    let counting = loop {
        let counting = match max {
            Some(_) => Some(
                registry::count_lock(&results)
                    .await
                    .map_err(anyhow::Error::from)?,
            ),
            None => None,
        };
        match registry::check_new(&results, &id, &task.agent_dir, max) {
            Ok(()) => break counting,
            Err(e @ registry::RegistryError::TooMany { .. }) if args.queue => {
                drop(counting);
                if !std::mem::replace(&mut said, true) {
                    crate::tell!("troupe: {e}; --queue: waiting for a slot");
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            Err(e @ registry::RegistryError::TooMany { .. }) => return Err(Refusal::Busy(e)),
            Err(e) => return Err(anyhow::Error::from(UsageError::of(e)).into()),
        }
    };
    prepare(&task, Existing::MoveAside, &Progress::stderr())
        .await
        .map_err(anyhow::Error::from)?;
    registry::index(&results, &id, &task.agent_dir).map_err(anyhow::Error::from)?;
    Ok(Admitted {
        task,
        setup,
        counting,
    })
}

/// An agent ready to start.
pub struct Admitted {
    pub task: TaskFile,
    setup: Setup,
    /// With `--max-concurrent`: the count's lock, to be held until the
    /// agent's supervisor holds the agent, so that no other spawn counts
    /// before it.
    pub counting: Option<crate::fsutil::dir_lock::DirLock>,
}

/// The exit code of a background spawn refused for want of a slot
/// (`--max-concurrent`): sysexits' "temporary failure, try again", apart
/// from a usage error's 2.
pub const EXIT_BUSY: u8 = 75;

/// Runs the prepared agent under this process, holding its directory, and
/// prints its result object.
async fn supervise(
    args: &SpawnArgs,
    setup: Setup,
    task: TaskFile,
    background: bool,
) -> anyhow::Result<ExitCode> {
    let Setup {
        settings, model, ..
    } = setup;
    let settings = &settings;
    let _lock = AgentLock::acquire(&task.agent_dir).map_err(UsageError::of)?;
    let progress = Progress::stderr();
    let tracker = StatusTracker::start(&task, background, &progress)
        .with_context(|| format!("cannot write the status of agent {}", task.agent_id))?;
    let stop = StopSignal::default();
    let result_path = task.subagent_dir().join("result.json");
    // A spawned agent is a trace of its own.
    let span = crate::telemetry::Span::root(format!("invoke_agent {}", task.role), None);
    let config = SpawnConfig::new(task, settings, stop.clone(), "spawn").in_span(span);
    let interrupts = Interrupts::new();
    interrupts
        .watch(stop.clone())
        .context("cannot watch for Ctrl-C")?;
    let result = tokio::select! {
        run = run_prepared(config, model, &tracker) => run?.result,
        by = interrupts.killed() => {
            tracker.finish(AgentStatus::Terminated);
            crate::tell!("troupe: interrupted twice ({by}): the agent was killed; its transcript is as it last wrote it");
            return Ok(ExitCode::from(EXIT_INTERRUPTED));
        }
    };
    tracker.finish(result.status);
    let json = serde_json::to_string_pretty(&result).context("cannot encode the result")?;
    crate::say!("{json}");
    if let Some(command) = &args.on_finish {
        on_finish(command, &result_path).await;
    }
    let interrupted = matches!(stop.cause(), Some(StopCause::Interrupted(_)));
    Ok(match (interrupted, result.success) {
        (true, _) => ExitCode::from(EXIT_INTERRUPTED),
        (false, true) => ExitCode::SUCCESS,
        (false, false) => ExitCode::FAILURE,
    })
}

fn load_task(path: &Path) -> Result<TaskFile, UsageError> {
    crate::fsutil::read_json(path, "the task file").map_err(UsageError::of)
}

/// The longest `--summary`, in characters.
const MAX_SUMMARY: usize = 80;

fn build_task(
    args: &SpawnArgs,
    workspace: PathBuf,
    settings: &AgentSettings,
) -> Result<TaskFile, UsageError> {
    let summary = args.summary.trim().to_string();
    if summary.is_empty() {
        return Err(UsageError::Said(
            "--summary is empty; give the task a one-line summary".into(),
        ));
    }
    if summary.contains(['\n', '\r']) {
        return Err(UsageError::Said(
            "--summary holds more than one line; give one line, and the task itself with --task or --task-file".into(),
        ));
    }
    let length = summary.chars().count();
    if length > MAX_SUMMARY {
        return Err(UsageError::Said(format!(
            "--summary is {length} characters, more than {MAX_SUMMARY}; shorten it, and give the task itself with --task or --task-file"
        )));
    }
    let text = match (&args.task, &args.task_file) {
        (Some(text), _) => text.clone(),
        (None, Some(path)) => super::text_file::read(path, "the task file")?,
        (None, None) => {
            return Err(UsageError::Said(
                "give the task with --task or --task-file".into(),
            ));
        }
    };
    if text.trim().is_empty() {
        return Err(UsageError::Said(
            "the task is empty; say what the agent should do".into(),
        ));
    }
    let agent_dir = agent_dir(&workspace, args)?;
    let mut task = TaskFile::new(
        AgentId::new(args.id.to_string()),
        AgentRole::Worker,
        summary,
        text,
        workspace,
        agent_dir,
    );
    settings.fill(&mut task);
    crate::supervisor::spawn::guard(&mut task);
    Ok(task)
}

/// The agent's directory. Inside the workspace, where agents write, it is
/// reached without following any link (`prepare` makes it so); a
/// directory elsewhere is the user's own, taken as it resolves.
fn agent_dir(workspace: &Path, args: &SpawnArgs) -> Result<PathBuf, UsageError> {
    let Some(dir) = &args.deliverables_dir else {
        let name = format!("agent_{}", args.id);
        return Ok(workspace.join(crate::protocol::RESULTS_DIR).join(name));
    };
    let lexical = crate::fsutil::normalize(&workspace.join(dir));
    if lexical.starts_with(workspace) {
        return Ok(lexical);
    }
    make_dir(dir, "--deliverables-dir")
}

/// Creates `dir` if needed and returns its canonical path.
fn make_dir(dir: &Path, flag: &str) -> Result<PathBuf, UsageError> {
    std::fs::create_dir_all(dir)
        .and_then(|()| dir.canonicalize())
        .map_err(|e| UsageError::Said(format!("{flag} {}: {e}", dir.display())))
}
