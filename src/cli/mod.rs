//! The `troupe` command line: flags in, plain configuration out, one
//! command run, its outcome mapped to an exit code.
//!
//! Exit codes: 0 the agent (or run) succeeded; 1 it did not, or troupe
//! failed at run time; 2 bad usage, configuration or plan; 124 a run's
//! deadline passed.

mod about;
mod agent_args;
mod agents;
mod apply;
mod background;
mod config;
mod isolated;
mod mcp;
mod mcp_probe;
mod plan;
mod run;
mod runs;
mod serve;
mod show;
mod spawn;
mod text_file;
mod tied;
mod traces;
mod workspace;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The user's to fix: a bad flag, a missing file, an invalid setting.
/// Ends troupe with exit code 2.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    /// Said here, in the command line's words.
    #[error("{0}")]
    Said(String),
    /// An error of the library that is the user's to fix, kept whole.
    #[error(transparent)]
    Of(Box<dyn std::error::Error + Send + Sync>),
}

impl UsageError {
    pub fn of(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        UsageError::Of(Box::new(error))
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "troupe",
    version,
    about = "A supervisor for teams of LLM agents, each one an isolated child process",
    long_about = "A supervisor for teams of LLM agents, each one an isolated child process.\n\n\
        Every agent runs as its own troupe-agent process, in its own directory, with its \
        transcript kept in .subagent/conversations.json. Only troupe talks to the model \
        endpoint; agents ask it over a pipe.\n\n\
        Exit codes: 0 success; 1 an agent or step failed, timed out or crashed, or the model \
        could not be reached; 2 bad usage, configuration or plan; 124 a run's deadline passed; \
        130 interrupted (Ctrl-C, SIGTERM, or its output closed).",
    after_help = "Examples:\n  \
        troupe run \"add a --json flag to the CLI and test it\" --model gpt-4o-mini\n  \
        troupe spawn --id 1 --summary greet --task \"write hello.txt\" --model scripted:examples/hello/script.json\n  \
        troupe runs\n  \
        troupe show last\n  \
        troupe report last -o run.html"
)]
pub(crate) struct Cli {
    /// A config file of settings that stand for flags (model, base_url,
    /// sandbox, [roles.*], ...: see the README); default ./troupe.toml,
    /// then ~/.config/troupe/config.toml.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,

    /// When to colour the output: auto (on a terminal, unless NO_COLOR is
    /// set), always, never.
    #[arg(long, global = true, value_name = "WHEN", default_value = "auto")]
    color: crate::paint::ColorChoice,

    /// Export traces of `run`, `spawn` and `apply` over OTLP/HTTP
    /// (protobuf) to this collector, e.g. http://127.0.0.1:4318 (the
    /// /v1/traces path is added). Also OTEL_EXPORTER_OTLP_ENDPOINT,
    /// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or otlp_endpoint in the config
    /// file; with none of them nothing is exported.
    #[arg(long, global = true, value_name = "URL")]
    otlp_endpoint: Option<String>,

    /// Stop as on SIGTERM when the process PID is no longer this one's
    /// parent: what `troupe mcp serve` gives the troupes of its blocking
    /// calls.
    #[arg(long, global = true, hide = true, value_name = "PID")]
    tied_to: Option<u32>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Plan a goal and run it as a team: a Worker and a Reviewer process
    /// for every step, scheduled over the plan's dependencies.
    ///
    /// Progress goes to stderr: the plan, one line per step event, a
    /// summary table. Records go to <workspace>/sub_agent_results/<run_id>/.
    /// Exit codes: 0 every step completed and approved, 1 failed or skipped
    /// steps (or no plan: the model could not be reached), 2 bad usage or an
    /// invalid plan, 124 the --deadline passed, 130 interrupted.
    Run(Box<run::RunArgs>),
    /// Ask the Planner for a plan and print it (or write it with -o), to
    /// review or edit before `troupe run --plan`.
    Plan(plan::PlanArgs),
    /// Check a plan file strictly and print its levels; exit 2 when invalid.
    Validate(plan::ValidateArgs),
    /// Show spawned agents: status, runtime, counters, last action. An
    /// agent whose supervisor died without a final word is `lost`.
    Status(agents::StatusArgs),
    /// Wait until the agents end, then print each one's result object, one
    /// JSON object per line; exit 1 if any did not complete, 124 on
    /// --timeout.
    Wait(agents::WaitArgs),
    /// Stop a running agent: cancel, grace period, kill; its partial
    /// results and transcript are kept.
    Terminate(agents::TerminateArgs),
    /// Show an agent's transcript, a run (its plan with statuses, each
    /// step's attempts and verdicts), or one step; --json for the file.
    Show(show::ShowArgs),
    /// Write a run as one self-contained HTML page: the DAG, the steps,
    /// every transcript.
    Report(show::ReportArgs),
    /// List the runs of a workspace, newest first: id, status, steps,
    /// agents, tokens, duration, goal. `last` names the newest anywhere a
    /// run id is taken.
    Runs(runs::RunsArgs),
    /// Print a shell completion script.
    Completions(about::CompletionsArgs),
    /// Print troupe's manual page (roff), or write a page per command.
    Man(about::ManArgs),
    /// Bring the result of a run made with --isolation worktree (its branch
    /// troupe/<run_id>) into the workspace, as `troupe run` does at its end
    /// unless --no-apply; refuses, changing nothing, when a path the run
    /// changed was changed there since the run began.
    Apply(isolated::ApplyArgs),
    /// Remove the checkouts a run made with --isolation worktree kept for
    /// its failed steps; the branch stays.
    Clean(isolated::CleanArgs),
    /// MCP tool servers: `troupe mcp list` starts each configured one and
    /// prints its tools.
    Mcp(mcp::McpArgs),
    /// Run one agent to completion and print its result object as JSON.
    ///
    /// Progress goes to stderr, one line per model turn and tool call. The
    /// agent's files and transcript stay in its deliverables directory.
    Spawn(Box<spawn::SpawnArgs>),
}

pub fn main() -> ExitCode {
    crate::sandbox::shut_inherited(crate::sandbox::Inherited::CloseOnExec);
    // troupe holds the API key and every agent's pipe: no process of the
    // same user may read its environment or its file descriptors.
    if let Err(e) = crate::sandbox::make_undumpable() {
        crate::tell!("troupe: cannot close this process's /proc entries (PR_SET_DUMPABLE): {e}");
        return ExitCode::FAILURE;
    }
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let sources = match config::Sources::load(&args) {
        Ok(sources) => sources,
        Err(e) => {
            crate::tell!("troupe: {e}");
            return ExitCode::from(2);
        }
    };
    let cli = parse(&args);
    crate::paint::choose(cli.color);
    if matches!(
        cli.command,
        Command::Run(_) | Command::Spawn(_) | Command::Apply(_)
    ) && let Err(e) = traces::start(cli.otlp_endpoint.as_deref(), &sources)
    {
        crate::tell!("troupe: {e}");
        return ExitCode::from(2);
    }
    // One thread: it forks every child, and PR_SET_PDEATHSIG is bound to
    // the forking thread, so that thread must live as long as troupe.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            crate::tell!("troupe: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async {
        if let Some(server) = cli.tied_to {
            tokio::spawn(tied::watch(server));
        }
        match cli.command {
            Command::Spawn(args) => spawn::run(*args, &sources).await,
            Command::Run(args) => run::run(*args, &sources).await,
            Command::Plan(args) => plan::plan(args, &sources).await,
            Command::Validate(args) => plan::validate(args, &sources),
            Command::Status(args) => agents::status(args),
            Command::Wait(args) => agents::wait(args).await,
            Command::Terminate(args) => agents::terminate(args).await,
            Command::Show(args) => show::show(args).await,
            Command::Report(args) => show::report(args),
            Command::Runs(args) => runs::runs(args),
            Command::Apply(args) => isolated::apply_run(args).await,
            Command::Mcp(args) => mcp::mcp(args, &sources).await,
            Command::Clean(args) => isolated::clean(args).await,
            Command::Completions(args) => about::completions(args),
            Command::Man(args) => about::man(args),
        }
    });
    // The last spans leave, or are given up on, before troupe ends.
    crate::telemetry::finish();
    match outcome {
        Ok(code) => code,
        Err(error) => {
            crate::tell!("troupe: {}", said_once(&error));
            if error.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// The command line, with `--color` (and NO_COLOR) already heeded by
/// `--help` and the argument errors, which clap prints before troupe's
/// own choice is made.
fn parse(args: &[std::ffi::OsString]) -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let asked = args.windows(2).find_map(|pair| match pair[0].to_str() {
        Some("--color") => pair[1].to_str().map(str::to_string),
        _ => None,
    });
    let asked = asked.or_else(|| {
        args.iter()
            .find_map(|a| a.to_str()?.strip_prefix("--color=").map(str::to_string))
    });
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let choice = match asked.as_deref() {
        Some("never") => clap::ColorChoice::Never,
        Some("always") => clap::ColorChoice::Always,
        _ if no_color => clap::ColorChoice::Never,
        _ => clap::ColorChoice::Auto,
    };
    let matched = Cli::command()
        .color(choice)
        .try_get_matches_from(args)
        .and_then(|matches| Cli::from_arg_matches(&matches));
    matched.unwrap_or_else(|e| e.exit())
}

/// The error and its causes, each said once: a cause whose words the
/// message already holds (a typed error that names its source in its own
/// text) is not said again.
fn said_once(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

/// The `troupe-agent` to start: the one given, or the one installed next
/// to this `troupe`; and whether it is that one, which takes its own
/// session (a stand-in is given one).
fn agent_program(given: Option<&Path>) -> Result<(PathBuf, bool), UsageError> {
    let exe = std::env::current_exe()
        .map_err(|e| UsageError::Said(format!("cannot locate the troupe binary: {e}")))?;
    let ours = exe.with_file_name("troupe-agent");
    let path = given.map_or_else(|| ours.clone(), Path::to_path_buf);
    if !path.is_file() {
        return Err(UsageError::Said(format!(
            "the agent binary {} does not exist; build it (cargo build) or name it with --agent-bin or TROUPE_AGENT_BIN",
            path.display()
        )));
    }
    let path = path
        .canonicalize()
        .map_err(|e| UsageError::Said(format!("{}: {e}", path.display())))?;
    let is_ours = ours.canonicalize().is_ok_and(|ours| ours == path);
    Ok((path, is_ours))
}
