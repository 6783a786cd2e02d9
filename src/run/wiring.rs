//! A run's parts put together: the budget and the models it counts, the
//! recorder, the "still running" lines, the runner of the agents, the
//! context the steps share, the Planner and the owner. `run_team` and
//! the in-process tests both come through here, so that what the tests
//! drive is what `troupe run` runs; they differ only in what they hand
//! over: the runner (child processes, or a script) and the models.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use super::budget::Budget;
use super::context::{AgentLines, RunContext, TeamSettings};
use super::events::RunEvent;
use super::liveness::Liveness;
use super::owner::Owner;
use super::planner::Planner;
use super::recorder::Recorder;
use super::runner::{AgentRunner, RoleModel};
use super::{Opening, TeamModels, conduct};
use crate::llm::DelayObserver;
use crate::record::RunRecord;
use crate::run::isolation::Worktrees;
use crate::signal::StopSignal;
use crate::supervisor::interrupt::Interrupts;

/// What a run is wired from, besides its runner and models.
pub(super) struct Wiring {
    /// Canonical path of the workspace.
    pub workspace: PathBuf,
    pub run_dir: PathBuf,
    /// The record as the run opens: fresh, or read back to resume.
    pub record: RunRecord,
    pub team: TeamSettings,
    pub prompts: crate::prompts::Prompts,
    pub max_file_size: Option<u64>,
    /// The workspace's paths (relative) troupe reads as its own: its
    /// prompts directory or settings file, when they lie there. Read-only
    /// to every agent, and never landed from a change.
    pub guarded: Vec<PathBuf>,
    /// Print the event stream on stdout (`--json`).
    pub json: bool,
    /// The run's stop; whoever triggers it (the deadline, the interrupt
    /// watch, a test) holds a clone.
    pub stop: StopSignal,
    /// Where the second Ctrl-C comes from.
    pub interrupts: Interrupts,
    /// Which checkouts the run's attempts get, once it isolates them.
    pub checkouts: crate::run::isolation::Checkouts,
    /// A resumed run's checkouts.
    pub isolation: Option<Arc<Worktrees>>,
    /// What the steps of the Planner's plans may ask for.
    pub ceiling: Option<crate::run::ceiling::Ceiling>,
    /// The run's span (nothing when no traces are exported).
    pub span: crate::telemetry::Span,
}

/// What the runner of a run's agents is made with.
pub(super) struct Agents {
    /// Stops every running agent: the deadline, or the first Ctrl-C.
    pub stop: StopSignal,
    /// The role models, each counting against the run's budget.
    pub workers: RoleModel,
    pub reviewers: RoleModel,
    /// Where the agents' progress goes.
    pub lines: AgentLines,
}

/// Wires the run and conducts it from `opening` to its end; the exit
/// code.
pub(super) async fn run(
    wiring: Wiring,
    models: TeamModels,
    runner: impl FnOnce(Agents) -> Box<dyn AgentRunner>,
    opening: Opening,
) -> std::io::Result<u8> {
    let Wiring {
        workspace,
        run_dir,
        record,
        team,
        prompts,
        max_file_size,
        guarded,
        json,
        stop,
        interrupts,
        isolation,
        checkouts,
        ceiling,
        span,
    } = wiring;
    let budget = Budget::new(team.max_agents, team.max_tokens)
        .costing_at_most(team.max_cost)
        .already_spent(record.totals.agents, record.totals.token_usage);
    let counted = |role: RoleModel| RoleModel {
        model: budget.counting(role.model),
        ..role
    };
    let workers = counted(models.workers);
    let reviewers = counted(models.reviewers);
    let planner_model = budget.counting(models.planner);
    let record = Arc::new(record);
    let recorder = Recorder::create(&run_dir, &record, json)?;
    let liveness = Arc::new(Liveness::default());
    let still_running = super::liveness::start(Arc::clone(&liveness));
    let runner = runner(Agents {
        stop: stop.clone(),
        workers,
        reviewers,
        lines: AgentLines::new(team.verbose, recorder.log(), liveness),
    });
    let ctx = RunContext {
        goal: record.goal.clone(),
        workspace,
        run_dir: run_dir.clone(),
        team,
        prompts: prompts.clone(),
        runner,
        budget,
        stop,
        max_file_size,
        guarded,
        isolation: OnceLock::new(),
        writing: OnceLock::new(),
        checkouts,
        span,
    };
    if let Some(trees) = isolation {
        let _ = ctx.isolation.set(trees);
    }
    let log = recorder.log();
    let delays = DelayObserver(Arc::new(move |delay: &crate::llm::Delay| {
        log.event(&RunEvent::delay("planner", delay));
    }));
    let mut planner = Planner::new(
        planner_model,
        prompts,
        Some(run_dir.join("planner").join("conversations.json")),
    )
    .with_delays(delays)
    .in_trace(ctx.span.context());
    if let Some(ceiling) = ceiling {
        planner = planner.with_ceiling(ceiling);
    }
    let mut owner = Owner::new(&ctx, record, recorder);
    let exit_code = conduct(&mut owner, &mut planner, &interrupts, opening).await;
    still_running.abort();
    exit_code
}
