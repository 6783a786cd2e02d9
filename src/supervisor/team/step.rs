//! One step, from its first worker to its end: worker, the parent's check
//! of the worker's claims, reviewer, and back to the worker with the
//! reviewer's feedback until approved, out of retries, or told to stop.
//!
//! The verdict rules (SPEC section 5): only a verdict with `approved: true`
//! approves; `retry: false` stops at once; a review that fails as a system
//! (model error, crash, timeout, no verdict) is not a rejection: it is
//! tried once more, then the step is `unreviewed`.

use std::path::PathBuf;

use super::briefs::{Delivered, worker_brief};
use super::claims::{self, Claims};
use super::context::RunContext;
use super::events::RunEvent;
use super::record::{AgentRecord, StepStatus};
use super::review::{Review, review};
use crate::protocol::{AgentId, AgentRole, AgentStatus, TaskFile, VerdictReport};
use crate::supervisor::launcher::LaunchVars;
use crate::supervisor::{AgentRun, SpawnConfig, spawn_agent};
use crate::text::excerpt;

/// How a step ended.
pub enum StepEnd {
    Completed,
    Failed(String),
    Unreviewed { accepted: bool, reason: String },
}

pub async fn run_step(ctx: &RunContext, id: String) -> (String, StepEnd) {
    let end = drive(ctx, &id).await;
    (id, end)
}

async fn drive(ctx: &RunContext, id: &str) -> StepEnd {
    // A resumed step keeps its earlier attempts: new ones are numbered after
    // them, and the last rejection is the first feedback.
    let (before, mut feedback) = ctx
        .recorder
        .with(|run| {
            run.step(id).map(|step| {
                let last_verdict = step
                    .attempts
                    .last()
                    .and_then(|a| a.reviews.last())
                    .and_then(|r| r.verdict.clone())
                    .filter(|v| !v.approved);
                (step.attempts.len() as u32, last_verdict)
            })
        })
        .flatten()
        .unwrap_or((0, None));
    let first = before + 1;
    let last = first + ctx.team.max_retries;
    for attempt in first..=last {
        if attempt > first {
            let event = RunEvent::StepRetry {
                step: id.to_string(),
                attempt,
            };
            ctx.recorder
                .emit(event, |run| set_status(run, id, StepStatus::Running));
        }
        let worker = match run_worker(ctx, id, attempt, feedback.as_ref()).await {
            Ok(worker) => worker,
            Err(reason) => return StepEnd::Failed(reason),
        };
        if worker.status != AgentStatus::Completed {
            let why = worker.error.as_deref().unwrap_or(&worker.summary);
            return StepEnd::Failed(format!(
                "its worker (attempt {attempt}) ended {}: {}",
                worker.status,
                excerpt(why, 300)
            ));
        }
        let claims = check_claims(ctx, id, attempt, &worker);
        match review(ctx, id, attempt, &worker, &claims).await {
            Review::Approved => return StepEnd::Completed,
            Review::Rejected(verdict) => {
                let issue = verdict.issues.first().unwrap_or(&verdict.summary).clone();
                if !verdict.retry {
                    return StepEnd::Failed(format!(
                        "the reviewer rejected attempt {attempt} and advised against another: {issue}"
                    ));
                }
                if attempt == last {
                    return StepEnd::Failed(format!(
                        "rejected {} times (--max-retries {}); last issue: {issue}",
                        attempt - before,
                        ctx.team.max_retries
                    ));
                }
                feedback = Some(verdict);
            }
            Review::Failed(reason) => {
                return StepEnd::Unreviewed {
                    accepted: ctx.team.accept_unreviewed,
                    reason,
                };
            }
            Review::Stopped(reason) => return StepEnd::Failed(reason),
        }
    }
    StepEnd::Failed("no attempt was made".to_string())
}

async fn run_worker(
    ctx: &RunContext,
    id: &str,
    attempt: u32,
    feedback: Option<&VerdictReport>,
) -> Result<AgentRecord, String> {
    let brief = ctx
        .recorder
        .with(|run| {
            let step = run.step(id)?;
            let deps: Vec<Delivered<'_>> = step
                .dependencies
                .iter()
                .filter_map(|dep| run.step(dep))
                .map(|dep| Delivered {
                    step: dep,
                    report: dep.delivered(),
                })
                .collect();
            Some(worker_brief(
                ctx.agents.prompts_dir.as_deref(),
                &ctx.goal,
                step,
                &deps,
                feedback,
            ))
        })
        .flatten()
        .ok_or_else(|| format!("the step {id} is not in the run"))?
        .map_err(|e| format!("cannot write the worker's brief: {e}"))?;
    let dir = ctx.run_dir.join(id).join(format!("worker-{attempt}"));
    let event = RunEvent::StepStarted {
        step: id.to_string(),
        attempt,
        dir: ctx.show(&dir),
    };
    let run = start(ctx, id, attempt, AgentRole::Worker, dir, brief, event).await?;
    let record = agent_record(&run);
    let event = RunEvent::WorkerFinished {
        step: id.to_string(),
        attempt,
        status: record.status,
        summary: record.summary.clone(),
        error: record.error.clone(),
        seconds: record.stats.runtime_seconds,
    };
    let kept = record.clone();
    ctx.recorder.emit(event, |run| {
        run.totals.note_sandbox(kept.stats.sandbox.as_ref());
        if let Some(step) = run.step_mut(id) {
            step.stats.add(&kept.stats);
            step.attempt_mut(attempt).worker = Some(kept);
        }
    });
    Ok(record)
}

fn check_claims(ctx: &RunContext, id: &str, attempt: u32, worker: &AgentRecord) -> Claims {
    let claims = claims::check(&ctx.workspace, worker);
    let event = RunEvent::ClaimsChecked {
        step: id.to_string(),
        attempt,
        listed: claims.listed.len(),
        missing: claims.missing.clone(),
        changing_calls: claims.changing_calls,
        suspicious: claims.suspicious,
    };
    let kept = claims.clone();
    ctx.recorder.emit(event, |run| {
        if let Some(step) = run.step_mut(id) {
            step.status = StepStatus::Reviewing;
            step.attempt_mut(attempt).claims = Some(kept);
        }
    });
    claims
}

/// Starts one agent of the step, once the budget and the stop allow it.
pub(super) async fn start(
    ctx: &RunContext,
    id: &str,
    attempt: u32,
    role: AgentRole,
    dir: PathBuf,
    brief: String,
    started: RunEvent,
) -> Result<AgentRun, String> {
    if let Some(reason) = ctx.stop.reason() {
        return Err(format!("stopped before it could start: {reason}"));
    }
    ctx.budget.admit()?;
    let summary = ctx
        .recorder
        .with(|run| run.step(id).map(|s| excerpt(&s.description, 80)))
        .flatten()
        .unwrap_or_default();
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut task = TaskFile::new(
        AgentId::new(format!("{id}/{name}")),
        role,
        summary,
        brief,
        ctx.workspace.clone(),
        dir,
    );
    task.step = Some(id.to_string());
    task.attempt = attempt;
    task.timeout_seconds = ctx.agents.serve.timeout.as_secs();
    task.prompts_dir = ctx.agents.prompts_dir.clone();
    task.limits = ctx.agents.limits.clone();
    task.sandbox = ctx.agents.sandbox.clone();
    let agents = ctx.budget.agents();
    let running = AgentRecord::running(ctx.show(&task.agent_dir));
    ctx.recorder.emit(started, |run| {
        run.totals.agents = agents;
        if let Some(step) = run.step_mut(id) {
            let slot = step.attempt_mut(attempt);
            match role {
                AgentRole::Reviewer => slot.reviews.push(running),
                AgentRole::Worker | AgentRole::Planner => slot.worker = Some(running),
            }
        }
    });
    let launch = ctx.agents.launcher.clone().map(|launcher| {
        let vars = LaunchVars {
            run_id: ctx
                .recorder
                .with(|run| run.run_id.clone())
                .unwrap_or_default(),
            step_id: id.to_string(),
            agent_id: task.agent_id.to_string(),
            role: role.as_str().to_string(),
            attempt,
        };
        (launcher, vars)
    });
    let config = SpawnConfig {
        task,
        agent_program: ctx.agents.program.clone(),
        limits: ctx.agents.serve.clone(),
        hygiene: ctx.agents.hygiene.clone(),
        stop: ctx.stop.clone(),
        launch,
    };
    spawn_agent(config, ctx.model.clone(), &ctx.lines)
        .await
        .map_err(|e| format!("cannot run the agent: {e}"))
}

pub(super) fn agent_record(run: &AgentRun) -> AgentRecord {
    let result = &run.result;
    AgentRecord {
        dir: result.deliverables_dir.clone(),
        status: result.status,
        summary: match &run.outcome.verdict {
            Some(verdict) => verdict.summary.clone(),
            None => result.result_summary.clone(),
        },
        deliverables_files: result.deliverables_files.clone(),
        verdict: run.outcome.verdict.clone(),
        error: result.error.clone(),
        stats: result.stats.clone(),
        changing_calls: run.outcome.changing_calls,
        timings: run.outcome.timings,
        success_claimed: run.outcome.finish.as_ref().is_some_and(|f| f.success),
    }
}

fn set_status(run: &mut super::record::RunRecord, id: &str, status: StepStatus) {
    if let Some(step) = run.step_mut(id) {
        step.status = status;
    }
}
