//! `run.json`: the state of one team run, kept current while it runs.
//!
//! Every step with its status, every attempt with the directories of its
//! worker and reviews, verdicts, timings and tokens. Only the recorder
//! writes it, atomically: at once at a commit point (see
//! `fsutil::durability`), and at most every 50 ms between.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{AgentTimings, ChangeRecord, Claims, IsolationMode, IsolationRecord};
use crate::chat::Usage;
use crate::plan::Step;
use crate::protocol::{AgentStats, AgentStatus, SandboxReport, VerdictReport};
use crate::timefmt::{rfc3339, rfc3339_opt};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    Pending,
    /// Its worker is at work.
    Running,
    /// Its worker finished; a reviewer is checking.
    Reviewing,
    /// Approved by a reviewer.
    Completed,
    Failed,
    /// Not run: something it depends on did not complete, or the run
    /// stopped first.
    Skipped,
    /// The review itself failed twice; fails the step unless the run
    /// accepts unreviewed steps.
    Unreviewed,
    /// Dropped by a replan, which planned the rest of the work anew.
    Replaced,
    /// Stopped by Ctrl-C or SIGTERM on troupe; `--resume` runs it again.
    Interrupted,
}

impl StepStatus {
    pub const ALL: [StepStatus; 9] = [
        StepStatus::Pending,
        StepStatus::Running,
        StepStatus::Reviewing,
        StepStatus::Completed,
        StepStatus::Failed,
        StepStatus::Skipped,
        StepStatus::Unreviewed,
        StepStatus::Replaced,
        StepStatus::Interrupted,
    ];

    /// Failed, or unreviewed: what a replan is told about and what skips
    /// dependents.
    pub fn is_failure(self) -> bool {
        matches!(self, StepStatus::Failed | StepStatus::Unreviewed)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Pending => "pending",
            StepStatus::Running => "running",
            StepStatus::Reviewing => "reviewing",
            StepStatus::Completed => "completed",
            StepStatus::Failed => "failed",
            StepStatus::Skipped => "skipped",
            StepStatus::Unreviewed => "unreviewed",
            StepStatus::Replaced => "replaced",
            StepStatus::Interrupted => "interrupted",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Planning,
    Running,
    /// Every step completed and approved (or accepted unreviewed).
    Completed,
    /// Some step failed or was skipped, a limit was reached, or the plan
    /// was invalid.
    Failed,
    DeadlineExceeded,
    /// A run-wide budget (`--max-tokens`, `--max-cost`, `--max-agents`)
    /// kept steps from starting; `troupe run --resume` continues it.
    LimitReached,
    /// Stopped by Ctrl-C or SIGTERM; `troupe run --resume` continues it.
    Interrupted,
}

impl RunStatus {
    /// Planning or running: what the record says while a troupe runs it,
    /// and what a killed one leaves behind.
    pub fn is_under_way(self) -> bool {
        matches!(self, RunStatus::Planning | RunStatus::Running)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Planning => "planning",
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::DeadlineExceeded => "deadline_exceeded",
            RunStatus::LimitReached => "limit_reached",
            RunStatus::Interrupted => "interrupted",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: String,
    pub goal: String,
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub workspace: String,
    pub run_dir: String,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "rfc3339")]
    pub updated_at: DateTime<Utc>,
    #[serde(default, with = "rfc3339_opt")]
    pub completed_at: Option<DateTime<Utc>>,
    pub plan_summary: String,
    pub replans: u32,
    pub steps: Vec<StepRecord>,
    pub totals: Totals,
    pub settings: serde_json::Value,
    /// With `--isolation worktree`: the repository, the integration branch
    /// and the snapshot it started from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<IsolationRecord>,
    /// How the run's workers share the workspace, once chosen (`shared`
    /// or `worktree`); a resume keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation_mode: Option<IsolationMode>,
    /// Each role's model settings, as the variables that give them
    /// (`TROUPE_WORKER_MODEL`, `TROUPE_WORKER_BASE_URL`, ...; never a
    /// key, only the name of the variable holding one), so that a resume
    /// that names no model goes on with the run's own.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub models: std::collections::BTreeMap<String, String>,
    /// The OpenTelemetry trace the run's spans are in (32 hex digits),
    /// when it was exported; a resume goes on in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The result brought into the workspace, for a run in checkouts that
    /// applies it: `pending` from the moment the run chose checkouts until
    /// troupe applied it or could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply: Option<ApplyRecord>,
}

/// Where a run's apply stands, and what it wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplyRecord {
    pub state: ApplyState,
    /// Paths written with the run's version (those the run made among
    /// them in `added`), removed, and merged into the user's versions
    /// (with conflict markers in `conflicted`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub written: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub added: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicted: Vec<String>,
    /// Why it was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApplyState {
    /// Wanted, not done yet: `troupe run --resume` or `troupe apply`
    /// does it.
    #[default]
    Pending,
    Applied,
    /// Not done, for `reason`; `troupe apply` does it once that is dealt
    /// with.
    Refused,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepRecord {
    pub id: String,
    pub description: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub dependencies: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub powers: Option<crate::plan::powers::Powers>,
    /// What the step returned: its approved worker's `result`, checked
    /// against `output_schema`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// 0 for the first plan, n for the n-th replan.
    pub round: u32,
    pub status: StepStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub attempts: Vec<AttemptRecord>,
    #[serde(default, with = "rfc3339_opt")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default, with = "rfc3339_opt")]
    pub completed_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub duration_seconds: Option<f64>,
    pub stats: StepStats,
}

impl StepRecord {
    pub fn new(step: &Step, round: u32) -> Self {
        StepRecord {
            id: step.id.clone(),
            description: step.description.clone(),
            kind: step.kind.clone(),
            dependencies: step.dependencies.clone(),
            output_schema: step.output_schema.clone(),
            powers: step.powers.clone(),
            result: None,
            round,
            status: StepStatus::Pending,
            reason: None,
            attempts: Vec::new(),
            started_at: None,
            completed_at: None,
            duration_seconds: None,
            stats: StepStats::default(),
        }
    }

    /// The attempt with this number, created when new.
    pub fn attempt_mut(&mut self, attempt: u32) -> &mut AttemptRecord {
        let index = self.attempts.iter().position(|a| a.attempt == attempt);
        match index {
            Some(i) => &mut self.attempts[i],
            None => {
                self.attempts.push(AttemptRecord {
                    attempt,
                    worker: None,
                    claims: None,
                    change: None,
                    result_errors: Vec::new(),
                    reviews: Vec::new(),
                    cut_short: Vec::new(),
                });
                let last = self.attempts.len() - 1;
                &mut self.attempts[last]
            }
        }
    }

    /// The number of the step's next attempt: that of an attempt emptied
    /// for its redo (`run::cut_short`), or one past the last.
    pub fn next_attempt(&self) -> u32 {
        match self.attempts.iter().max_by_key(|a| a.attempt) {
            Some(last) if last.worker.is_none() => last.attempt,
            Some(last) => last.attempt.saturating_add(1),
            None => 1,
        }
    }

    /// The plan step this record was made from.
    pub fn step(&self) -> Step {
        Step {
            id: self.id.clone(),
            description: self.description.clone(),
            kind: self.kind.clone(),
            dependencies: self.dependencies.clone(),
            output_schema: self.output_schema.clone(),
            powers: self.powers.clone(),
        }
    }

    /// The result of a step that returns one and is done: its last
    /// worker's, if it matches the step's output_schema (checked here
    /// again: a resume reads it back from the worker's directory). None for
    /// a step without a schema, whatever a worker sent.
    pub fn checked_result(&self) -> Option<serde_json::Value> {
        let done = matches!(self.status, StepStatus::Completed | StepStatus::Unreviewed);
        let schema = self.output_schema.as_ref().filter(|_| done)?;
        self.attempts
            .last()
            .and_then(|a| a.worker.as_ref())
            .and_then(|w| w.result.clone())
            .filter(|result| crate::plan::output::result_errors(schema, Some(result)).is_empty())
    }

    /// Completed, or accepted without a review.
    pub fn is_done(&self, accept_unreviewed: bool) -> bool {
        self.status == StepStatus::Completed
            || (accept_unreviewed && self.status == StepStatus::Unreviewed)
    }

    /// Done, or replaced by a replan: nothing left to do for it.
    pub fn is_settled(&self, accept_unreviewed: bool) -> bool {
        self.is_done(accept_unreviewed) || self.status == StepStatus::Replaced
    }

    /// The last approved (or accepted) worker's report, for dependents.
    pub fn delivered(&self) -> Option<&AgentRecord> {
        self.attempts.last().and_then(|a| a.worker.as_ref())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttemptRecord {
    pub attempt: u32,
    pub worker: Option<AgentRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claims: Option<Claims>,
    /// With `--isolation worktree`: what the attempt changed, and whether
    /// it landed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<ChangeRecord>,
    /// Why its worker's result does not match the step's output_schema:
    /// the attempt went back to the worker without a review.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub result_errors: Vec<String>,
    pub reviews: Vec<AgentRecord>,
    /// The agents of an earlier try of this attempt that the run's stop or
    /// a kill cut short before its verdict; the resume did the attempt
    /// again, and set their directories aside (`worker-2.cut-1`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cut_short: Vec<AgentRecord>,
}

/// One worker or reviewer of a step.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentRecord {
    /// Its directory, relative to the workspace.
    pub dir: String,
    pub status: AgentStatus,
    pub summary: String,
    #[serde(default)]
    pub deliverables_files: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<VerdictReport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub stats: AgentStats,
    /// A worker's `finish_task` said it succeeded.
    #[serde(default)]
    pub success_claimed: bool,
    /// Successful tool calls that changed the workspace or ran something.
    #[serde(default)]
    pub changing_calls: u32,
    /// Where troupe's own time went (milliseconds).
    #[serde(default)]
    pub timings: AgentTimings,
    /// A worker's typed result, as it gave it (checked by the step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
}

impl AgentRecord {
    /// An agent troupe could not run, for `why`.
    pub fn not_run(dir: String, why: &dyn std::fmt::Display) -> Self {
        AgentRecord {
            status: AgentStatus::Error,
            error: Some(why.to_string()),
            ..AgentRecord::running(dir)
        }
    }

    /// An agent that has just started in `dir`.
    pub fn running(dir: String) -> Self {
        AgentRecord {
            dir,
            status: AgentStatus::Running,
            summary: String::new(),
            deliverables_files: Vec::new(),
            verdict: None,
            error: None,
            stats: AgentStats::default(),
            success_claimed: false,
            changing_calls: 0,
            timings: AgentTimings::default(),
            result: None,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StepStats {
    pub agents: u32,
    pub runtime_seconds: f64,
    pub token_usage: Usage,
}

impl StepStats {
    pub fn add(&mut self, stats: &AgentStats) {
        self.agents += 1;
        self.runtime_seconds =
            crate::protocol::round_seconds(self.runtime_seconds + stats.runtime_seconds);
        self.token_usage.add(stats.token_usage);
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Totals {
    pub steps: usize,
    pub completed: usize,
    pub failed: usize,
    pub skipped: usize,
    pub unreviewed: usize,
    pub replaced: usize,
    pub interrupted: usize,
    pub agents: u32,
    /// Every token of the run, the planner's included.
    pub token_usage: Usage,
    pub runtime_seconds: f64,
    /// The weakest sandbox any agent of the run had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxReport>,
}

impl Totals {
    pub fn note_sandbox(&mut self, report: Option<&SandboxReport>) {
        let Some(report) = report else { return };
        let weaker = self
            .sandbox
            .as_ref()
            .is_none_or(|seen| report.status < seen.status);
        if weaker {
            self.sandbox = Some(report.clone());
        }
    }
}

impl RunRecord {
    /// The run's trace, when it has a well-formed one.
    pub fn trace(&self) -> Option<u128> {
        let hex = self.trace_id.as_deref()?;
        let valid = hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit());
        u128::from_str_radix(hex, 16)
            .ok()
            .filter(|id| valid && *id != 0)
    }

    /// The command that picks this run up again, as a person can paste it
    /// from anywhere: the run's id and its workspace. The model flags it
    /// was run with are the user's to give again.
    pub fn resume_command(&self) -> String {
        let quoted = |word: &str| {
            shlex::try_quote(word).map_or_else(|_| word.to_string(), |q| q.into_owned())
        };
        format!(
            "troupe run --resume {} --workspace {}",
            quoted(&self.run_id),
            quoted(&self.workspace)
        )
    }

    /// The run's plan as it stands: its steps that no replan replaced.
    pub fn live_plan(&self) -> crate::plan::Plan {
        crate::plan::Plan {
            summary: self.plan_summary.clone(),
            steps: self
                .steps
                .iter()
                .filter(|s| s.status != StepStatus::Replaced)
                .map(StepRecord::step)
                .collect(),
        }
    }

    pub fn step(&self, id: &str) -> Option<&StepRecord> {
        self.steps.iter().find(|s| s.id == id)
    }

    pub fn step_mut(&mut self, id: &str) -> Option<&mut StepRecord> {
        self.steps.iter_mut().find(|s| s.id == id)
    }

    /// The step counts, from the steps themselves.
    pub fn recount(&mut self) {
        let count = |status| self.steps.iter().filter(|s| s.status == status).count();
        let totals = Totals {
            steps: self
                .steps
                .iter()
                .filter(|s| s.status != StepStatus::Replaced)
                .count(),
            completed: count(StepStatus::Completed),
            failed: count(StepStatus::Failed),
            skipped: count(StepStatus::Skipped),
            unreviewed: count(StepStatus::Unreviewed),
            replaced: count(StepStatus::Replaced),
            interrupted: count(StepStatus::Interrupted),
            ..self.totals.clone()
        };
        self.totals = totals;
    }
}
