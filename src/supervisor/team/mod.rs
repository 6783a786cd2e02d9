//! Team runs (`troupe run`): plan a goal, then run every step as a Worker
//! child and a Reviewer child, scheduled eagerly over the plan's DAG.
//!
//! Everything lands in `<workspace>/sub_agent_results/<run_id>/`:
//! `plan.json`, `run.json` (current at every change), `events.jsonl`, the
//! planner's transcript in `planner/`, and per step one directory for each
//! worker attempt (`worker-N`) and each review (`review-N`).

mod briefs;
mod budget;
mod claims;
mod context;
mod events;
mod planner;
pub mod record;
mod recorder;
mod replan;
mod resume;
mod review;
mod scheduler;
mod step;
mod summary;

use std::path::PathBuf;
use std::sync::Arc;

use chrono::Utc;

pub use self::context::{AgentSettings, TeamSettings};
pub use self::planner::{PlanFailure, Planner};
pub use self::record::{RunRecord, RunStatus, StepStatus};

use self::budget::Budget;
use self::context::{AgentLines, RunContext};
use self::events::RunEvent;
use self::record::{StepRecord, Totals};
use self::recorder::Recorder;
use self::resume::ResumeError;
pub use self::resume::find_run;
use super::plan::{Plan, levels, render_tree};
use crate::fsutil::write_json_atomic;
use crate::llm::ChatModel;
use crate::protocol::display_in;
use crate::signal::StopSignal;
use crate::supervisor::interrupt::{EXIT_INTERRUPTED, Interrupts};

pub struct TeamConfig {
    pub start: Start,
    /// Canonical path of the workspace.
    pub workspace: PathBuf,
    pub agents: AgentSettings,
    pub team: TeamSettings,
    /// Print the event stream on stdout.
    pub json: bool,
}

/// A new run, or an old one picked up again.
pub enum Start {
    Fresh {
        goal: String,
        /// A plan given with `--plan`; otherwise the Planner makes one.
        plan: Option<Plan>,
    },
    Resume {
        run_dir: PathBuf,
        /// A plan given with `--plan`, which must be the run's own.
        plan: Option<Plan>,
    },
}

pub struct TeamOutcome {
    pub exit_code: u8,
    pub run_dir: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum TeamError {
    #[error(transparent)]
    Resume(#[from] ResumeError),
    #[error("cannot keep the run's records: {0}")]
    Io(#[from] std::io::Error),
}

/// Exit codes (SPEC section 4).
pub const EXIT_FAILED: u8 = 1;
pub const EXIT_INVALID_PLAN: u8 = 2;
pub const EXIT_DEADLINE: u8 = 124;

pub async fn run_team(
    config: TeamConfig,
    model: Arc<dyn ChatModel>,
) -> Result<TeamOutcome, TeamError> {
    let (run_dir, record, resumed) = match &config.start {
        Start::Fresh { goal, .. } => {
            let run_id = new_run_id();
            let run_dir = config
                .workspace
                .join(crate::protocol::RESULTS_DIR)
                .join(&run_id);
            crate::fsutil::nofollow::create_new_dir(&run_dir)?;
            let record = fresh_record(&config, &run_id, goal, &run_dir);
            (run_dir, record, None)
        }
        Start::Resume { run_dir, plan } => {
            let (record, again) =
                resume::load(run_dir, plan.as_ref(), config.team.accept_unreviewed)?;
            (run_dir.clone(), record, Some(again))
        }
    };
    let budget = Budget::new(config.team.max_agents, config.team.max_tokens)
        .already_spent(record.totals.agents, record.totals.token_usage);
    let model = budget.counting(model);
    let settings = serde_json::to_value(&config.team).unwrap_or_default();
    let recorder = Recorder::create(&run_dir, record, config.json)?;
    let stop = StopSignal::default();
    let interrupts = Interrupts::watch(stop.clone())?;
    let ctx = RunContext {
        goal: recorder.with(|run| run.goal.clone()).unwrap_or_default(),
        workspace: config.workspace.clone(),
        run_dir: run_dir.clone(),
        lines: AgentLines::new(config.team.verbose),
        agents: config.agents,
        team: config.team,
        model,
        recorder,
        budget,
        stop,
        interrupts,
    };
    let mut planner = Planner::new(
        ctx.model.clone(),
        ctx.agents.prompts_dir.clone(),
        Some(run_dir.join("planner").join("conversations.json")),
    );
    match (config.start, resumed) {
        (Start::Fresh { plan, .. }, _) => {
            let event = RunEvent::RunStarted {
                run_id: ctx
                    .recorder
                    .with(|run| run.run_id.clone())
                    .unwrap_or_default(),
                goal: ctx.goal.clone(),
                run_dir: ctx.show(&run_dir),
            };
            ctx.recorder.emit(event, |_| {});
            let plan = match plan {
                Some(plan) => plan,
                None => match ctx.stop.race(planner.plan(&ctx.goal)).await {
                    Ok(Ok(plan)) => plan,
                    Ok(Err(failure)) => return Ok(invalid_plan(&ctx, failure)),
                    Err(_) => return Ok(finish(&ctx)),
                },
            };
            start(&ctx, &plan)?;
        }
        (Start::Resume { .. }, again) => {
            let event = RunEvent::RunResumed {
                run_id: ctx
                    .recorder
                    .with(|run| run.run_id.clone())
                    .unwrap_or_default(),
                steps: again.unwrap_or_default(),
            };
            ctx.recorder.emit(event, |run| run.settings = settings);
            let tree = ctx.recorder.with(|run| {
                render_tree(&run.live_plan(), |id| {
                    run.step(id).map(|s| s.status.as_str().to_string())
                })
            });
            eprint!("{}", tree.unwrap_or_default());
        }
    }
    if let Some(deadline) = ctx.team.deadline {
        let stop = ctx.stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(deadline).await;
            stop.trigger(format!(
                "the run's deadline of {} s passed (--deadline)",
                deadline.as_secs()
            ));
        });
    }
    tokio::select! {
        () = scheduler::schedule(&ctx, &mut planner) => {}
        // A second Ctrl-C: every child is already killed; what was running
        // is recorded as interrupted by `finish`.
        _ = ctx.interrupts.killed() => {}
    }
    Ok(finish(&ctx))
}

fn fresh_record(
    config: &TeamConfig,
    run_id: &str,
    goal: &str,
    run_dir: &std::path::Path,
) -> RunRecord {
    RunRecord {
        run_id: run_id.to_string(),
        goal: goal.to_string(),
        status: RunStatus::Planning,
        reason: None,
        workspace: config.workspace.display().to_string(),
        run_dir: display_in(&config.workspace, run_dir),
        created_at: Utc::now(),
        updated_at: Utc::now(),
        completed_at: None,
        plan_summary: String::new(),
        replans: 0,
        steps: Vec::new(),
        totals: Totals::default(),
        settings: serde_json::to_value(&config.team).unwrap_or_default(),
    }
}

/// Records the plan and prints it.
fn start(ctx: &RunContext, plan: &Plan) -> std::io::Result<()> {
    let file = ctx.run_dir.join("plan.json");
    write_json_atomic(&file, plan)?;
    let event = RunEvent::PlanReady {
        round: 0,
        summary: plan.summary.clone(),
        steps: plan.steps.len(),
        levels: levels(plan).len(),
        file: ctx.show(&file),
    };
    ctx.recorder.emit(event, |run| {
        run.status = RunStatus::Running;
        run.plan_summary = plan.summary.clone();
        run.steps = plan.steps.iter().map(|s| StepRecord::new(s, 0)).collect();
    });
    eprint!("{}", render_tree(plan, |_| None));
    Ok(())
}

fn invalid_plan(ctx: &RunContext, failure: PlanFailure) -> TeamOutcome {
    let saved = ctx.save_planner_answer("invalid-plan.txt", &failure.answer);
    let reason = format!("the planner's plan is invalid: {}", failure.reason);
    let event = RunEvent::PlanInvalid {
        round: 0,
        reason: failure.reason,
        saved: ctx.show(&saved),
    };
    ctx.recorder.emit(event, |run| {
        run.status = RunStatus::Failed;
        run.reason = Some(reason);
        run.completed_at = Some(Utc::now());
    });
    TeamOutcome {
        exit_code: EXIT_INVALID_PLAN,
        run_dir: ctx.run_dir.clone(),
    }
}

/// The run's status and exit code, recorded and shown.
fn finish(ctx: &RunContext) -> TeamOutcome {
    let accept = ctx.team.accept_unreviewed;
    let all_done = ctx
        .recorder
        .with(|run| {
            run.steps.iter().all(|s| {
                matches!(s.status, StepStatus::Completed | StepStatus::Replaced)
                    || (accept && s.status == StepStatus::Unreviewed)
            })
        })
        .unwrap_or(false);
    let interrupted = ctx.interrupts.interrupted();
    let (status, exit_code) = match (interrupted, ctx.stop.reason(), all_done) {
        (true, _, _) => (RunStatus::Interrupted, EXIT_INTERRUPTED),
        (false, Some(_), _) => (RunStatus::DeadlineExceeded, EXIT_DEADLINE),
        (false, None, true) => (RunStatus::Completed, 0),
        (false, None, false) => (RunStatus::Failed, EXIT_FAILED),
    };
    let usage = ctx.budget.usage();
    let agents = ctx.budget.agents();
    let seconds = crate::protocol::round_seconds(ctx.recorder.elapsed_seconds());
    ctx.recorder.update(|run| {
        if interrupted {
            let cut = [StepStatus::Running, StepStatus::Reviewing];
            for step in run.steps.iter_mut().filter(|s| cut.contains(&s.status)) {
                step.status = StepStatus::Interrupted;
            }
        }
        run.status = status;
        run.completed_at = Some(Utc::now());
        run.totals.token_usage = usage;
        run.totals.agents = agents;
        run.totals.runtime_seconds = seconds;
        if status == RunStatus::Failed && run.reason.is_none() {
            run.reason = Some(format!(
                "{} failed, {} skipped, {} unreviewed",
                run.totals.failed, run.totals.skipped, run.totals.unreviewed
            ));
        }
    });
    let totals = ctx
        .recorder
        .with(|run| run.totals.clone())
        .unwrap_or_default();
    let event = RunEvent::RunFinished {
        status,
        exit_code,
        completed: totals.completed,
        failed: totals.failed,
        skipped: totals.skipped,
        unreviewed: totals.unreviewed,
        seconds,
        token_usage: usage,
    };
    ctx.recorder.emit(event, |_| {});
    if let Some(table) = ctx.recorder.with(summary::summary_table) {
        eprint!("{table}");
    }
    TeamOutcome {
        exit_code,
        run_dir: ctx.run_dir.clone(),
    }
}

/// `run_<UTC time>_<4 hex digits>`: sortable, and distinct for runs started
/// in the same second.
fn new_run_id() -> String {
    let now = Utc::now();
    let noise = (now.timestamp_subsec_nanos() ^ std::process::id().rotate_left(16)) & 0xffff;
    format!("run_{}_{noise:04x}", now.format("%Y%m%dT%H%M%SZ"))
}
