//! The owner of a run: it alone holds the run's record, decides every
//! change of a step's status, and hands each new state to the recorder.
//!
//! It schedules eagerly: a step starts the moment all its dependencies are
//! done and one of `--max-parallel` slots is free; there is no batch
//! barrier, and a slow step holds up only what depends on it. Each step
//! runs as a task of its own (`step`), which tells the owner what happens
//! over a channel. A failed step skips its transitive dependents and
//! independent steps go on; when under half the steps have completed, the
//! Planner is asked to plan the rest instead (at most `--max-replans`
//! times): new steps stop starting, the running ones finish, and the steps
//! that did not complete are replaced by the new plan.

use std::collections::HashSet;
use std::sync::Arc;

use chrono::Utc;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::mpsc;

use super::context::RunContext;
use super::end::{EXIT_FAILED, RunEnd};
use super::events::{Limit, RunEvent};
use super::planner::Planner;
use super::recorder::Recorder;
use super::step::{ReviewOutcome, StepEnd, StepEvent, StepStart, run_step};
use super::summary::summary_table;
use crate::protocol::AgentRole;
use crate::record::{AgentRecord, RunRecord, RunStatus, StepStatus};
use crate::signal::StopCause;
use crate::text::count;

pub struct Owner<'c> {
    ctx: &'c RunContext,
    record: Arc<RunRecord>,
    recorder: Recorder,
}

impl<'c> Owner<'c> {
    pub fn new(ctx: &'c RunContext, record: Arc<RunRecord>, recorder: Recorder) -> Self {
        Owner {
            ctx,
            record,
            recorder,
        }
    }

    pub fn record(&self) -> &RunRecord {
        &self.record
    }

    /// What the run's steps share.
    pub fn context(&self) -> &'c RunContext {
        self.ctx
    }

    /// Applies `update` to the record and records `event` with it.
    pub fn emit(&mut self, event: RunEvent, update: impl FnOnce(&mut RunRecord)) {
        self.change(update);
        self.recorder.emit(&event, &self.record);
    }

    /// `emit`, then waits until the record is on disk: an intent troupe
    /// must find on resume before it acts on it.
    pub async fn emit_and_write(&mut self, event: RunEvent, update: impl FnOnce(&mut RunRecord)) {
        self.emit(event, update);
        self.recorder.on_disk().await;
    }

    /// Changes the record without an event (counters, times).
    pub fn update(&mut self, update: impl FnOnce(&mut RunRecord)) {
        self.change(update);
        self.recorder.save(&self.record);
    }

    fn change(&mut self, update: impl FnOnce(&mut RunRecord)) {
        let run = Arc::make_mut(&mut self.record);
        update(run);
        run.recount();
        run.updated_at = Utc::now();
    }

    /// Runs the steps until none can start any more.
    pub async fn schedule(&mut self, planner: &mut Planner) {
        let ctx = self.ctx;
        let (events, mut inbox) = mpsc::unbounded_channel();
        let mut running = FuturesUnordered::new();
        let mut replan_due: Option<String> = None;
        let mut limit_noted = false;
        let mut stop_noted = false;
        loop {
            while running.len() < ctx.team.max_parallel
                && replan_due.is_none()
                && ctx.stop.cause().is_none()
            {
                if let Some(exhausted) = ctx.budget.exhausted() {
                    if !limit_noted {
                        limit_noted = true;
                        self.note_stop(StopCause::Budget(exhausted));
                    }
                    break;
                }
                let Some(start) = self.next_ready() else {
                    break;
                };
                let id = start.step.id.clone();
                self.update(|run| {
                    if let Some(step) = run.step_mut(&id) {
                        step.status = StepStatus::Running;
                        step.started_at = Some(Utc::now());
                    }
                });
                running.push(run_step(ctx, start, events.clone()));
            }
            if running.is_empty() {
                match replan_due.take() {
                    Some(reason) if ctx.stop.cause().is_none() => {
                        // A spent budget starts no step of a new plan
                        // either: the run ends on it.
                        if let Some(exhausted) = ctx.budget.exhausted() {
                            if !limit_noted {
                                self.note_stop(StopCause::Budget(exhausted));
                            }
                            break;
                        }
                        self.replan(planner, reason).await;
                        continue;
                    }
                    _ => break,
                }
            }
            tokio::select! {
                // The stop first, so that it is recorded before what it ends.
                biased;
                cause = ctx.stop.stopped(), if !stop_noted => {
                    stop_noted = true;
                    self.note_stop(cause);
                }
                Some((id, event)) = inbox.recv() => self.apply(&id, event),
                Some((id, end)) = running.next() => {
                    // Everything the step said comes before its end.
                    while let Ok((id, event)) = inbox.try_recv() {
                        self.apply(&id, event);
                    }
                    let failed = !matches!(end, StepEnd::Completed | StepEnd::Unreviewed { accepted: true, .. });
                    self.finish_step(&id, end);
                    if failed && replan_due.is_none() {
                        match self.replan_reason() {
                            Some(reason) => replan_due = Some(reason),
                            None => self.skip_dependents(&id),
                        }
                    }
                }
            }
        }
        if let Some(cause) = ctx.stop.cause().filter(|_| !stop_noted) {
            self.note_stop(cause);
        }
        self.skip_leftovers();
    }

    /// The run stopped starting agents, for `cause`, which becomes its
    /// reason.
    fn note_stop(&mut self, cause: StopCause) {
        let reason = cause.to_string();
        let event = match cause {
            StopCause::Interrupted(_) => RunEvent::Interrupted {
                reason: reason.clone(),
            },
            StopCause::Deadline(_) => RunEvent::LimitReached {
                limit: Limit::Deadline,
                reason: reason.clone(),
            },
            StopCause::Budget(_) => RunEvent::LimitReached {
                limit: Limit::Budget,
                reason: reason.clone(),
            },
        };
        self.emit(event, |run| run.reason = Some(reason));
    }

    /// Whether the run's signal was Ctrl-C (or SIGTERM, or a closed
    /// output): what it cut short is then interrupted, not failed, and
    /// `--resume` runs it again.
    fn interrupted(&self) -> bool {
        matches!(self.ctx.stop.cause(), Some(StopCause::Interrupted(_)))
    }

    /// The first pending step, in plan order, whose dependencies are all
    /// done, with what it starts from.
    fn next_ready(&self) -> Option<StepStart> {
        let accept = self.ctx.team.accept_unreviewed;
        let run = &self.record;
        let step = run.steps.iter().find(|step| {
            step.status == StepStatus::Pending
                && step
                    .dependencies
                    .iter()
                    .all(|dep| run.step(dep).is_some_and(|d| d.is_done(accept)))
        })?;
        let dependencies = step
            .dependencies
            .iter()
            .filter_map(|dep| run.step(dep))
            .map(|dep| (dep.clone(), dep.delivered().cloned()))
            .collect();
        // A resumed step keeps its earlier attempts: new ones are numbered
        // after them (one cut short is done again under its own number),
        // and the last verdict given, when a rejection, is the first
        // feedback (an attempt cut short before its review does not hide
        // the rejection before it).
        let feedback = step
            .attempts
            .iter()
            .rev()
            .find_map(|a| a.reviews.last()?.verdict.clone())
            .filter(|v| !v.approved);
        Some(StepStart {
            step: step.clone(),
            dependencies,
            first_attempt: step.next_attempt(),
            feedback,
        })
    }

    /// What a step said, in the record and as an event.
    fn apply(&mut self, id: &str, event: StepEvent) {
        let step = id.to_string();
        match event {
            StepEvent::AgentStarted {
                attempt,
                role,
                review,
                dir,
            } => {
                let dir = self.ctx.show(&dir);
                let agents = self.ctx.budget.agents();
                let event = match role {
                    AgentRole::Reviewer => RunEvent::ReviewStarted {
                        step,
                        attempt,
                        review,
                        dir: dir.clone(),
                    },
                    AgentRole::Worker => RunEvent::StepStarted {
                        step,
                        attempt,
                        dir: dir.clone(),
                    },
                };
                self.emit(event, |run| {
                    run.totals.agents = agents;
                    if let Some(step) = run.step_mut(id) {
                        let slot = step.attempt_mut(attempt);
                        let running = AgentRecord::running(dir);
                        match role {
                            AgentRole::Reviewer => slot.reviews.push(running),
                            AgentRole::Worker => slot.worker = Some(running),
                        }
                    }
                });
            }
            StepEvent::WorkerFinished { attempt, worker } => {
                let event = RunEvent::WorkerFinished {
                    step,
                    attempt,
                    status: worker.status,
                    summary: worker.summary.clone(),
                    error: worker.error.clone(),
                    seconds: worker.stats.runtime_seconds,
                };
                self.emit(event, |run| {
                    run.totals.note_sandbox(worker.stats.sandbox.as_ref());
                    if let Some(step) = run.step_mut(id) {
                        step.stats.add(&worker.stats);
                        step.attempt_mut(attempt).worker = Some(worker);
                    }
                });
            }
            StepEvent::ClaimsChecked { attempt, claims } => {
                let event = RunEvent::ClaimsChecked {
                    step,
                    attempt,
                    listed: claims.listed.len(),
                    missing: claims.missing.clone(),
                    changing_calls: claims.changing_calls,
                    suspicious: claims.suspicious,
                };
                self.emit(event, |run| {
                    if let Some(step) = run.step_mut(id) {
                        step.status = StepStatus::Reviewing;
                        step.attempt_mut(attempt).claims = Some(claims);
                    }
                });
            }
            StepEvent::ReviewFinished {
                attempt,
                review,
                record,
                outcome,
            } => {
                let seconds = record.stats.runtime_seconds;
                let event = match outcome {
                    ReviewOutcome::Approved(verdict) => RunEvent::ReviewApproved {
                        step,
                        attempt,
                        summary: verdict.summary,
                        seconds,
                    },
                    ReviewOutcome::Rejected(verdict) => RunEvent::ReviewRejected {
                        step,
                        attempt,
                        summary: verdict.summary,
                        issues: verdict.issues,
                        suggestions: verdict.suggestions,
                        retry: verdict.retry,
                        seconds,
                    },
                    ReviewOutcome::Failed(reason) | ReviewOutcome::Stopped(reason) => {
                        RunEvent::ReviewFailed {
                            step,
                            attempt,
                            review,
                            reason,
                            seconds,
                        }
                    }
                };
                self.emit(event, |run| {
                    run.totals.note_sandbox(record.stats.sandbox.as_ref());
                    if let Some(step) = run.step_mut(id) {
                        step.stats.add(&record.stats);
                        if let Some(last) = step.attempt_mut(attempt).reviews.last_mut() {
                            *last = record;
                        }
                    }
                });
            }
            StepEvent::Changed { attempt, change } => {
                let event = RunEvent::ChangeRecorded {
                    step,
                    attempt,
                    files: change.files.len(),
                    commit: change.commit.clone(),
                };
                self.emit(event, |run| {
                    if let Some(step) = run.step_mut(id) {
                        step.attempt_mut(attempt).change = Some(change);
                    }
                });
            }
            StepEvent::Landed { attempt, head } => {
                let event = RunEvent::ChangeLanded {
                    step,
                    attempt,
                    head: head.clone(),
                };
                self.emit(event, |run| {
                    if let Some(change) = run
                        .step_mut(id)
                        .and_then(|s| s.attempt_mut(attempt).change.as_mut())
                    {
                        change.merge = Some(head);
                    }
                });
            }
            StepEvent::Conflicted { attempt, paths } => {
                let event = RunEvent::ChangeConflicted {
                    step,
                    attempt,
                    paths: paths.clone(),
                };
                self.emit(event, |run| {
                    if let Some(change) = run
                        .step_mut(id)
                        .and_then(|s| s.attempt_mut(attempt).change.as_mut())
                    {
                        change.conflicts = paths;
                    }
                });
            }
            StepEvent::Refused { attempt, reasons } => {
                let event = RunEvent::ChangeRefused {
                    step,
                    attempt,
                    reasons,
                };
                // The reasons are in the change's record since it was made.
                self.emit(event, |_| {});
            }
            StepEvent::ResultInvalid { attempt, errors } => {
                let event = RunEvent::ResultInvalid {
                    step,
                    attempt,
                    errors: errors.clone(),
                };
                self.emit(event, |run| {
                    if let Some(step) = run.step_mut(id) {
                        step.attempt_mut(attempt).result_errors = errors;
                    }
                });
            }
            StepEvent::Retrying { attempt, by } => {
                let event = RunEvent::StepRetry {
                    step,
                    attempt,
                    sent_back_by: by,
                };
                self.emit(event, |run| {
                    if let Some(step) = run.step_mut(id) {
                        step.status = StepStatus::Running;
                    }
                });
            }
        }
    }

    fn finish_step(&mut self, id: &str, end: StepEnd) {
        let (seconds, attempts) = self
            .record
            .step(id)
            .map(|step| {
                let seconds = step
                    .started_at
                    .map(|at| (Utc::now() - at).num_milliseconds() as f64 / 1000.0)
                    .unwrap_or(0.0);
                (seconds, u32::try_from(step.attempts.len()).unwrap_or(0))
            })
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
            StepEnd::Failed(failure) if self.interrupted() => {
                let reason = failure.to_string();
                (
                    RunEvent::StepInterrupted {
                        step,
                        attempts,
                        reason: reason.clone(),
                        seconds,
                    },
                    StepStatus::Interrupted,
                    Some(reason),
                )
            }
            StepEnd::Failed(failure) => {
                let reason = failure.to_string();
                (
                    RunEvent::StepFailed {
                        step,
                        attempts,
                        reason: reason.clone(),
                        seconds,
                    },
                    StepStatus::Failed,
                    Some(reason),
                )
            }
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
        self.emit(event, |run| {
            if let Some(step) = run.step_mut(id) {
                step.status = status;
                step.reason = reason;
                step.completed_at = Some(Utc::now());
                step.duration_seconds = Some(seconds);
                step.result = step.checked_result();
            }
        });
    }

    /// Marks every pending step that depends on `failed`, directly or not,
    /// as skipped.
    pub(super) fn skip_dependents(&mut self, failed: &str) {
        let mut blocked: HashSet<String> = [failed.to_string()].into();
        let mut skipped = Vec::new();
        let mut grew = true;
        while grew {
            grew = false;
            for step in self
                .record
                .steps
                .iter()
                .filter(|s| s.status == StepStatus::Pending)
            {
                if blocked.contains(&step.id) {
                    continue;
                }
                if let Some(dep) = step.dependencies.iter().find(|d| blocked.contains(*d)) {
                    blocked.insert(step.id.clone());
                    skipped.push((
                        step.id.clone(),
                        format!("it depends on {dep}, which did not complete"),
                    ));
                    grew = true;
                }
            }
        }
        for (id, reason) in skipped {
            self.skip(&id, reason);
        }
    }

    /// Whatever is still pending when nothing more can start; after Ctrl-C
    /// they stay pending, for `--resume`.
    fn skip_leftovers(&mut self) {
        if self.interrupted() {
            return;
        }
        let pending: Vec<String> = self
            .record
            .steps
            .iter()
            .filter(|s| s.status == StepStatus::Pending)
            .map(|s| s.id.clone())
            .collect();
        let why = self
            .ctx
            .stop
            .cause()
            .or_else(|| self.ctx.budget.exhausted().map(StopCause::Budget))
            .map_or_else(
                || "its dependencies did not complete".to_string(),
                |cause| cause.to_string(),
            );
        for id in pending {
            self.skip(&id, why.clone());
        }
    }

    fn skip(&mut self, id: &str, reason: String) {
        let event = RunEvent::StepSkipped {
            step: id.to_string(),
            reason: reason.clone(),
        };
        self.emit(event, |run| {
            if let Some(step) = run.step_mut(id) {
                step.status = StepStatus::Skipped;
                step.reason = Some(reason);
            }
        });
    }

    /// The run's status and exit code, recorded and shown.
    pub fn finish(&mut self) -> u8 {
        let accept = self.ctx.team.accept_unreviewed;
        let all_done = self.record.steps.iter().all(|s| s.is_settled(accept));
        let end = RunEnd::new(self.ctx.stop.cause(), all_done, self.ctx.budget.exhausted());
        let (status, exit_code) = end.status();
        self.close(status, exit_code)
    }

    /// Ends the run as `status`: totals, `run_finished`, the summary; the
    /// exit code. A run whose records could not all be written (a full
    /// disk) ends as failed instead, with that as its reason: what is on
    /// disk may miss what happened. When its last record cannot be written
    /// either, it is written in the space the recorder kept as the run
    /// started; only when even that fails does run.json stay as it was (a
    /// reader sees the run died), which troupe says. The exit code is a
    /// failure's.
    pub fn close(&mut self, status: RunStatus, exit_code: u8) -> u8 {
        let before = self.recorder.failures();
        let unrecorded = before.first.as_ref().map(|first| {
            format!(
                "the run's records could not all be written ({}; the first: {first})",
                count(before.count(), "failed write")
            )
        });
        let (status, exit_code) = match unrecorded {
            Some(_) => (RunStatus::Failed, EXIT_FAILED),
            None => (status, exit_code),
        };
        let usage = self.ctx.budget.usage();
        let agents = self.ctx.budget.agents();
        let seconds = crate::protocol::round_seconds(self.recorder.elapsed_seconds());
        let interrupted = self.interrupted();
        self.update(|run| {
            if interrupted {
                let cut = [StepStatus::Running, StepStatus::Reviewing];
                for step in run.steps.iter_mut().filter(|s| cut.contains(&s.status)) {
                    step.status = StepStatus::Interrupted;
                }
            }
            // An agent whose end never came back (killed at once by a
            // second Ctrl-C) is not left running in the record.
            for attempt in run.steps.iter_mut().flat_map(|s| s.attempts.iter_mut()) {
                let agents = attempt.worker.iter_mut().chain(attempt.reviews.iter_mut());
                for agent in agents.filter(|a| a.status == crate::protocol::AgentStatus::Running) {
                    agent.status = crate::protocol::AgentStatus::Terminated;
                    agent.error = Some(
                        "killed with the run before it ended (a second Ctrl-C); its transcript is as it last wrote it"
                            .to_string(),
                    );
                }
            }
            run.status = status;
            run.completed_at = Some(Utc::now());
            run.totals.token_usage = usage;
            run.totals.agents = agents;
            run.totals.runtime_seconds = seconds;
            if let Some(unrecorded) = unrecorded {
                run.reason = Some(match run.reason.take() {
                    Some(reason) => format!("{unrecorded}; {reason}"),
                    None => unrecorded,
                });
            }
            if status == RunStatus::Failed && run.reason.is_none() {
                run.reason = Some(which_steps(run));
            }
        });
        let totals = self.record.totals.clone();
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
        self.emit(event, |_| {});
        crate::console::progress(&summary_table(&self.record));
        let after = self.recorder.failures();
        let run_dir = self.ctx.run_dir.clone();
        if after.count() > before.count() {
            let why = after.last.as_deref().unwrap_or("a write failed");
            let ended = match after.run_json > before.run_json {
                true => super::recorder::Recorder::write_end_in_reserve(&run_dir, &self.record),
                false => Ok(()),
            };
            match (ended, after.run_json > before.run_json) {
                (Ok(()), true) => {
                    let sealed = super::unsealed::seal_left(&self.ctx.workspace, &self.record);
                    let transcripts = match sealed {
                        0 => String::new(),
                        1 => ", and 1 agent's transcript sealed there".to_string(),
                        n => format!(", and {n} agents' transcripts sealed there"),
                    };
                    crate::tell!(
                        "troupe: the run's end could not be recorded as it went ({why}); run.json says it, written in the space troupe kept for it{transcripts}"
                    )
                }
                (Ok(()), false) => crate::tell!(
                    "troupe: the run's end could not be recorded ({why}); events.jsonl misses it"
                ),
                (Err(kept), _) => crate::tell!(
                    "troupe: the run's end could not be recorded ({why}; nor in the space kept for it: {kept}); run.json still says what it said last, and readers show the run as died"
                ),
            }
            super::recorder::Recorder::release_reserve(&run_dir);
            return EXIT_FAILED;
        }
        super::recorder::Recorder::release_reserve(&run_dir);
        exit_code
    }
}

/// Which steps kept a run from completing, by name: the counts are said
/// elsewhere.
fn which_steps(run: &RunRecord) -> String {
    let named = |status: StepStatus| -> Vec<&str> {
        run.steps
            .iter()
            .filter(|s| s.status == status)
            .map(|s| s.id.as_str())
            .collect()
    };
    let parts: Vec<String> = [
        (StepStatus::Failed, "failed"),
        (StepStatus::Unreviewed, "unreviewed"),
        (StepStatus::Skipped, "skipped"),
    ]
    .into_iter()
    .filter_map(|(status, word)| {
        let ids = named(status);
        (!ids.is_empty()).then(|| format!("{word}: {}", ids.join(", ")))
    })
    .collect();
    match parts.is_empty() {
        true => "not every step completed".to_string(),
        false => parts.join("; "),
    }
}
