//! One step, from its first worker to its end: worker, the parent's check
//! of the worker's claims, reviewer, and back to the worker with the
//! reviewer's feedback until approved, out of retries, or told to stop.
//!
//! A step runs as a task of its own that reads nothing of the run's
//! record: the owner hands it what it needs (`StepStart`), and it tells the
//! owner what happens (`StepEvent`) and how it ended (`StepEnd`). The
//! verdict rules: only a verdict with `approved: true`
//! approves; `retry: false` stops at once; a review that fails as a system
//! is tried once more, then the step is `unreviewed`.

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use tokio::sync::mpsc;

use super::briefs::{Delivered, Review, worker_brief};
use super::claims::{self, Claimed};
use super::context::RunContext;
use super::events::{SentBack, SentBackBy};
use super::runner::AgentRequest;
use crate::protocol::{AgentRole, AgentStatus, VerdictReport};
use crate::record::{AgentRecord, StepRecord};
use crate::record::{ChangeRecord, Claims};
use crate::run::isolation::{AttemptSpace, Carried, CheckoutView, IsolationError, Landing};
use crate::signal::{Exhausted, StopCause};
use crate::supervisor::SpawnError;
use crate::telemetry::Span;
use crate::text::excerpt;

/// What a step starts from, handed over by the run's owner.
#[derive(Debug, Clone)]
pub struct StepStart {
    pub step: StepRecord,
    /// Its direct dependencies, each with what it delivered.
    pub dependencies: Vec<(StepRecord, Option<AgentRecord>)>,
    /// The number of its first attempt: after a resume, one past the
    /// earlier ones, or that of the one a stop cut short.
    pub first_attempt: u32,
    /// The last rejection before a resume, the first attempt's feedback.
    pub feedback: Option<VerdictReport>,
}

/// What a step tells the run's owner as it goes, in order.
#[derive(Debug, Clone)]
pub enum StepEvent {
    /// An agent of the step started in `dir`: the worker of `attempt`, or
    /// its `review`-th reviewer.
    AgentStarted {
        attempt: u32,
        role: AgentRole,
        review: u32,
        dir: PathBuf,
    },
    WorkerFinished {
        attempt: u32,
        worker: AgentRecord,
    },
    ClaimsChecked {
        attempt: u32,
        claims: Claims,
    },
    /// With isolation: what the attempt changed in its checkout.
    Changed {
        attempt: u32,
        change: ChangeRecord,
    },
    /// The approved change is on the integration branch, whose head is now
    /// `head`.
    Landed {
        attempt: u32,
        head: String,
    },
    /// The approved change conflicts with what landed meanwhile.
    Conflicted {
        attempt: u32,
        paths: Vec<String>,
    },
    /// troupe does not land the approved change (see `ChangeRecord::refused`).
    Refused {
        attempt: u32,
        reasons: Vec<String>,
    },
    ReviewFinished {
        attempt: u32,
        review: u32,
        record: AgentRecord,
        outcome: ReviewOutcome,
    },
    /// The worker's result does not match the step's output_schema: the
    /// attempt goes back to it without a review.
    ResultInvalid {
        attempt: u32,
        errors: Vec<String>,
    },
    /// The worker goes again with the feedback of whoever sent the last
    /// attempt back.
    Retrying {
        attempt: u32,
        by: SentBackBy,
    },
}

/// How one reviewer ended, for the owner's record.
#[derive(Debug, Clone)]
pub enum ReviewOutcome {
    Approved(VerdictReport),
    Rejected(VerdictReport),
    /// The review failed as a system, for this reason.
    Failed(String),
    /// The run stopped the reviewer (its deadline, Ctrl-C).
    Stopped(String),
}

/// How an attempt ended: the step's end, or a rejection (a reviewer's,
/// the schema check's, or a landing's) for the next attempt to answer.
enum Tried {
    Done(StepEnd),
    Again(SentBack),
}

impl Tried {
    fn again(verdict: VerdictReport, by: SentBackBy) -> Tried {
        Tried::Again(SentBack { verdict, by })
    }
}

/// How the review of an attempt ended.
pub(super) enum ReviewEnd {
    Approved,
    Rejected(VerdictReport),
    /// Both tries failed as a system; the last reason.
    Failed(String),
    /// The run stopped, or its budget ran out, before a verdict.
    Stopped(String),
}

/// The rejection of an attempt whose result does not match the step's
/// output_schema.
fn invalid_result(attempt: u32, errors: Vec<String>) -> VerdictReport {
    VerdictReport {
        approved: false,
        summary: format!(
            "The result that attempt {attempt} gave finish_task does not match the step's output_schema."
        ),
        issues: errors,
        suggestions: vec![
            "Call finish_task again with a `result` of the shape its schema gives; the work itself may stand.".to_string(),
        ],
        retry: true,
    }
}

/// Where a step sends its events: its id with each.
pub type StepEvents = mpsc::UnboundedSender<(String, StepEvent)>;

/// How a step ended.
#[derive(Debug)]
pub enum StepEnd {
    Completed,
    Failed(StepFailure),
    Unreviewed { accepted: bool, reason: String },
}

/// Why a step failed.
#[derive(Debug, thiserror::Error)]
pub enum StepFailure {
    #[error("its worker (attempt {attempt}) ended {status}: {why}")]
    WorkerEnded {
        attempt: u32,
        status: AgentStatus,
        why: String,
    },
    #[error("the reviewer rejected attempt {attempt} and advised against another: {issue}")]
    NoRetry { attempt: u32, issue: String },
    #[error("rejected {} (--max-retries {max}); last issue: {issue}", match times { 1 => "once".to_string(), n => format!("{n} times") })]
    OutOfRetries { times: u32, max: u32, issue: String },
    /// An agent of the step could not start.
    #[error(transparent)]
    NotStarted(#[from] StartError),
    /// The run stopped the review.
    #[error("{0}")]
    ReviewStopped(String),
    /// The attempt's checkout could not be made, read or merged.
    #[error("its checkout (attempt {attempt}): {error}")]
    Isolation {
        attempt: u32,
        #[source]
        error: IsolationError,
    },
}

/// Why an agent did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The run is stopping (its deadline, Ctrl-C).
    #[error("stopped before it could start: {0}")]
    Stopped(StopCause),
    /// The run's budget (`--max-agents`, `--max-tokens`) is spent.
    #[error("{0}")]
    Budget(Exhausted),
    /// Troupe could not run it: a failure of the system.
    #[error("cannot run the agent: {0}")]
    Spawn(#[from] SpawnError),
}

/// One step, to its end.
pub async fn run_step(ctx: &RunContext, start: StepStart, events: StepEvents) -> (String, StepEnd) {
    let id = start.step.id.clone();
    let span = ctx.span.child("troupe.step");
    span.set("troupe.step.id", id.clone());
    span.set("troupe.step.type", start.step.kind.clone());
    let step = Step {
        ctx,
        start,
        events,
        span,
        attempt_span: Mutex::new(Span::default()),
    };
    let end = step.drive().await;
    let (outcome, why) = match &end {
        StepEnd::Completed => ("completed", None),
        StepEnd::Failed(failure) => ("failed", Some(failure.to_string())),
        StepEnd::Unreviewed { accepted: true, .. } => ("accepted_unreviewed", None),
        StepEnd::Unreviewed { reason, .. } => ("unreviewed", Some(reason.clone())),
    };
    step.span.set("troupe.step.outcome", outcome);
    match why {
        Some(why) => step.span.fail(why),
        None => step.span.succeed(),
    }
    step.span.end();
    (id, end)
}

pub(super) struct Step<'c> {
    ctx: &'c RunContext,
    start: StepStart,
    events: StepEvents,
    span: Span,
    /// The span of the attempt under way (a step's attempts run one after
    /// another), which its agents' and its landing's are children of.
    attempt_span: Mutex<Span>,
}

impl Step<'_> {
    async fn drive(&self) -> StepEnd {
        let first = self.start.first_attempt;
        let max = self.ctx.team.max_retries;
        // A resumed step's feedback is the last review the record kept.
        let mut feedback = self.start.feedback.clone().map(|verdict| SentBack {
            verdict,
            by: SentBackBy::Reviewer,
        });
        let mut attempt = first;
        loop {
            let span = self.span.child("troupe.attempt");
            span.set("troupe.attempt", i64::from(attempt));
            *self
                .attempt_span
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = span.clone();
            let tried = self.attempt(attempt, feedback.as_ref()).await;
            attempt_ended(&span, &tried);
            let sent_back = match tried {
                Ok(Tried::Done(end)) => return end,
                Ok(Tried::Again(sent_back)) => sent_back,
                Err(error) => return StepEnd::Failed(StepFailure::Isolation { attempt, error }),
            };
            let (verdict, by) = (&sent_back.verdict, sent_back.by);
            let issue = verdict.issues.first().unwrap_or(&verdict.summary).clone();
            if !verdict.retry {
                return StepEnd::Failed(StepFailure::NoRetry { attempt, issue });
            }
            if attempt == first + max {
                return StepEnd::Failed(StepFailure::OutOfRetries {
                    times: attempt - first + 1,
                    max,
                    issue,
                });
            }
            feedback = Some(sent_back);
            attempt += 1;
            self.send(StepEvent::Retrying { attempt, by });
        }
    }

    /// One attempt in the workspace the run's isolation gives it: its
    /// worker, the claims check, its review, and the landing of what it
    /// changed.
    async fn attempt(
        &self,
        attempt: u32,
        feedback: Option<&SentBack>,
    ) -> Result<Tried, IsolationError> {
        let mut space = self
            .ctx
            .workspaces()
            .attempt(&self.start.step.id, attempt)
            .await?;
        let carried = space.carried();
        let worker = match self.worker(attempt, feedback, space.view(), &carried).await {
            Ok(worker) => worker,
            Err(e) => return Ok(Tried::Done(StepEnd::Failed(e.into()))),
        };
        if worker.status != AgentStatus::Completed {
            space.keep().await?;
            let why = worker.error.as_deref().unwrap_or(&worker.summary);
            return Ok(Tried::Done(StepEnd::Failed(StepFailure::WorkerEnded {
                attempt,
                status: worker.status,
                why: excerpt(why, 300),
            })));
        }
        if let Some(schema) = &self.start.step.output_schema {
            let errors = crate::plan::output::result_errors_within(
                schema,
                worker.result.as_ref(),
                crate::plan::output::CHECK_BUDGET,
            )
            .await;
            if !errors.is_empty() {
                self.send(StepEvent::ResultInvalid {
                    attempt,
                    errors: errors.clone(),
                });
                space.discard().await;
                return Ok(Tried::again(
                    invalid_result(attempt, errors),
                    SentBackBy::Schema,
                ));
            }
        }
        let change = space.change().await?;
        if let Some(change) = &change {
            self.send(StepEvent::Changed {
                attempt,
                change: change.clone(),
            });
        }
        let claimed = Claimed {
            success: worker.success_claimed,
            files: &worker.deliverables_files,
            changing_calls: worker.changing_calls,
        };
        let workspace = space.view().map_or(self.ctx.workspace.clone(), |v| v.dir);
        let changed = change.as_ref().map(|c| c.files.as_slice());
        let on_disk = claims::on_disk(&workspace);
        let present = |file: &str| space.holds(file).unwrap_or_else(|| on_disk(file));
        let claims = claims::check(&present, claimed, changed);
        self.send(StepEvent::ClaimsChecked {
            attempt,
            claims: claims.clone(),
        });
        let review = Review {
            attempt,
            worker: &worker,
            claims: &claims,
            change: change.as_ref(),
            checkout: space.review_view(),
        };
        match self.review(review).await {
            ReviewEnd::Approved => self.land(&*space, attempt, StepEnd::Completed).await,
            ReviewEnd::Rejected(verdict) => {
                space.discard().await;
                Ok(Tried::again(verdict, SentBackBy::Reviewer))
            }
            ReviewEnd::Failed(reason) => {
                let accepted = self.ctx.team.accept_unreviewed;
                let end = StepEnd::Unreviewed { accepted, reason };
                match accepted {
                    true => self.land(&*space, attempt, end).await,
                    false => Ok(Tried::Done(end)),
                }
            }
            ReviewEnd::Stopped(reason) => Ok(Tried::Done(StepEnd::Failed(
                StepFailure::ReviewStopped(reason),
            ))),
        }
    }

    /// Lands an accepted attempt's change; a conflict or a refusal is a
    /// rejection the next attempt answers.
    async fn land(
        &self,
        space: &dyn AttemptSpace,
        attempt: u32,
        end: StepEnd,
    ) -> Result<Tried, IsolationError> {
        let approved = matches!(end, StepEnd::Completed);
        let span = Span::under(self.attempt_trace(), "troupe.landing");
        let landing = space.land(approved).await;
        landed_in(&span, &landing);
        match landing? {
            Landing::InPlace => Ok(Tried::Done(end)),
            Landing::Landed(head) => {
                self.send(StepEvent::Landed { attempt, head });
                Ok(Tried::Done(end))
            }
            Landing::Refused(reasons) => {
                self.send(StepEvent::Refused {
                    attempt,
                    reasons: reasons.clone(),
                });
                let verdict = VerdictReport {
                    approved: false,
                    summary: format!(
                        "troupe does not land the change of attempt {attempt}: {}",
                        reasons.join("; ")
                    ),
                    issues: reasons,
                    suggestions: vec![
                        "Leave these out of the change: remove them from the checkout, or make them plain files inside the workspace.".to_string(),
                    ],
                    retry: true,
                };
                Ok(Tried::again(verdict, SentBackBy::Landing))
            }
            Landing::Conflicted(conflict) => {
                self.send(StepEvent::Conflicted {
                    attempt,
                    paths: conflict.paths.clone(),
                });
                let verdict = VerdictReport {
                    approved: false,
                    summary: format!(
                        "The approved change of attempt {attempt} conflicts with work that landed meanwhile, in {}.",
                        conflict.paths.join(", ")
                    ),
                    issues: conflict.issues(),
                    suggestions: Vec::new(),
                    retry: true,
                };
                Ok(Tried::again(verdict, SentBackBy::Landing))
            }
        }
    }

    /// The worker of `attempt`, run to its end.
    async fn worker(
        &self,
        attempt: u32,
        feedback: Option<&SentBack>,
        checkout: Option<CheckoutView>,
        carried: &Carried,
    ) -> Result<AgentRecord, StartError> {
        let dependencies: Vec<Delivered<'_>> = self
            .start
            .dependencies
            .iter()
            .map(|(step, report)| Delivered {
                step,
                report: report.as_ref(),
                workspace: &self.ctx.workspace,
            })
            .collect();
        // A result its brief cuts is read whole from its worker's record,
        // which a checkout's view holds only when named.
        let checkout = checkout.map(|mut view| {
            let cut = dependencies.iter().filter_map(|dep| {
                let result = dep.step.result.as_ref()?;
                let report = dep.report?;
                super::briefs::cut_in_brief(result)
                    .then(|| super::briefs::result_file(&self.ctx.workspace, report))
            });
            view.read.extend(cut);
            view
        });
        let brief = worker_brief(
            &self.ctx.prompts,
            &self.ctx.goal,
            &self.start.step,
            &dependencies,
            feedback,
            carried,
        );
        let dir = self.dir(&format!("worker-{attempt}"));
        let worker = self
            .agent(attempt, AgentRole::Worker, 0, dir.clone(), brief, checkout)
            .await;
        // A worker that started has an end to record, even one troupe
        // could not run to it.
        let record = match &worker {
            Ok(record) => Some(AgentRecord {
                result: crate::plan::output::recorded(record.result.as_ref()),
                ..record.clone()
            }),
            Err(e @ StartError::Spawn(_)) => Some(AgentRecord::not_run(self.ctx.show(&dir), e)),
            Err(_) => None,
        };
        if let Some(worker) = record {
            self.send(StepEvent::WorkerFinished { attempt, worker });
        }
        worker
    }

    /// Starts one agent of the step, once the run's stop and budget allow,
    /// and runs it to its end.
    pub(super) async fn agent(
        &self,
        attempt: u32,
        role: AgentRole,
        review: u32,
        dir: PathBuf,
        brief: String,
        checkout: Option<CheckoutView>,
    ) -> Result<AgentRecord, StartError> {
        if let Some(cause) = self.ctx.stop.cause() {
            return Err(StartError::Stopped(cause));
        }
        self.ctx.budget.admit().map_err(StartError::Budget)?;
        self.send(StepEvent::AgentStarted {
            attempt,
            role,
            review,
            dir: dir.clone(),
        });
        let request = AgentRequest {
            step: self.start.step.id.clone(),
            attempt,
            role,
            dir,
            summary: excerpt(&self.start.step.description, 80),
            brief,
            checkout,
            output_schema: match role {
                AgentRole::Worker => self.start.step.output_schema.clone(),
                AgentRole::Reviewer => None,
            },
            // The reviewer keeps its read-only role whatever the step's.
            powers: match role {
                AgentRole::Worker => self.start.step.powers.clone(),
                AgentRole::Reviewer => None,
            },
            trace: self.attempt_trace(),
        };
        Ok(self.ctx.runner.run(request).await?)
    }

    /// The span of the attempt under way.
    fn attempt_trace(&self) -> Option<crate::protocol::TraceParent> {
        self.attempt_span
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .context()
    }

    /// The directory of the step's agent `name` (`worker-2`, `review-1`).
    pub(super) fn dir(&self, name: &str) -> PathBuf {
        self.ctx.run_dir.join(&self.start.step.id).join(name)
    }

    pub(super) fn send(&self, event: StepEvent) {
        let _ = self.events.send((self.start.step.id.clone(), event));
    }

    pub(super) fn ctx(&self) -> &RunContext {
        self.ctx
    }

    pub(super) fn record(&self) -> &StepRecord {
        &self.start.step
    }
}

/// An attempt's span, ended with how the attempt went.
fn attempt_ended(span: &Span, tried: &Result<Tried, IsolationError>) {
    let outcome = match tried {
        Ok(Tried::Done(StepEnd::Completed)) => {
            span.succeed();
            "completed"
        }
        Ok(Tried::Done(StepEnd::Failed(failure))) => {
            span.fail(failure.to_string());
            "failed"
        }
        Ok(Tried::Done(StepEnd::Unreviewed { .. })) => "unreviewed",
        Ok(Tried::Again(sent_back)) => {
            span.fail(sent_back.verdict.summary.clone());
            "sent_back"
        }
        Err(error) => {
            span.fail(error.to_string());
            "isolation_failed"
        }
    };
    span.set("troupe.attempt.outcome", outcome);
    span.end();
}

/// A landing's span, ended with what became of the change; a shared
/// workspace's, which lands nothing, is not kept.
fn landed_in(span: &Span, landing: &Result<Landing, IsolationError>) {
    let outcome = match landing {
        Ok(Landing::InPlace) => return span.discard(),
        Ok(Landing::Landed(head)) => {
            span.set("troupe.landing.head", head.clone());
            span.succeed();
            "landed"
        }
        Ok(Landing::Refused(reasons)) => {
            span.fail(reasons.join("; "));
            "refused"
        }
        Ok(Landing::Conflicted(conflict)) => {
            span.fail(format!("conflicts in {}", conflict.paths.join(", ")));
            "conflicted"
        }
        Err(error) => {
            span.fail(error.to_string());
            "failed"
        }
    };
    span.set("troupe.landing.outcome", outcome);
    span.end();
}
