//! Reading what troupe left behind, for people: `troupe show` (an agent's
//! transcript, a run, a step), the DAG as Graphviz or Mermaid, and `troupe
//! report`'s self-contained HTML page, each telling a run that nobody
//! runs any more as `died` (`seen`). Everything here reads files and
//! renders text; nothing runs, and nothing is written.

pub mod conversation;
pub mod graph;
pub mod html;
mod html_messages;
pub mod run;
pub mod runs;
pub mod seen;

use std::path::{Path, PathBuf};

use crate::fsutil::is_regular;
use crate::protocol::AgentStatus;
use crate::protocol::SUBAGENT_DIR;
use crate::record::{RunRecord, RunStatus, StepStatus};
use crate::supervisor::registry;

/// How a status reads at a glance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Done,
    Underway,
    Wrong,
}

impl Tone {
    /// Done, else under way, else wrong.
    fn of(done: bool, underway: bool) -> Tone {
        match (done, underway) {
            (true, _) => Tone::Done,
            (false, true) => Tone::Underway,
            (false, false) => Tone::Wrong,
        }
    }
}

/// A status as a person reads it: its word, and its tone.
pub trait Shown {
    fn word(&self) -> &'static str;
    fn tone(&self) -> Tone;
}

impl Shown for AgentStatus {
    fn word(&self) -> &'static str {
        self.as_str()
    }

    fn tone(&self) -> Tone {
        Tone::of(
            *self == AgentStatus::Completed,
            *self == AgentStatus::Running,
        )
    }
}

impl Shown for StepStatus {
    fn word(&self) -> &'static str {
        self.as_str()
    }

    fn tone(&self) -> Tone {
        let underway = [
            StepStatus::Pending,
            StepStatus::Running,
            StepStatus::Reviewing,
        ];
        Tone::of(*self == StepStatus::Completed, underway.contains(self))
    }
}

impl Shown for RunStatus {
    fn tone(&self) -> Tone {
        Tone::of(*self == RunStatus::Completed, self.is_under_way())
    }

    fn word(&self) -> &'static str {
        self.as_str()
    }
}

/// What a name given to `show` or `report` points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// An agent's directory (its `.subagent/` holds the transcript).
    Agent(PathBuf),
    /// A run's directory.
    Run(PathBuf),
    /// One step of a run.
    Step { run: PathBuf, step: String },
}

/// Finds `name` in `results`: `agent_3` or `3`, a run id, `RUN/STEP`,
/// `RUN/STEP/worker-1`, or a path to any of these. A path the user typed is
/// taken as it resolves; inside the results directory no link is followed.
pub fn resolve(results: &Path, name: &str) -> Result<Target, String> {
    let expanded = runs::expand_last(results, name.trim_end_matches('/'))?;
    let name = expanded.as_str();
    let typed = Path::new(name).canonicalize().ok();
    for base in typed.into_iter().chain([results.join(name)]) {
        if is_regular(&base.join("run.json")) {
            return Ok(Target::Run(base));
        }
        if crate::transcript::exists(&base.join(SUBAGENT_DIR).join("conversations.json")) {
            return Ok(Target::Agent(base));
        }
    }
    let id = name.strip_prefix("agent_").unwrap_or(name);
    let dir = registry::agent_dir(results, id);
    let records = dir.join(SUBAGENT_DIR);
    // A task file is enough: an agent whose transcript is a moment away.
    if crate::transcript::exists(&records.join("conversations.json"))
        || is_regular(&records.join("task.json"))
    {
        return Ok(Target::Agent(dir));
    }
    if let Some((run, step)) = name.split_once('/') {
        let run_dir = results.join(run);
        if is_regular(&run_dir.join("run.json")) {
            return Ok(Target::Step {
                run: run_dir,
                step: step.to_string(),
            });
        }
    }
    let close = runs::close_matches(results, name.split('/').next().unwrap_or(name));
    let hint = match close.as_slice() {
        [] => String::new(),
        names => format!(" (did you mean {}?)", names.join(", ")),
    };
    Err(format!(
        "nothing named `{name}` in {}{hint}: give an agent (agent_1 or 1), a run id, `last`, RUN/STEP, or a directory; `troupe runs` and `troupe status` list them",
        results.display()
    ))
}

pub fn load_run(dir: &Path) -> Result<RunRecord, String> {
    crate::fsutil::read_json(&dir.join("run.json"), "the run record").map_err(|e| e.to_string())
}
