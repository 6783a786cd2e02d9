//! The review of one attempt: a Reviewer child given the step, the
//! worker's report and the parent's check of its claims. A verdict from it
//! is final; a review that fails as a system (the reviewer crashed, timed
//! out, gave no verdict, or troupe could not start it) is tried once more
//! (`review-N-2`); the run's stop or its spent budget ends it without one.

use super::briefs::Review;
use super::briefs::{DiffHead, review_brief};
use super::step::{ReviewEnd, ReviewOutcome, StartError, Step, StepEvent};
use crate::protocol::{AgentRole, AgentStatus};
use crate::record::AgentRecord;

impl Step<'_> {
    /// The review of an attempt.
    pub(super) async fn review(&self, review: Review<'_>) -> ReviewEnd {
        let ctx = self.ctx();
        let attempt = review.attempt;
        let diff = review
            .change
            .and_then(|c| c.diff.as_deref())
            .map(|d| ctx.workspace.join(d));
        let diff = match diff {
            Some(path) => DiffHead::read(path).await,
            None => None,
        };
        let brief = review_brief(
            &ctx.prompts,
            &ctx.goal,
            self.record(),
            &review,
            diff.as_ref(),
        );
        let mut last_failure = String::new();
        for try_number in 1..=2u32 {
            let name = if try_number == 1 {
                format!("review-{attempt}")
            } else {
                format!("review-{attempt}-{try_number}")
            };
            let dir = self.dir(&name);
            let ran = self
                .agent(
                    attempt,
                    AgentRole::Reviewer,
                    try_number,
                    dir.clone(),
                    brief.clone(),
                    review.checkout.clone(),
                )
                .await;
            let (record, outcome) = match ran {
                Ok(record) => {
                    let outcome = judge(&record);
                    (record, outcome)
                }
                Err(e @ (StartError::Stopped(_) | StartError::Budget(_))) => {
                    return ReviewEnd::Stopped(e.to_string());
                }
                Err(e) => {
                    let record = AgentRecord::not_run(ctx.show(&dir), &e);
                    let why = format!("the reviewer could not run: {e}");
                    (record, ReviewOutcome::Failed(why))
                }
            };
            self.send(StepEvent::ReviewFinished {
                attempt,
                review: try_number,
                record,
                outcome: outcome.clone(),
            });
            match outcome {
                ReviewOutcome::Approved(_) => return ReviewEnd::Approved,
                ReviewOutcome::Rejected(verdict) => return ReviewEnd::Rejected(verdict),
                ReviewOutcome::Stopped(reason) => return ReviewEnd::Stopped(reason),
                ReviewOutcome::Failed(reason) => last_failure = reason,
            }
        }
        ReviewEnd::Failed(last_failure)
    }
}

/// What a reviewer's end means for the step.
fn judge(record: &AgentRecord) -> ReviewOutcome {
    match (&record.verdict, record.status) {
        (Some(verdict), AgentStatus::Completed) if verdict.approved => {
            ReviewOutcome::Approved(verdict.clone())
        }
        (Some(verdict), AgentStatus::Completed) => ReviewOutcome::Rejected(verdict.clone()),
        (_, status) => {
            let why = match &record.error {
                Some(error) => format!("the reviewer ended {status}: {error}"),
                None => format!("the reviewer ended {status} without a verdict"),
            };
            if status == AgentStatus::Terminated {
                ReviewOutcome::Stopped(why)
            } else {
                ReviewOutcome::Failed(why)
            }
        }
    }
}
