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
use super::record::{StepRecord, StepStatus};
use super::replan::{replan, replan_reason};
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
pub(super) fn is_done(step: &StepRecord, accept_unreviewed: bool) -> bool {
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

/// Marks every pending step that depends on `failed`, directly or not, as
/// skipped.
pub(super) fn skip_dependents(ctx: &RunContext, failed: &str) {
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
