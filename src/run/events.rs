//! The events of a team run: one JSON line each in `events.jsonl` (and on
//! stdout with `--json`), and one human line each on stderr.

use serde::Serialize;

use crate::chat::Usage;
use crate::protocol::{AgentStatus, VerdictReport};
use crate::record::IsolationMode;
use crate::record::RunStatus;
use crate::text::excerpt;

/// A run-wide limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// `--max-agents` or `--max-tokens`.
    Budget,
    /// `--deadline`.
    Deadline,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunEvent {
    RunStarted {
        run_id: String,
        goal: String,
        /// The workspace, absolute; `run_dir` is relative to it, like
        /// every path of the run's records.
        workspace: String,
        run_dir: String,
    },
    /// A plan (round 0) or replan (round n) was accepted; `file` holds it.
    PlanReady {
        round: u32,
        summary: String,
        steps: usize,
        levels: usize,
        file: String,
    },
    /// The planner's answer was not a valid plan; `saved` holds its text.
    PlanInvalid {
        round: u32,
        reason: String,
        saved: String,
    },
    /// The planner could not be asked for a plan (its model failed).
    PlannerFailed {
        round: u32,
        reason: String,
    },
    /// How the run's workers share the workspace: `worktree`, with the
    /// integration branch and its repository, or `shared`, with why when
    /// worktrees were wanted.
    Isolation {
        mode: IsolationMode,
        #[serde(skip_serializing_if = "Option::is_none")]
        branch: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        repository: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    /// A worker started on an attempt of a step.
    StepStarted {
        step: String,
        attempt: u32,
        dir: String,
    },
    WorkerFinished {
        step: String,
        attempt: u32,
        status: AgentStatus,
        summary: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        seconds: f64,
    },
    /// The parent's check of what the worker claims.
    ClaimsChecked {
        step: String,
        attempt: u32,
        listed: usize,
        missing: Vec<String>,
        changing_calls: u32,
        suspicious: bool,
    },
    /// `--isolation worktree` was asked for and cannot be had.
    IsolationFailed {
        reason: String,
    },
    /// What an attempt changed in its checkout.
    ChangeRecorded {
        step: String,
        attempt: u32,
        files: usize,
        #[serde(skip_serializing_if = "Option::is_none")]
        commit: Option<String>,
    },
    /// An accepted attempt's change is on the integration branch.
    ChangeLanded {
        step: String,
        attempt: u32,
        head: String,
    },
    /// An approved change conflicted with what landed meanwhile.
    ChangeConflicted {
        step: String,
        attempt: u32,
        paths: Vec<String>,
    },
    /// troupe does not land an approved change: it holds a nested
    /// repository, a link out of the workspace, troupe's configuration, or
    /// a file git must not read.
    ChangeRefused {
        step: String,
        attempt: u32,
        reasons: Vec<String>,
    },
    /// A worker's result does not match its step's output_schema; the
    /// attempt goes back to it without a review.
    ResultInvalid {
        step: String,
        attempt: u32,
        errors: Vec<String>,
    },
    ReviewStarted {
        step: String,
        attempt: u32,
        review: u32,
        dir: String,
    },
    ReviewApproved {
        step: String,
        attempt: u32,
        summary: String,
        seconds: f64,
    },
    ReviewRejected {
        step: String,
        attempt: u32,
        summary: String,
        issues: Vec<String>,
        suggestions: Vec<String>,
        retry: bool,
        seconds: f64,
    },
    /// The review itself failed (model error, crash, timeout, no verdict).
    ReviewFailed {
        step: String,
        attempt: u32,
        review: u32,
        reason: String,
        seconds: f64,
    },
    /// The worker goes again with the feedback of whoever sent the last
    /// attempt back.
    StepRetry {
        step: String,
        attempt: u32,
        sent_back_by: SentBackBy,
    },
    StepCompleted {
        step: String,
        attempts: u32,
        seconds: f64,
    },
    StepFailed {
        step: String,
        attempts: u32,
        reason: String,
        seconds: f64,
    },
    /// Both reviews failed; `accepted` when the run accepts unreviewed
    /// steps (the step then counts as done).
    StepUnreviewed {
        step: String,
        accepted: bool,
        reason: String,
        seconds: f64,
    },
    StepSkipped {
        step: String,
        reason: String,
    },
    /// Cut short by Ctrl-C; `--resume` runs it again.
    StepInterrupted {
        step: String,
        attempts: u32,
        reason: String,
        seconds: f64,
    },
    /// `troupe run --resume` picked the run up again.
    RunResumed {
        run_id: String,
        /// The steps that will run again.
        steps: Vec<String>,
    },
    Replanning {
        round: u32,
        reason: String,
    },
    /// A replan took the place of these steps.
    StepsReplaced {
        round: u32,
        steps: Vec<String>,
    },
    /// Ctrl-C or SIGTERM: no new agent starts, running ones are cancelled.
    Interrupted {
        reason: String,
    },
    /// A run-wide limit stopped new agents from starting.
    LimitReached {
        limit: Limit,
        reason: String,
    },
    /// A model request failed and is tried again: `attempt` of `of`,
    /// after `wait_seconds`. `agent` is `planner` or an agent's name.
    LlmRetry {
        agent: String,
        attempt: u32,
        of: u32,
        reason: String,
        wait_seconds: f64,
    },
    /// A model request waits for the endpoint's rate limits or the user's
    /// (`--max-requests-per-minute`): for `wait_seconds`, or, when that is
    /// null, until a request in flight ends.
    LlmWait {
        agent: String,
        reason: String,
        wait_seconds: Option<f64>,
    },
    RunFinished {
        status: RunStatus,
        exit_code: u8,
        completed: usize,
        failed: usize,
        skipped: usize,
        unreviewed: usize,
        seconds: f64,
        token_usage: Usage,
    },
    /// The run's result brought into the workspace after its end (not
    /// with `--no-apply`): what was written, or why it was not. The one
    /// event after `run_finished`.
    Applied {
        branch: String,
        #[serde(flatten)]
        apply: crate::record::ApplyRecord,
    },
}

impl RunEvent {
    /// Whether a resume depends on this event reaching the disk with the
    /// record: a plan taken, the run's branch made, a step settled, the
    /// run's end.
    pub fn commits(&self) -> bool {
        matches!(
            self,
            RunEvent::PlanReady { .. }
                | RunEvent::Isolation { .. }
                | RunEvent::StepCompleted { .. }
                | RunEvent::StepFailed { .. }
                | RunEvent::StepUnreviewed { .. }
                | RunEvent::StepSkipped { .. }
                | RunEvent::StepInterrupted { .. }
                | RunEvent::StepsReplaced { .. }
                | RunEvent::RunFinished { .. }
        )
    }

    /// The colour of its human line (SGR code): green for what went well,
    /// red for what failed, yellow for what needs a look; none for the
    /// rest.
    pub fn colour(&self) -> Option<&'static str> {
        match self {
            RunEvent::ReviewApproved { .. } | RunEvent::StepCompleted { .. } => Some("32"),
            RunEvent::PlanInvalid { .. }
            | RunEvent::PlannerFailed { .. }
            | RunEvent::ReviewFailed { .. }
            | RunEvent::IsolationFailed { .. }
            | RunEvent::StepFailed { .. } => Some("31"),
            RunEvent::ReviewRejected { .. }
            | RunEvent::ChangeConflicted { .. }
            | RunEvent::ChangeRefused { .. }
            | RunEvent::ResultInvalid { .. }
            | RunEvent::StepRetry { .. }
            | RunEvent::StepUnreviewed { .. }
            | RunEvent::StepSkipped { .. }
            | RunEvent::StepInterrupted { .. }
            | RunEvent::Replanning { .. }
            | RunEvent::Interrupted { .. }
            | RunEvent::LimitReached { .. }
            | RunEvent::LlmRetry { .. }
            | RunEvent::LlmWait { .. } => Some("33"),
            RunEvent::WorkerFinished { status, .. } if *status != AgentStatus::Completed => {
                Some("31")
            }
            _ => None,
        }
    }

    /// The retry of a model request of `agent`, or its wait.
    pub fn delay(agent: &str, delay: &crate::llm::Delay) -> Self {
        let seconds =
            |wait: std::time::Duration| crate::protocol::round_seconds(wait.as_secs_f64());
        match delay {
            crate::llm::Delay::Retry(retry) => RunEvent::LlmRetry {
                agent: agent.to_string(),
                attempt: retry.attempt + 1,
                of: retry.of,
                reason: retry.reason.clone(),
                wait_seconds: seconds(retry.wait),
            },
            crate::llm::Delay::Wait(wait) => RunEvent::LlmWait {
                agent: agent.to_string(),
                reason: wait.reason.clone(),
                wait_seconds: wait.wait.map(seconds),
            },
        }
    }

    /// The line a person reads on stderr, or `None` for events shown some
    /// other way (the plan tree, the summary table).
    pub fn human_line(&self) -> Option<String> {
        let line = match self {
            RunEvent::RunStarted {
                run_id,
                workspace,
                run_dir,
                ..
            } => format!("run {run_id}: results in {workspace}/{run_dir}"),
            RunEvent::PlanReady { .. } | RunEvent::RunFinished { .. } => return None,
            RunEvent::LlmRetry {
                agent,
                attempt,
                of,
                reason,
                wait_seconds,
            } => format!(
                "agent {agent} | model: {reason}, retrying in {wait_seconds:.1} s ({attempt} of {of})"
            ),
            RunEvent::LlmWait {
                agent,
                reason,
                wait_seconds: Some(wait),
            } => format!("agent {agent} | model: waiting {wait:.1} s for {reason}"),
            RunEvent::LlmWait {
                agent,
                reason,
                wait_seconds: None,
            } => format!("agent {agent} | model: waiting for {reason}"),
            RunEvent::PlannerFailed { reason, .. } => format!("no plan: {reason}"),
            RunEvent::PlanInvalid { reason, saved, .. } => {
                format!("the plan is invalid: {reason} (the planner's answer is in {saved})")
            }
            RunEvent::StepStarted { step, attempt, .. } => {
                format!("{step}  started (attempt {attempt})")
            }
            RunEvent::WorkerFinished {
                step,
                attempt,
                status,
                summary,
                error,
                seconds,
            } => {
                let said = error.as_deref().unwrap_or(summary);
                format!(
                    "{step}  worker {attempt} {status} in {seconds:.1} s: {}",
                    excerpt(said, 120)
                )
            }
            RunEvent::ClaimsChecked {
                step,
                missing,
                changing_calls,
                suspicious,
                ..
            } => {
                if !suspicious {
                    return None;
                }
                let mut why = Vec::new();
                if *changing_calls == 0 {
                    why.push("claims success without changing anything".to_string());
                }
                if !missing.is_empty() {
                    why.push(format!("lists missing files: {}", missing.join(", ")));
                }
                format!("{step}  claims check: the worker {}", why.join("; "))
            }
            RunEvent::ReviewStarted { step, review, .. } => {
                if *review == 1 {
                    format!("{step}  reviewing")
                } else {
                    format!("{step}  reviewing again")
                }
            }
            RunEvent::ReviewApproved {
                step,
                summary,
                seconds,
                ..
            } => {
                format!(
                    "{step}  approved in {seconds:.1} s: {}",
                    excerpt(summary, 120)
                )
            }
            RunEvent::ReviewRejected {
                step,
                issues,
                summary,
                ..
            } => {
                let first = issues.first().unwrap_or(summary);
                format!("{step}  rejected: {}", excerpt(first, 160))
            }
            RunEvent::ReviewFailed {
                step,
                review,
                reason,
                ..
            } => {
                let next = if *review == 1 {
                    "trying once more"
                } else {
                    "giving up"
                };
                format!("{step}  review failed ({next}): {}", excerpt(reason, 160))
            }
            RunEvent::StepRetry {
                step,
                attempt,
                sent_back_by,
            } => {
                format!(
                    "{step}  retry: attempt {attempt} with {}",
                    sent_back_by.whose()
                )
            }
            RunEvent::StepCompleted {
                step,
                attempts,
                seconds,
            } => {
                let tries = crate::text::count(*attempts, "attempt");
                format!("{step}  completed after {tries} ({seconds:.1} s)")
            }
            RunEvent::StepFailed {
                step,
                reason,
                seconds,
                ..
            } => {
                format!(
                    "{step}  failed after {seconds:.1} s: {}",
                    excerpt(reason, 160)
                )
            }
            RunEvent::StepUnreviewed {
                step,
                accepted,
                reason,
                ..
            } => {
                let verdict = if *accepted {
                    "accepted unreviewed"
                } else {
                    "unreviewed, so failed"
                };
                format!("{step}  {verdict}: {}", excerpt(reason, 160))
            }
            RunEvent::StepSkipped { step, reason } => format!("{step}  skipped: {reason}"),
            RunEvent::Isolation {
                mode,
                branch,
                repository,
                note,
            } => match (branch, repository) {
                (Some(branch), Some(repository)) => format!(
                    "isolation: worktree (each step attempt in a checkout of its own; the result is branch {branch} in {repository})"
                ),
                _ => {
                    let note = note
                        .as_deref()
                        .map(|n| format!(" ({n})"))
                        .unwrap_or_default();
                    format!("isolation: {}{note}", mode.as_str())
                }
            },
            RunEvent::IsolationFailed { reason } => format!("cannot isolate the workers: {reason}"),
            RunEvent::ChangeRecorded {
                step,
                files,
                commit,
                ..
            } => match commit {
                Some(_) => format!("{step}  changed {}", crate::text::count(*files, "file")),
                None => format!("{step}  changed nothing in its checkout"),
            },
            RunEvent::ChangeLanded { step, head, .. } => {
                let short: String = head.chars().take(10).collect();
                format!("{step}  landed ({short})")
            }
            RunEvent::ResultInvalid { step, errors, .. } => format!(
                "{step}  result does not match its output_schema: {}",
                crate::text::excerpt(&errors.join("; "), 300)
            ),
            RunEvent::ChangeRefused { step, reasons, .. } => format!(
                "{step}  change not landed: {}",
                crate::text::excerpt(&reasons.join("; "), 300)
            ),
            RunEvent::ChangeConflicted { step, paths, .. } => format!(
                "{step}  conflicts with what landed meanwhile in {}; the next attempt starts from the new state",
                paths.join(", ")
            ),
            RunEvent::StepInterrupted { step, reason, .. } => {
                format!("{step}  interrupted: {reason}")
            }
            RunEvent::Applied { branch, apply } => match apply.state {
                crate::record::ApplyState::Applied => format!(
                    "applied branch {branch} to the workspace: {} written ({} new), {} removed{}",
                    apply.written.len(),
                    apply.added.len(),
                    apply.removed.len(),
                    match apply.conflicted.is_empty() {
                        true => String::new(),
                        false => format!(", conflict markers in {}", apply.conflicted.join(", ")),
                    }
                ),
                _ => format!(
                    "not applied: {}",
                    apply
                        .reason
                        .as_deref()
                        .unwrap_or("another troupe holds the workspace")
                ),
            },
            RunEvent::RunResumed { run_id, steps } => {
                format!(
                    "resuming {run_id}: {} to run again ({})",
                    steps.len(),
                    steps.join(", ")
                )
            }
            RunEvent::Replanning { round, reason } => {
                format!("replanning (round {round}): {reason}")
            }
            RunEvent::StepsReplaced { round, steps } => {
                format!("replan {round} replaces {}", steps.join(", "))
            }
            RunEvent::LimitReached { reason, .. } => format!("limit reached: {reason}"),
            RunEvent::Interrupted { reason } => format!("{reason}: stopping every agent"),
        };
        Some(line)
    }
}

/// An attempt sent back, for the next one to answer: why, and by whom.
#[derive(Debug, Clone)]
pub struct SentBack {
    pub verdict: VerdictReport,
    pub by: SentBackBy,
}

/// Who sent an attempt back, which its retry's brief names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SentBackBy {
    /// The step's reviewer rejected it.
    Reviewer,
    /// troupe did: its `result` did not match the step's `output_schema`,
    /// before any review.
    Schema,
    /// troupe could not land its approved change (a conflict, or a path
    /// it refuses).
    Landing,
}

impl SentBackBy {
    /// Whose feedback a retry answers, for its progress line.
    pub fn whose(self) -> &'static str {
        match self {
            SentBackBy::Reviewer => "the reviewer's feedback",
            SentBackBy::Schema => "the output_schema's errors",
            SentBackBy::Landing => "why troupe could not land it",
        }
    }
}
