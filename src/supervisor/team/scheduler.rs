//! The eager scheduler: a step starts the moment all its dependencies are
//! done and one of `--max-parallel` slots is free. There is no batch
//! barrier; a slow step holds up only what depends on it.
//!
//! A failed step skips its transitive dependents and independent steps go
//! on. When under half the steps have completed, the Planner is asked to
//! plan the rest instead (at most `--max-replans` times): new steps stop
//! starting, the running ones finish, and the steps that did not complete
//! are replaced by the new plan.

use std::collections::HashSet;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use super::context::RunContext;
use super::events::RunEvent;
use super::planner::Planner;
use super::record::{RunRecord, StepRecord, StepStatus};
use super::step::{StepEnd, run_step};

pub async fn schedule(ctx: &RunContext, planner: &mut Planner) {
    let mut running = FuturesUnordered::new();
    let mut replan_due: Option<String> = None;
    let mut limit_noted = false;
    let mut stop_noted = false;
    loop {
        while running.len() < ctx.team.max_parallel
            && replan_due.is_none()
            && ctx.stop.reason().is_none()
        {
            if let Some(reason) = ctx.budget.exhausted() {
                if !limit_noted {
                    limit_noted = true;
                    let event = RunEvent::LimitReached {
                        limit: "budget".to_string(),
                        reason: reason.clone(),
                    };
                    ctx.recorder.emit(event, |run| run.reason = Some(reason));
                }
                break;
            }
            let Some(id) = next_ready(ctx) else { break };
            ctx.recorder.update(|run| {
                if let Some(step) = run.step_mut(&id) {
                    step.status = StepStatus::Running;
                    step.started_at = Some(chrono::Utc::now());
                }
            });
            running.push(run_step(ctx, id));
        }
        if running.is_empty() {
            match replan_due.take() {
                Some(reason) if ctx.stop.reason().is_none() => {
                    replan(ctx, planner, reason).await;
                    continue;
                }
                _ => break,
            }
        }
        tokio::select! {
            Some((id, end)) = running.next() => {
                let failed = !matches!(end, StepEnd::Completed | StepEnd::Unreviewed { accepted: true, .. });
                finish(ctx, &id, end);
                if failed && replan_due.is_none() {
                    match replan_reason(ctx) {
                        Some(reason) => replan_due = Some(reason),
                        None => skip_dependents(ctx, &id),
                    }
                }
            }
            reason = ctx.stop.stopped(), if !stop_noted => {
                stop_noted = true;
                let event = if ctx.interrupts.interrupted() {
                    RunEvent::Interrupted { reason: reason.clone() }
                } else {
                    RunEvent::LimitReached { limit: "deadline".to_string(), reason: reason.clone() }
                };
                ctx.recorder.emit(event, |run| run.reason = Some(reason));
            }
        }
    }
    skip_leftovers(ctx);
}

/// The first pending step, in plan order, whose dependencies are all done.
fn next_ready(ctx: &RunContext) -> Option<String> {
    let accept = ctx.team.accept_unreviewed;
    ctx.recorder
        .with(|run| {
            run.steps
                .iter()
                .find(|step| {
                    step.status == StepStatus::Pending
                        && step
                            .dependencies
                            .iter()
                            .all(|dep| run.step(dep).is_some_and(|d| is_done(d, accept)))
                })
                .map(|step| step.id.clone())
        })
        .flatten()
}

/// Completed, or accepted without a review.
fn is_done(step: &StepRecord, accept_unreviewed: bool) -> bool {
    step.status == StepStatus::Completed
        || (accept_unreviewed && step.status == StepStatus::Unreviewed)
}

fn finish(ctx: &RunContext, id: &str, end: StepEnd) {
    let (seconds, attempts) = ctx
        .recorder
        .with(|run| {
            run.step(id).map(|step| {
                let seconds = step
                    .started_at
                    .map(|at| (chrono::Utc::now() - at).num_milliseconds() as f64 / 1000.0)
                    .unwrap_or(0.0);
                (seconds, step.attempts.len() as u32)
            })
        })
        .flatten()
        .unwrap_or((0.0, 0));
    let step = id.to_string();
    let (event, status, reason) = match end {
        StepEnd::Completed => (
            RunEvent::StepCompleted {
                step,
                attempts,
                seconds,
            },
            StepStatus::Completed,
            None,
        ),
        // A step cut short by Ctrl-C is not a failure of the step:
        // `--resume` runs it again.
        StepEnd::Failed(reason) if ctx.interrupts.interrupted() => (
            RunEvent::StepInterrupted {
                step,
                attempts,
                reason: reason.clone(),
                seconds,
            },
            StepStatus::Interrupted,
            Some(reason),
        ),
        StepEnd::Failed(reason) => (
            RunEvent::StepFailed {
                step,
                attempts,
                reason: reason.clone(),
                seconds,
            },
            StepStatus::Failed,
            Some(reason),
        ),
        StepEnd::Unreviewed { accepted, reason } => (
            RunEvent::StepUnreviewed {
                step,
                accepted,
                reason: reason.clone(),
                seconds,
            },
            StepStatus::Unreviewed,
            Some(reason),
        ),
    };
    ctx.recorder.emit(event, |run| {
        if let Some(step) = run.step_mut(id) {
            step.status = status;
            step.reason = reason;
            step.completed_at = Some(chrono::Utc::now());
            step.duration_seconds = Some(seconds);
        }
    });
}

/// Why the rest should be replanned now, if it should: a failure while
/// under half the steps have completed, with replans left.
fn replan_reason(ctx: &RunContext) -> Option<String> {
    let accept = ctx.team.accept_unreviewed;
    ctx.recorder
        .with(|run| {
            if run.replans >= ctx.team.max_replans {
                return None;
            }
            let active: Vec<&StepRecord> = run
                .steps
                .iter()
                .filter(|s| s.status != StepStatus::Replaced)
                .collect();
            let done = active.iter().filter(|s| is_done(s, accept)).count();
            (done * 2 < active.len())
                .then(|| format!("only {done} of {} steps completed", active.len()))
        })
        .flatten()
}

async fn replan(ctx: &RunContext, planner: &mut Planner, reason: String) {
    let accept = ctx.team.accept_unreviewed;
    let Some((round, failed, completed, taken, done)) = ctx.recorder.with(|run| {
        let round = run.replans + 1;
        let failed = describe_failures(run);
        let completed = describe_completed(run, accept);
        let taken: HashSet<String> = run.steps.iter().map(|s| s.id.clone()).collect();
        let done: HashSet<String> = run
            .steps
            .iter()
            .filter(|s| is_done(s, accept))
            .map(|s| s.id.clone())
            .collect();
        (round, failed, completed, taken, done)
    }) else {
        return;
    };
    let event = RunEvent::Replanning { round, reason };
    ctx.recorder.emit(event, |run| run.replans = round);
    match planner.replan(&failed, &completed, &taken, &done).await {
        Ok(plan) => {
            let file = ctx.run_dir.join(format!("replan-{round}.json"));
            if let Err(e) = crate::fsutil::write_json_atomic(&file, &plan) {
                eprintln!("troupe: cannot save {}: {e}", file.display());
            }
            let replaced: Vec<String> = ctx
                .recorder
                .with(|run| {
                    run.steps
                        .iter()
                        .filter(|s| s.status != StepStatus::Replaced && !is_done(s, accept))
                        .map(|s| s.id.clone())
                        .collect()
                })
                .unwrap_or_default();
            let event = RunEvent::StepsReplaced {
                round,
                steps: replaced.clone(),
            };
            ctx.recorder.emit(event, |run| {
                for step in run.steps.iter_mut().filter(|s| replaced.contains(&s.id)) {
                    step.status = StepStatus::Replaced;
                    step.reason = Some(format!("replaced by replan {round}"));
                }
                run.steps
                    .extend(plan.steps.iter().map(|s| StepRecord::new(s, round)));
            });
            let levels = crate::supervisor::plan::levels(&plan).len();
            let event = RunEvent::PlanReady {
                round,
                summary: plan.summary.clone(),
                steps: plan.steps.len(),
                levels,
                file: ctx.show(&file),
            };
            ctx.recorder.emit(event, |_| {});
            eprint!("{}", crate::supervisor::plan::render_tree(&plan, |_| None));
        }
        Err(failure) => {
            let saved = ctx
                .run_dir
                .join("planner")
                .join(format!("invalid-replan-{round}.txt"));
            let _ = std::fs::create_dir_all(ctx.run_dir.join("planner"));
            let _ = std::fs::write(&saved, &failure.answer);
            let event = RunEvent::PlanInvalid {
                round,
                reason: failure.reason,
                saved: ctx.show(&saved),
            };
            ctx.recorder.emit(event, |_| {});
            let failed: Vec<String> = ctx
                .recorder
                .with(|run| {
                    run.steps
                        .iter()
                        .filter(|s| matches!(s.status, StepStatus::Failed | StepStatus::Unreviewed))
                        .map(|s| s.id.clone())
                        .collect()
                })
                .unwrap_or_default();
            for id in failed {
                skip_dependents(ctx, &id);
            }
        }
    }
}

fn describe_failures(run: &RunRecord) -> String {
    let lines: Vec<String> = run
        .steps
        .iter()
        .filter(|s| matches!(s.status, StepStatus::Failed | StepStatus::Unreviewed))
        .map(|s| {
            format!(
                "{} ({}) failed: {}",
                s.id,
                s.description.trim(),
                s.reason.as_deref().unwrap_or("")
            )
        })
        .collect();
    lines.join("; ")
}

fn describe_completed(run: &RunRecord, accept: bool) -> String {
    let lines: Vec<String> = run
        .steps
        .iter()
        .filter(|s| is_done(s, accept))
        .map(|s| {
            let mut line = format!("- {} ({})", s.id, s.description.trim());
            if let Some(report) = s.delivered() {
                line.push_str(&format!(": {}", report.summary.trim()));
                if !report.deliverables_files.is_empty() {
                    line.push_str(&format!(
                        " [files: {}]",
                        report.deliverables_files.join(", ")
                    ));
                }
            }
            line
        })
        .collect();
    if lines.is_empty() {
        "(none)".to_string()
    } else {
        lines.join("\n")
    }
}

/// Marks every pending step that depends on `failed`, directly or not, as
/// skipped.
fn skip_dependents(ctx: &RunContext, failed: &str) {
    let skipped: Vec<(String, String)> = ctx
        .recorder
        .with(|run| {
            let mut blocked: HashSet<String> = [failed.to_string()].into();
            let mut out = Vec::new();
            let mut grew = true;
            while grew {
                grew = false;
                for step in run.steps.iter().filter(|s| s.status == StepStatus::Pending) {
                    if blocked.contains(&step.id) {
                        continue;
                    }
                    if let Some(dep) = step.dependencies.iter().find(|d| blocked.contains(*d)) {
                        blocked.insert(step.id.clone());
                        out.push((
                            step.id.clone(),
                            format!("it depends on {dep}, which did not complete"),
                        ));
                        grew = true;
                    }
                }
            }
            out
        })
        .unwrap_or_default();
    for (id, reason) in skipped {
        skip(ctx, &id, reason);
    }
}

/// Whatever is still pending when nothing more can start; after Ctrl-C
/// they stay pending, for `--resume`.
fn skip_leftovers(ctx: &RunContext) {
    if ctx.interrupts.interrupted() {
        return;
    }
    let pending: Vec<String> = ctx
        .recorder
        .with(|run| {
            run.steps
                .iter()
                .filter(|s| s.status == StepStatus::Pending)
                .map(|s| s.id.clone())
                .collect()
        })
        .unwrap_or_default();
    let why = ctx
        .stop
        .reason()
        .or_else(|| ctx.budget.exhausted())
        .unwrap_or_else(|| "its dependencies did not complete".to_string());
    for id in pending {
        skip(ctx, &id, why.clone());
    }
}

fn skip(ctx: &RunContext, id: &str, reason: String) {
    let event = RunEvent::StepSkipped {
        step: id.to_string(),
        reason: reason.clone(),
    };
    ctx.recorder.emit(event, |run| {
        if let Some(step) = run.step_mut(id) {
            step.status = StepStatus::Skipped;
            step.reason = Some(reason);
        }
    });
}
