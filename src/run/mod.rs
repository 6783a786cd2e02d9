//! Team runs (`troupe run`): plan a goal, then run every step as a Worker
//! child and a Reviewer child, scheduled eagerly over the plan's DAG.
//!
//! Everything lands in `<workspace>/sub_agent_results/<run_id>/`:
//! `plan.json`, `run.json` (its schema is `record`), `events.jsonl`, the
//! planner's transcript in `planner/`, and per step one directory for each
//! worker attempt (`worker-N`) and each review (`review-N`).
//!
//! `wiring` puts a run together, for `run_team` and the in-process tests
//! alike, with the `context` every step shares. The `owner` holds the
//! run's record alone, schedules, and says what happens as `events`; each
//! `step` (with its `review`, its `briefs` and the `claims` check) is a
//! task that reports to it, in the workspace `isolation` gives each
//! attempt; agents start through the `runner` seam (`ProcessRunner`, or a
//! scripted one in the tests). The `planner` asks for the plan and
//! `replan` for a new one; `budget` and `liveness` bound the run, `end`
//! says how it ended, `resume` finds what an earlier run left, the
//! `recorder` writes run.json, events.jsonl and the run's output off the
//! agents' thread, and `summary` closes it for people. Calls `chat`,
//! `console`, `fsutil`, `llm`, `paint`, `plan`, `process`, `prompts`,
//! `protocol`, `record`, `sandbox`, `signal`, `supervisor`, `telemetry`,
//! `text`, `transcript`.

mod briefs;
mod budget;
pub mod ceiling;
mod claims;
mod context;
mod cut_short;
mod end;
mod events;
pub mod isolation;
mod liveness;
mod owner;
mod planner;
mod reconcile;
mod recorder;
mod replan;
mod replay;
mod resume;
mod review;
mod runner;
mod step;
mod summary;
#[cfg(test)]
mod tests;
mod unsealed;
mod wiring;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::Utc;
use serde::Serialize;

pub use self::context::{AgentLines, TeamSettings, WorkspaceError};
pub use self::end::{EXIT_DEADLINE, EXIT_FAILED};
pub use self::planner::{PlanFailure, Planner, ReplanContext};
pub use self::resume::find_run;
pub use self::runner::{AgentRequest, AgentRunner, ProcessRunner, RoleModel, RunFuture};

pub use self::events::RunEvent;
use self::owner::Owner;
use self::resume::{ResumeError, Resumed};
use self::wiring::{Agents, Wiring};
use crate::fsutil::dir_lock::DirLock;
use crate::llm::ChatModel;
use crate::plan::{Plan, levels, render_tree};
use crate::protocol::display_in;
use crate::record::IsolationMode;
use crate::record::{ApplyRecord, RunRecord, RunStatus, StepRecord, Totals};
use crate::run::isolation::{Bounds, Checkouts, IsolationError, Snapshot, Worktrees};
use crate::signal::{StopCause, StopSignal};
use crate::supervisor::AgentSettings;
use crate::supervisor::interrupt::Interrupts;

/// The model of each role of a run.
pub struct TeamModels {
    pub planner: Arc<dyn ChatModel>,
    pub workers: RoleModel,
    pub reviewers: RoleModel,
}

pub struct TeamConfig {
    pub start: Start,
    /// Canonical path of the workspace.
    pub workspace: PathBuf,
    pub agents: AgentSettings,
    pub team: TeamSettings,
    /// Each role's model settings, for the record (`RunRecord::models`).
    pub models: std::collections::BTreeMap<String, String>,
    /// Print the event stream on stdout.
    pub json: bool,
    /// The run's span, whose trace run.json records; nothing when no
    /// traces are exported.
    pub span: crate::telemetry::Span,
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
    #[error("cannot make the run's directory {path}: {source}", path = .path.display())]
    RunDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot resume the run's checkouts: {0}")]
    Isolation(#[from] IsolationError),
}

/// The exit code of a run whose plan was invalid.
pub const EXIT_INVALID_PLAN: u8 = 2;

/// How a run opens: planned now, or resumed with these steps to run again.
enum Opening {
    Plan { goal: String, plan: Option<Plan> },
    Resume { again: Vec<String> },
}

/// Runs a team from `config.start` to its end. The run directory is held
/// (`fsutil::dir_lock`) from before its first record to after its last,
/// so that a reader who finds run.json under way and the directory free
/// knows the run died, and a second `--resume` is refused.
pub async fn run_team(config: TeamConfig, models: TeamModels) -> Result<TeamOutcome, TeamError> {
    let (run_dir, _held, mut record, mut opening) = match config.start {
        Start::Fresh { goal, plan } => {
            let run_id = new_run_id();
            let run_dir = config
                .workspace
                .join(crate::protocol::RESULTS_DIR)
                .join(&run_id);
            let made = crate::fsutil::nofollow::create_new_dir(&run_dir)
                .and_then(|_| DirLock::take(&run_dir).map_err(std::io::Error::other));
            let held = made.map_err(|source| TeamError::RunDir {
                path: run_dir.clone(),
                source,
            })?;
            let mut record =
                fresh_record(&config.workspace, &config.team, &run_id, &goal, &run_dir);
            record.models = config.models.clone();
            (run_dir, held, record, Opening::Plan { goal, plan })
        }
        Start::Resume { run_dir, plan } => {
            let held = resume::hold(&run_dir)?;
            let resumed = resume::load(
                &run_dir,
                plan.as_ref(),
                config.team.accept_unreviewed,
                config.team.isolation,
            )?;
            let (mut record, opening) = match resumed {
                Resumed::Going {
                    record,
                    again,
                    repairs,
                } => {
                    for repair in repairs {
                        crate::tell!("troupe: resume: {repair}");
                    }
                    (record, Opening::Resume { again })
                }
                Resumed::Unplanned { record, plan } => {
                    let goal = record.goal.clone();
                    (record, Opening::Plan { goal, plan })
                }
            };
            record.settings = serde_json::to_value(&config.team).unwrap_or_default();
            record.models = config.models.clone();
            (run_dir, held, record, opening)
        }
    };
    if let Some(trace) = config.span.context() {
        record.trace_id = Some(trace.trace_hex());
    }
    let stop = StopSignal::default();
    let max_file_size = config.agents.limits.max_file_size;
    let guarded: Vec<PathBuf> = config
        .agents
        .sandbox
        .read_only
        .iter()
        .filter_map(|path| path.strip_prefix(&config.workspace).ok())
        .map(Path::to_path_buf)
        .collect();
    let checkouts = Checkouts::new(&config.agents);
    let isolation = match &record.isolation {
        Some(isolation) => {
            let bounds = Bounds {
                stop: stop.clone(),
                max_file_size,
                guarded: guarded.clone(),
                checkouts: checkouts.kind().await,
            };
            let trees = Worktrees::open(
                isolation.clone(),
                &config.workspace,
                &run_dir,
                bounds,
                Snapshot::Earlier,
            );
            Some(trees.await.map(Arc::new)?)
        }
        None => None,
    };
    if let Opening::Resume { again } = &mut opening {
        let trees = isolation.as_deref();
        let workspace = &config.workspace;
        for repair in reconcile::reconcile(&mut record, &run_dir, workspace, trees, again).await {
            crate::tell!("troupe: resume: {repair}");
        }
    }
    let interrupts = Interrupts::new();
    interrupts.watch(stop.clone())?;
    let settings = config.agents;
    let run_id = record.run_id.clone();
    let workspace = config.workspace.clone();
    let wiring = Wiring {
        workspace: config.workspace,
        run_dir: run_dir.clone(),
        record,
        team: config.team,
        prompts: settings.prompts.clone(),
        max_file_size,
        guarded,
        json: config.json,
        stop,
        interrupts,
        isolation,
        checkouts,
        ceiling: Some(ceiling::Ceiling::of(&settings)),
        span: config.span,
    };
    let runner = |agents: Agents| -> Box<dyn AgentRunner> {
        Box::new(ProcessRunner {
            settings,
            run_id,
            workspace,
            workers: agents.workers,
            reviewers: agents.reviewers,
            stop: agents.stop,
            lines: Box::new(agents.lines),
        })
    };
    let exit_code = wiring::run(wiring, models, runner, opening).await?;
    Ok(TeamOutcome { exit_code, run_dir })
}

/// A run from its opening to its end; the exit code.
async fn conduct(
    owner: &mut Owner<'_>,
    planner: &mut Planner,
    interrupts: &Interrupts,
    opening: Opening,
) -> std::io::Result<u8> {
    let ctx = owner.context();
    let held = match opening {
        Opening::Plan { goal, plan } => {
            let event = RunEvent::RunStarted {
                run_id: owner.record().run_id.clone(),
                goal: goal.clone(),
                workspace: ctx.workspace.display().to_string(),
                run_dir: ctx.show(&ctx.run_dir),
            };
            owner.emit(event, |_| {});
            let plan = match plan {
                Some(plan) => plan,
                None => match ctx.stop.race(planner.plan(&goal)).await {
                    Ok(Ok(plan)) => plan,
                    Ok(Err(failure)) => return Ok(no_plan(owner, failure)),
                    Err(_) => return Ok(owner.finish()),
                },
            };
            start(owner, &plan).await?;
            isolate(owner, &plan).await
        }
        Opening::Resume { again } => {
            let event = RunEvent::RunResumed {
                run_id: owner.record().run_id.clone(),
                steps: again,
            };
            owner.emit(event, |_| {});
            let run = owner.record();
            let plan = run.live_plan();
            crate::console::progress(&render_tree(&plan, |id| {
                run.step(id).map(|s| s.status.as_str().to_string())
            }));
            // Killed before its isolation was chosen: chosen now, before
            // any step runs; a run that shares the workspace holds it again.
            match resume::isolation_of(run) {
                None => isolate(owner, &plan).await,
                Some(IsolationMode::Shared) => ctx.hold_workspace(),
                Some(_) => Ok(()),
            }
        }
    };
    if let Err(reason) = held {
        // Cut short by the run's stop, it is the run that stopped.
        if ctx.stop.cause().is_some() {
            return Ok(owner.finish());
        }
        return Ok(isolation_failed(owner, reason.to_string()));
    }
    if let Some(deadline) = ctx.team.deadline {
        let stop = ctx.stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(deadline).await;
            stop.trigger(StopCause::Deadline(deadline));
        });
    }
    tokio::select! {
        () = owner.schedule(planner) => {}
        // A second Ctrl-C: every child is already killed; what was running
        // is recorded as interrupted by `finish`.
        _ = interrupts.killed() => {}
    }
    if let Some(trees) = ctx.isolation.get() {
        trees.finish().await;
    }
    Ok(owner.finish())
}

fn fresh_record(
    workspace: &Path,
    team: &TeamSettings,
    run_id: &str,
    goal: &str,
    run_dir: &Path,
) -> RunRecord {
    RunRecord {
        run_id: run_id.to_string(),
        goal: goal.to_string(),
        status: RunStatus::Planning,
        reason: None,
        workspace: workspace.display().to_string(),
        run_dir: display_in(workspace, run_dir),
        created_at: Utc::now(),
        updated_at: Utc::now(),
        completed_at: None,
        plan_summary: String::new(),
        replans: 0,
        steps: Vec::new(),
        totals: Totals::default(),
        settings: serde_json::to_value(team).unwrap_or_default(),
        isolation: None,
        isolation_mode: None,
        models: Default::default(),
        trace_id: None,
        apply: None,
    }
}

/// Records the plan and prints it.
async fn start(owner: &mut Owner<'_>, plan: &Plan) -> std::io::Result<()> {
    let ctx = owner.context();
    let file = ctx.run_dir.join("plan.json");
    save_json(&file, plan).await?;
    owner.plan_ready(0, plan, &file, |run| {
        run.status = RunStatus::Running;
        run.plan_summary = plan.summary.clone();
        run.steps = plan.steps.iter().map(|s| StepRecord::new(s, 0)).collect();
    });
    Ok(())
}

/// Chooses how the run's workers share the workspace, from `--isolation`
/// and the most steps the plan runs at once, and makes the run's
/// checkouts' repository and branch when they are wanted. `Err` when
/// `--isolation worktree` was asked for and cannot be had; `auto` falls
/// back to sharing, and says why.
async fn isolate(owner: &mut Owner<'_>, plan: &Plan) -> Result<(), WorkspaceError> {
    let ctx = owner.context();
    let widest = levels(plan).iter().map(Vec::len).max().unwrap_or(0);
    let asked = ctx.team.isolation;
    let shared = |note: Option<String>| RunEvent::Isolation {
        mode: IsolationMode::Shared,
        branch: None,
        repository: None,
        note,
    };
    if asked.resolve(widest.min(ctx.team.max_parallel)) == IsolationMode::Shared {
        ctx.hold_workspace()?;
        let note = (asked == IsolationMode::Auto).then(|| "one step runs at a time".to_string());
        owner
            .emit_and_write(shared(note), |run| {
                run.isolation_mode = Some(IsolationMode::Shared)
            })
            .await;
        return Ok(());
    }
    let run_id = owner.record().run_id.clone();
    // Intent, act, record: the isolation is on disk before its branch is
    // made, and the branch before any step runs.
    let opened = async {
        // The sandbox's probe (two confined agents) while git records
        // the workspace: neither needs the other.
        let (checkouts, record) = tokio::join!(
            ctx.checkouts.kind(),
            Worktrees::prepare(&ctx.workspace, &ctx.run_dir, &run_id, &ctx.stop)
        );
        let record = record?;
        let bounds = Bounds {
            stop: ctx.stop.clone(),
            max_file_size: ctx.max_file_size,
            guarded: ctx.guarded.clone(),
            checkouts: checkouts.clone(),
        };
        let event = RunEvent::Isolation {
            mode: IsolationMode::Worktree,
            branch: Some(record.branch.clone()),
            repository: Some(ctx.show(&record.git_dir)),
            note: Some(checkouts.note()),
        };
        let kept = record.clone();
        // Intent: from here the run's result is due in the workspace, and
        // a run killed between its end and the apply's is finished by
        // `--resume`.
        let apply = ctx.team.apply.then(ApplyRecord::default);
        owner
            .emit_and_write(event, |run| {
                run.isolation = Some(kept);
                run.isolation_mode = Some(IsolationMode::Worktree);
                run.apply = apply;
            })
            .await;
        Worktrees::open(
            record,
            &ctx.workspace,
            &ctx.run_dir,
            bounds,
            Snapshot::JustTaken,
        )
        .await
    };
    match opened.await {
        Ok(trees) => {
            let _ = ctx.isolation.set(Arc::new(trees));
            Ok(())
        }
        Err(e)
            if asked == IsolationMode::Auto
                && owner.record().isolation.is_none()
                && ctx.stop.cause().is_none() =>
        {
            ctx.hold_workspace()?;
            owner
                .emit_and_write(shared(Some(format!("no checkouts: {e}"))), |run| {
                    run.isolation_mode = Some(IsolationMode::Shared)
                })
                .await;
            Ok(())
        }
        Err(e) => Err(WorkspaceError::NoCheckouts(e)),
    }
}

/// The run cannot have the isolation it needs: it ends failed.
fn isolation_failed(owner: &mut Owner<'_>, reason: String) -> u8 {
    owner.emit(
        RunEvent::IsolationFailed {
            reason: reason.clone(),
        },
        |run| {
            run.reason = Some(reason);
        },
    );
    owner.close(RunStatus::Failed, EXIT_FAILED)
}

/// The Planner gave no valid first plan: a model that could not be asked
/// ends the run as failed (exit 1), an answer that is not a plan is saved
/// and ends it as an invalid plan (exit 2); either way with its totals
/// and `run_finished`.
fn no_plan(owner: &mut Owner<'_>, failure: PlanFailure) -> u8 {
    let exit_code = match failure {
        PlanFailure::NoAnswer(_) => EXIT_FAILED,
        PlanFailure::Invalid { .. } => EXIT_INVALID_PLAN,
    };
    let said = failure.to_string();
    owner.plan_failed(0, failure, |run| run.reason = Some(said));
    owner.close(RunStatus::Failed, exit_code)
}

/// `value` as pretty JSON, written atomically on a blocking thread so
/// that the agents' thread goes on meanwhile.
async fn save_json<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value)?;
    bytes.push(b'\n');
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        crate::fsutil::write_atomic(&path, &bytes, crate::fsutil::Durability::Commit)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
    })
    .await
    .map_err(std::io::Error::other)?
}

/// `run_<UTC time>_<4 hex digits>`: sortable, and distinct for runs started
/// in the same second.
fn new_run_id() -> String {
    let now = Utc::now();
    let noise = (now.timestamp_subsec_nanos() ^ std::process::id().rotate_left(16)) & 0xffff;
    format!("run_{}_{noise:04x}", now.format("%Y%m%dT%H%M%SZ"))
}
