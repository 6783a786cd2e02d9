//! The review of one attempt: a Reviewer child given the step, the
//! worker's report and the parent's check of its claims. A verdict from it
//! is final; a review that fails as a system is tried once more
//! (`review-N-2`), and a stop or an exhausted budget ends it without one.

use super::briefs::review_brief;
use super::claims::Claims;
use super::context::RunContext;
use super::events::RunEvent;
use super::record::AgentRecord;
use super::step::{agent_record, start};
use crate::protocol::{AgentRole, AgentStatus, VerdictReport};

/// How a review ended.
pub(super) enum Review {
    Approved,
    Rejected(VerdictReport),
    /// Both tries failed as a system.
    Failed(String),
    /// The run stopped, or its budget ran out, before a verdict.
    Stopped(String),
}

pub(super) async fn review(
    ctx: &RunContext,
    id: &str,
    attempt: u32,
    worker: &AgentRecord,
    claims: &Claims,
) -> Review {
    let brief = ctx
        .recorder
        .with(|run| {
            run.step(id).map(|step| {
                review_brief(
                    ctx.agents.prompts_dir.as_deref(),
                    &ctx.goal,
                    step,
                    attempt,
                    worker,
                    claims,
                )
            })
        })
        .flatten();
    let brief = match brief {
        Some(Ok(brief)) => brief,
        Some(Err(e)) => return Review::Failed(format!("cannot write the reviewer's brief: {e}")),
        None => return Review::Failed(format!("the step {id} is not in the run")),
    };
    let mut last_failure = String::new();
    for review in 1..=2u32 {
        let name = if review == 1 {
            format!("review-{attempt}")
        } else {
            format!("review-{attempt}-{review}")
        };
        let dir = ctx.run_dir.join(id).join(name);
        let event = RunEvent::ReviewStarted {
            step: id.to_string(),
            attempt,
            review,
            dir: ctx.show(&dir),
        };
        let run = match start(
            ctx,
            id,
            attempt,
            AgentRole::Reviewer,
            dir,
            brief.clone(),
            event,
        )
        .await
        {
            Ok(run) => run,
            Err(reason) => return Review::Stopped(reason),
        };
        let record = agent_record(&run);
        let seconds = record.stats.runtime_seconds;
        let outcome = &run.outcome;
        let (event, verdict) = match (&outcome.verdict, outcome.status) {
            (Some(verdict), AgentStatus::Completed) if verdict.approved => (
                RunEvent::ReviewApproved {
                    step: id.to_string(),
                    attempt,
                    summary: verdict.summary.clone(),
                    seconds,
                },
                Some(Review::Approved),
            ),
            (Some(verdict), AgentStatus::Completed) => (
                RunEvent::ReviewRejected {
                    step: id.to_string(),
                    attempt,
                    summary: verdict.summary.clone(),
                    issues: verdict.issues.clone(),
                    suggestions: verdict.suggestions.clone(),
                    retry: verdict.retry,
                    seconds,
                },
                Some(Review::Rejected(verdict.clone())),
            ),
            _ => {
                last_failure = match &outcome.error {
                    Some(error) => format!("the reviewer ended {}: {error}", outcome.status),
                    None => format!("the reviewer ended {} without a verdict", outcome.status),
                };
                let event = RunEvent::ReviewFailed {
                    step: id.to_string(),
                    attempt,
                    review,
                    reason: last_failure.clone(),
                    seconds,
                };
                let stopped = outcome.status == AgentStatus::Terminated;
                (
                    event,
                    stopped.then(|| Review::Stopped(last_failure.clone())),
                )
            }
        };
        ctx.recorder.emit(event, |run| {
            run.totals.note_sandbox(record.stats.sandbox.as_ref());
            if let Some(step) = run.step_mut(id) {
                step.stats.add(&record.stats);
                if let Some(last) = step.attempt_mut(attempt).reviews.last_mut() {
                    *last = record;
                }
            }
        });
        if let Some(verdict) = verdict {
            return verdict;
        }
    }
    Review::Failed(last_failure)
}
