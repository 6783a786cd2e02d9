//! `troupe run`: plan a goal (or take a plan) and run it as a team.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use sha2::{Digest, Sha256};

use super::UsageError;
use super::agent_args::AgentArgs;
use super::config::Sources;
use super::plan::read_plan_file;
use crate::chat::Actor;
use crate::llm::{ChatModel, ModelConfig, build_model};
use crate::plan::Plan;
use crate::record::IsolationMode;
use crate::run::{
    RoleModel, Start, TeamConfig, TeamError, TeamModels, TeamSettings, find_run, run_team,
};
use crate::settings::model::{ModelFlags, RoleFlags};
use crate::telemetry::Span;

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  troupe run \"create a demoapp project and verify it\" --model gpt-4o-mini\n  troupe run --goal-file goal.md --workspace ./repo --max-parallel 3 --deadline 1800\n  troupe plan \"refactor the parser\" -o plan.json && troupe run --plan plan.json\n  troupe run --resume last\n  troupe run \"...\" --model deepseek-chat --reviewer-model gpt-4o-mini --reviewer-base-url https://api.openai.com/v1"
)]
pub struct RunArgs {
    /// The goal, in words; the Planner turns it into steps.
    #[arg(value_name = "GOAL", conflicts_with_all = ["goal_file", "resume"])]
    pub goal: Option<String>,

    /// Read the goal from a file (- for standard input).
    #[arg(long, value_name = "FILE", conflicts_with = "resume")]
    pub goal_file: Option<PathBuf>,

    /// Continue an interrupted or failed run (its id in
    /// sub_agent_results/, or its directory): completed steps stay, the
    /// others run again.
    #[arg(long, value_name = "RUN")]
    pub resume: Option<String>,

    /// Run this plan (from `troupe plan`, or written by hand) instead of
    /// asking the Planner; it is validated first.
    #[arg(long, value_name = "FILE")]
    pub plan: Option<PathBuf>,

    /// The shared workspace (its last level made if missing); the run's
    /// records go to sub_agent_results/<run_id>/ inside.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workspace: PathBuf,

    /// Print the run's events on stdout as JSON lines.
    #[arg(long)]
    pub json: bool,

    /// Show every agent's model turns and tool calls on stderr.
    #[arg(long, short, conflicts_with = "quiet")]
    pub verbose: bool,

    /// No progress on stderr (the plan, each step's lines, the summary):
    /// warnings and errors only. With --json, the events are the output.
    #[arg(long, short)]
    pub quiet: bool,

    /// When the run ends, run this shell command; the path of its run.json
    /// is $1 and $TROUPE_RESULT there (e.g. 'notify-send done "$1"').
    #[arg(long, value_name = "CMD")]
    pub on_finish: Option<String>,

    #[command(flatten)]
    pub team: TeamArgs,

    #[command(flatten)]
    pub agent: AgentArgs,

    #[command(flatten)]
    pub model: ModelFlags,

    #[command(flatten)]
    pub roles: RoleFlags,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "The run")]
pub struct TeamArgs {
    /// Steps whose agents may run at the same time.
    #[arg(long, value_name = "N", default_value_t = 5, allow_negative_numbers = true, value_parser = crate::settings::numbers::positive::<u32>)]
    pub max_parallel: u32,

    /// Extra attempts of a step after a reviewer's rejection.
    #[arg(long, value_name = "N", default_value_t = 2, allow_negative_numbers = true, value_parser = crate::settings::numbers::count::<u32>)]
    pub max_retries: u32,

    /// Times the Planner may plan the rest anew when under half the steps
    /// completed; 0 disables replanning.
    #[arg(long, value_name = "N", default_value_t = 2, allow_negative_numbers = true, value_parser = crate::settings::numbers::count::<u32>)]
    pub max_replans: u32,

    /// Let a step whose review failed twice (model error, crash, timeout)
    /// count as done instead of failed.
    #[arg(long)]
    pub accept_unreviewed: bool,

    /// Child processes the whole run may start.
    #[arg(long, value_name = "N", default_value_t = 200, allow_negative_numbers = true, value_parser = crate::settings::numbers::positive::<u32>)]
    pub max_agents: u32,

    /// Tokens the whole run may spend; once reached, no new agent starts.
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = crate::settings::numbers::positive::<u64>)]
    pub max_tokens: Option<u64>,

    /// US dollars the whole run may spend (the planner's too), by the
    /// prices in [prices] or the provider's own figures; once reached, no
    /// new agent starts, and the run ends limit_reached. Every model the run
    /// uses needs a price [env: TROUPE_MAX_COST].
    #[arg(long, value_name = "USD", value_parser = crate::settings::numbers::dollars)]
    pub max_cost: Option<f64>,

    /// Seconds of wall-clock for the whole run; then every agent is
    /// stopped, partial results kept, exit code 124.
    #[arg(long, value_name = "SECS", allow_negative_numbers = true, value_parser = crate::settings::numbers::seconds)]
    pub deadline: Option<u64>,

    /// How workers share the workspace. worktree: each step attempt works
    /// in a git checkout of its own, the reviewer reads its diff, and an
    /// approved change is merged into the branch troupe/<run_id>, which is
    /// brought into the workspace when the run completes (unless
    /// --no-apply). shared: every worker writes the workspace itself.
    /// auto: worktree when more than one step can run at once.
    #[arg(long, value_enum, value_name = "MODE", default_value_t = IsolationMode::Auto)]
    pub isolation: IsolationMode,

    /// Bring a completed run's result into the workspace when it ends,
    /// whatever the isolation (shared workers wrote it there already).
    /// This is the default; the flag is kept for the scripts that pass
    /// it. A path changed in the workspace since the run began is never
    /// overwritten: then nothing is applied, the run exits 1 and names the
    /// paths and the branch (the same as `troupe apply RUN`). A run that
    /// did not complete is not applied.
    #[arg(long, conflicts_with = "no_apply")]
    pub apply: bool,

    /// Leave the workspace as it is: the result stays on the branch
    /// troupe/<run_id> (kept either way), and the run's last line is the
    /// `troupe apply` command that brings it in.
    #[arg(long)]
    pub no_apply: bool,
}

pub async fn run(mut args: RunArgs, sources: &Sources) -> anyhow::Result<ExitCode> {
    crate::console::set_quiet(args.quiet);
    args.team.max_cost = crate::settings::money(args.team.max_cost, sources, "TROUPE_MAX_COST")
        .map_err(UsageError::Said)?;
    args.agent.max_agent_cost = args.agent.max_agent_cost(sources)?;
    let plan = args.plan.as_deref().map(read_plan_file).transpose()?;
    let workspace = super::workspace::open_workspace(&workspace_of(&args))?;
    let results = workspace.join(crate::protocol::RESULTS_DIR);
    crate::llm::openai::share_pauses_in(&results);
    let start = match &args.resume {
        Some(run) => Start::Resume {
            run_dir: find_run(
                &workspace,
                &crate::inspect::runs::expand_last(&results, run).map_err(UsageError::Said)?,
            )
            .map_err(UsageError::of)?,
            plan,
        },
        None => Start::Fresh {
            goal: goal(&args, plan.as_ref())?,
            plan,
        },
    };
    // The record of a run being resumed, read once.
    let earlier = match &start {
        Start::Resume { run_dir, .. } => Some(crate::inspect::load_run(run_dir)),
        Start::Fresh { .. } => None,
    };
    if let (Some(Ok(record)), Start::Resume { run_dir, .. }) = (&earlier, &start)
        && record.status == crate::record::RunStatus::Completed
        && record
            .apply
            .as_ref()
            .is_some_and(|apply| apply.state != crate::record::ApplyState::Applied)
        && !args.team.no_apply
    {
        // Ended before its result reached the workspace (killed, or
        // refused): that is what is left to resume.
        crate::tell!(
            "troupe: run {} completed; its result is not in the workspace yet: applying it",
            record.run_id
        );
        let span = run_span(&start, Some(record));
        let code = super::isolated::after_run(run_dir, true, 0, &span, args.json).await;
        run_ended(&span, run_dir, code);
        return Ok(ExitCode::from(code));
    }
    if let Some(Ok(record)) = &earlier
        && record.status == crate::record::RunStatus::Completed
    {
        crate::tell!(
            "troupe: run {} completed already; nothing to resume (troupe show {} shows it)",
            record.run_id,
            record.run_id
        );
        return Ok(ExitCode::SUCCESS);
    }
    let span = run_span(&start, earlier.as_ref().and_then(|r| r.as_ref().ok()));
    // A resume that names no model goes on with the run's own.
    let remembered = match &earlier {
        Some(record) if !args.model.named(sources) => {
            let record = record.as_ref().map_err(|e| UsageError::Said(e.clone()))?;
            if !record.models.is_empty() {
                crate::tell!(
                    "troupe: resume: with the run's own models (name one with --model to change them)"
                );
            }
            record.models.clone()
        }
        _ => Default::default(),
    };
    let lookup = Remembered {
        sources,
        models: &remembered,
    };
    let roles = ROLES.map(|role| {
        args.model
            .resolve_role(role, &args.roles, &lookup)
            .map_err(UsageError::Said)
    });
    let [planner, worker, reviewer] = roles;
    let roles = [planner?, worker?, reviewer?];
    let capped = [
        ("--max-cost", args.team.max_cost),
        ("--max-agent-cost", args.agent.max_agent_cost),
    ];
    if let Some((flag, _)) = capped.iter().find(|(_, cap)| cap.is_some())
        && let Some(model) = roles.iter().find_map(|r| r.unpriced())
    {
        return Err(UsageError::Said(crate::settings::model::needs_price(flag, model)).into());
    }
    let api_key_envs: Vec<String> = roles.iter().map(|r| r.api_key_env.clone()).collect();
    let mut notices: Vec<&String> = roles.iter().filter_map(|r| r.notice.as_ref()).collect();
    notices.dedup();
    for notice in notices {
        crate::tell!("troupe: {notice}");
    }
    let models = ROLES
        .iter()
        .zip(&roles)
        .flat_map(|(role, model)| model.as_variables(*role))
        .collect();
    let mut agents = args
        .agent
        .settings(sources, &results, &api_key_envs, None)?;
    let given = match &start {
        Start::Fresh { plan, .. } | Start::Resume { plan, .. } => plan.as_ref(),
    };
    if let Some(plan) = given {
        crate::run::ceiling::Ceiling::of(&agents)
            .check(plan)
            .map_err(|e| UsageError::Said(format!("the plan is refused: {e}")))?;
    }
    agents.remote_mcp = crate::mcp::remote::RemoteServers::connect(&agents.mcp, &workspace)
        .await
        .map(Arc::new);
    let config = TeamConfig {
        start,
        workspace,
        agents,
        team: TeamSettings {
            max_parallel: args.team.max_parallel as usize,
            max_retries: args.team.max_retries,
            max_replans: args.team.max_replans,
            accept_unreviewed: args.team.accept_unreviewed,
            max_agents: args.team.max_agents,
            max_tokens: args.team.max_tokens,
            max_cost: args.team.max_cost,
            deadline: args.team.deadline.map(Duration::from_secs),
            verbose: args.verbose,
            isolation: args.team.isolation,
            apply: !args.team.no_apply,
        },
        models,
        json: args.json,
        span: span.clone(),
    };
    let outcome = run_team(config, team_models(roles)?)
        .await
        .map_err(|e| match e {
            TeamError::Resume(e) => anyhow::Error::from(UsageError::of(e)),
            other => anyhow::Error::from(other),
        })?;
    let code = super::isolated::after_run(
        &outcome.run_dir,
        !args.team.no_apply,
        outcome.exit_code,
        &span,
        args.json,
    )
    .await;
    run_ended(&span, &outcome.run_dir, code);
    if let Some(command) = &args.on_finish {
        crate::supervisor::notify::on_finish(command, &outcome.run_dir.join("run.json")).await;
    }
    Ok(ExitCode::from(code))
}

const ROLES: [Actor; 3] = [Actor::Planner, Actor::Worker, Actor::Reviewer];

/// The run's span: a new trace, or the trace the resumed run `earlier`
/// began.
fn run_span(start: &Start, earlier: Option<&crate::record::RunRecord>) -> Span {
    let goal = match (start, earlier) {
        (Start::Fresh { goal, .. }, _) => goal.as_str(),
        (Start::Resume { .. }, Some(record)) => record.goal.as_str(),
        (Start::Resume { .. }, None) => "",
    };
    let span = Span::root("troupe.run", earlier.and_then(|r| r.trace()));
    if span.context().is_none() {
        return span;
    }
    let digest = Sha256::digest(goal.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    span.set("troupe.goal.sha256", hex);
    span.set("troupe.resumed", earlier.is_some());
    span
}

/// The run's span, ended with what its record says.
fn run_ended(span: &Span, run_dir: &Path, code: u8) {
    if span.context().is_none() {
        return;
    }
    if let Ok(record) = crate::inspect::load_run(run_dir) {
        span.set("troupe.run.id", record.run_id.clone());
        span.set("troupe.run.outcome", record.status.as_str());
        if let Some(mode) = record.isolation_mode {
            span.set("troupe.isolation", mode.as_str());
        }
        span.set("troupe.steps", record.steps.len() as i64);
        span.tokens(record.totals.token_usage);
    }
    span.set("troupe.exit_code", i64::from(code));
    match code {
        0 => span.succeed(),
        code => span.fail(format!("the run exited {code}")),
    }
    span.end();
}

/// The workspace of a run: `--workspace`, unless `--resume` names a run's
/// directory and `--workspace` is left at its default, when it is the
/// workspace that directory is in (`<workspace>/sub_agent_results/<run>`).
fn workspace_of(args: &RunArgs) -> PathBuf {
    let Some(run) = args.resume.as_deref().map(Path::new) else {
        return args.workspace.clone();
    };
    let in_results = run
        .canonicalize()
        .ok()
        .filter(|dir| crate::fsutil::is_regular(&dir.join("run.json")))
        .and_then(|dir| {
            let results = dir.parent()?;
            (results.file_name()? == crate::protocol::RESULTS_DIR)
                .then(|| results.parent().map(Path::to_path_buf))
                .flatten()
        });
    match in_results {
        Some(workspace) if args.workspace == Path::new(".") => workspace,
        _ => args.workspace.clone(),
    }
}

/// The settings a run is started with, and after them a resumed run's
/// own model settings.
struct Remembered<'a> {
    sources: &'a Sources,
    models: &'a std::collections::BTreeMap<String, String>,
}

impl crate::settings::Lookup for Remembered<'_> {
    fn get(&self, env: &str) -> Option<crate::settings::Sourced> {
        self.sources.get(env).or_else(|| {
            self.models.get(env).map(|value| crate::settings::Sourced {
                value: value.clone(),
                origin: format!("{env} in the run's run.json"),
            })
        })
    }

    fn paths(&self, env: &str) -> Option<Vec<PathBuf>> {
        self.sources.paths(env)
    }

    fn config_file(&self) -> Option<&Path> {
        self.sources.config_file()
    }

    fn mcp_servers(&self) -> Vec<crate::mcp::config::ServerConfig> {
        self.sources.mcp_servers()
    }

    fn prices(&self) -> std::collections::BTreeMap<String, crate::llm::Price> {
        self.sources.prices()
    }

    fn web(&self) -> crate::web::WebConfig {
        self.sources.web()
    }
}

/// One client per distinct model configuration: roles that share an
/// endpoint and settings share its connections and what it learned (that
/// it refuses response_format, say).
fn team_models(roles: [crate::settings::model::RoleModel; 3]) -> Result<TeamModels, UsageError> {
    let mut built: Vec<(ModelConfig, Arc<dyn ChatModel>)> = Vec::new();
    let mut model_of = |role: &crate::settings::model::RoleModel| {
        if let Some((_, model)) = built.iter().find(|(config, _)| *config == role.config) {
            return Ok(model.clone());
        }
        let model = build_model(&role.config).map_err(UsageError::of)?;
        built.push((role.config.clone(), model.clone()));
        Ok::<_, UsageError>(model)
    };
    let [planner, worker, reviewer] = roles;
    Ok(TeamModels {
        planner: model_of(&planner)?,
        workers: RoleModel {
            model: model_of(&worker)?,
            context_window: worker.context_window,
            max_output_tokens: worker.config.max_output_tokens(),
        },
        reviewers: RoleModel {
            model: model_of(&reviewer)?,
            context_window: reviewer.context_window,
            max_output_tokens: reviewer.config.max_output_tokens(),
        },
    })
}

/// The goal from the arguments, its file, or the plan's summary.
fn goal(args: &RunArgs, plan: Option<&Plan>) -> Result<String, UsageError> {
    let goal = match (&args.goal, &args.goal_file, plan) {
        (Some(goal), _, _) => goal.trim().to_string(),
        (None, Some(file), _) => super::text_file::read(file, "the goal file")?
            .trim()
            .to_string(),
        (None, None, Some(plan)) => plan.summary.clone(),
        (None, None, None) => {
            return Err(UsageError::Said(
                "give the goal (troupe run \"GOAL\"), --goal-file FILE, --plan FILE or --resume RUN".into(),
            ));
        }
    };
    if goal.is_empty() && plan.is_none() {
        return Err(UsageError::Said(
            "the goal is empty; say what the team should achieve".into(),
        ));
    }
    Ok(goal)
}
