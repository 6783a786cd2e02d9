//! What every step of a run shares and none of them changes: the
//! settings, the agent runner, the budget and the stop signal. The run's
//! record is not here: its owner alone holds it (see `owner`).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::budget::Budget;
use super::events::RunEvent;
use super::liveness::Liveness;
use super::recorder::EventLog;
use super::runner::AgentRunner;
use crate::record::IsolationMode;
use crate::run::isolation::{Shared, Workspaces};
use crate::signal::StopSignal;
use crate::supervisor::Progress;
use crate::supervisor::events::{AgentEvent, EventSink};

/// The run's own rules.
#[derive(Debug, Clone, Serialize)]
pub struct TeamSettings {
    pub max_parallel: usize,
    pub max_retries: u32,
    pub max_replans: u32,
    pub accept_unreviewed: bool,
    pub max_agents: u32,
    pub max_tokens: Option<u64>,
    /// Dollars the run may spend (`--max-cost`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_cost: Option<f64>,
    #[serde(serialize_with = "seconds")]
    pub deadline: Option<Duration>,
    /// How workers share the workspace (`--isolation`).
    pub isolation: IsolationMode,
    /// Show every agent's tool calls and model turns on stderr.
    pub verbose: bool,
    /// Bring the result into the workspace at the run's end, when it was
    /// made in checkouts (not `--no-apply`).
    pub apply: bool,
}

fn seconds<S: serde::Serializer>(value: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(d) => s.serialize_u64(d.as_secs()),
        None => s.serialize_none(),
    }
}

pub struct RunContext {
    pub goal: String,
    pub workspace: PathBuf,
    pub run_dir: PathBuf,
    pub team: TeamSettings,
    pub prompts: crate::prompts::Prompts,
    /// Runs each agent of the run.
    pub runner: Box<dyn AgentRunner>,
    pub budget: Budget,
    /// Stops every agent: the deadline, or the first Ctrl-C.
    pub stop: StopSignal,
    /// The largest file an agent may write (`--max-file-size`), and so
    /// the largest troupe takes into a change.
    pub max_file_size: Option<u64>,
    /// The workspace's paths (relative) troupe reads as its own: its
    /// prompts directory or settings file, when they lie there. Read-only
    /// to every agent, and never landed from a change.
    pub guarded: Vec<PathBuf>,
    /// Where the attempts work apart, once the plan showed that is wanted
    /// (`--isolation`); unset, every worker shares the workspace.
    pub isolation: OnceLock<Arc<dyn Workspaces>>,
    /// Which checkouts isolated attempts get.
    pub checkouts: crate::run::isolation::Checkouts,
    /// The workspace, held while the run's workers write it (`shared`):
    /// no other such run, and no apply, writes it meanwhile.
    pub writing: OnceLock<crate::fsutil::dir_lock::DirLock>,
    /// The run's span: its steps' spans are its children.
    pub span: crate::telemetry::Span,
}

impl RunContext {
    /// Holds the workspace for the run's workers to write it, or says who
    /// holds it.
    pub fn hold_workspace(&self) -> Result<(), WorkspaceError> {
        if self.writing.get().is_some() {
            return Ok(());
        }
        let held = crate::fsutil::dir_lock::DirLock::take(&self.workspace).map_err(|e| {
            WorkspaceError::Busy(crate::fsutil::dir_lock::busy(&self.workspace, &e))
        })?;
        let _ = self.writing.set(held);
        Ok(())
    }

    /// Where the run's attempts work.
    pub fn workspaces(&self) -> &dyn Workspaces {
        match self.isolation.get() {
            Some(isolated) => isolated.as_ref(),
            None => &Shared,
        }
    }

    /// A path as the records show it: relative to the workspace.
    pub fn show(&self, path: &std::path::Path) -> String {
        crate::protocol::display_in(&self.workspace, path)
    }

    /// Keeps a Planner answer that was not a valid plan in `planner/`, for
    /// the user to read; a failure to keep it is said and does not stop
    /// the run.
    pub fn save_planner_answer(&self, name: &str, answer: &str) -> PathBuf {
        let dir = self.run_dir.join("planner");
        let path = dir.join(name);
        let saved = crate::fsutil::nofollow::create_dir_all(&dir).and_then(|_| {
            crate::fsutil::write_atomic(&path, answer.as_bytes(), crate::fsutil::Durability::Commit)
        });
        if let Err(e) = saved {
            crate::tell!(
                "troupe: cannot keep the planner's answer in {}: {e}",
                path.display()
            );
        }
        path
    }
}

/// Agent-level progress during a run: every line with `--verbose`,
/// otherwise only warnings, and what the sandbox could not enforce once
/// per run rather than once per agent, so parallel steps stay readable.
/// A retry of a model request, or its wait for a rate limit, is a run
/// event (`llm_retry`, `llm_wait`), with its line; of the waits, only
/// those of a second or more, and one line a reason in `WAIT_LINES_APART`,
/// since fifty agents meet the same limit together.
pub struct AgentLines {
    pub progress: Progress,
    pub verbose: bool,
    pub sandbox_notes: Mutex<HashSet<String>>,
    /// When a wait for each reason was last said.
    waits_said: Mutex<HashMap<String, Instant>>,
    pub log: EventLog,
    /// What each agent does, for the "still running" lines.
    pub liveness: Arc<Liveness>,
}

impl AgentLines {
    pub fn new(verbose: bool, log: EventLog, liveness: Arc<Liveness>) -> Self {
        AgentLines {
            progress: Progress::stderr(),
            verbose,
            sandbox_notes: Mutex::new(HashSet::new()),
            waits_said: Mutex::new(HashMap::new()),
            log,
            liveness,
        }
    }

    /// Whether a wait's line is worth saying now.
    fn worth_saying(&self, wait: &crate::llm::Waiting) -> bool {
        if wait.wait.is_none_or(|wait| wait < Duration::from_secs(1)) {
            return false;
        }
        let Ok(mut said) = self.waits_said.lock() else {
            return true;
        };
        let now = Instant::now();
        let recent = said
            .get(&wait.reason)
            .is_some_and(|at| now.duration_since(*at) < WAIT_LINES_APART);
        if !recent {
            said.insert(wait.reason.clone(), now);
        }
        !recent
    }
}

/// The least time between two lines of waits for the same reason.
const WAIT_LINES_APART: Duration = Duration::from_secs(10);

impl EventSink for AgentLines {
    fn event(&self, agent: &str, event: AgentEvent<'_>) {
        self.liveness.saw(agent, &event);
        if let AgentEvent::ModelDelayed { delay } = &event {
            let said = RunEvent::delay(agent, delay);
            match delay {
                crate::llm::Delay::Wait(wait) if !self.worth_saying(wait) => {
                    self.log.event_unsaid(&said);
                }
                _ => self.log.event(&said),
            }
            return;
        }
        let show = match &event {
            AgentEvent::Warning { .. } | AgentEvent::Compacted { .. } => true,
            AgentEvent::Sandbox { report } => self
                .sandbox_notes
                .lock()
                .is_ok_and(|mut seen| seen.insert(report.note.clone())),
            _ => self.verbose,
        };
        if show {
            self.progress.event(agent, event);
        }
    }
}

/// Why a run cannot have the workspace the way its workers need it.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// Another troupe writes it (a run whose workers share it, or an
    /// apply), as `dir_lock::busy` says.
    #[error("{0}")]
    Busy(String),
    /// `--isolation worktree` was asked for and cannot be had.
    #[error("--isolation worktree: {0}")]
    NoCheckouts(#[from] crate::run::isolation::IsolationError),
}
