//! Reading what troupe left behind, for people: `troupe show` (an agent's
//! transcript, a run, a step), the DAG as Graphviz or Mermaid, and `troupe
//! report`'s self-contained HTML page. Everything here reads files and
//! renders text; nothing runs.

pub mod conversation;
pub mod graph;
pub mod html;
pub mod run;

use std::path::{Path, PathBuf};

use crate::protocol::SUBAGENT_DIR;
use crate::supervisor::registry;
use crate::supervisor::team::RunRecord;

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
/// `RUN/STEP/worker-1`, or a path to any of these.
pub fn resolve(results: &Path, name: &str) -> Result<Target, String> {
    let name = name.trim_end_matches('/');
    for base in [PathBuf::from(name), results.join(name)] {
        if base.join("run.json").is_file() {
            return Ok(Target::Run(base));
        }
        if base.join(SUBAGENT_DIR).join("conversations.json").is_file() {
            return Ok(Target::Agent(base));
        }
    }
    let id = name.strip_prefix("agent_").unwrap_or(name);
    let dir = registry::agent_dir(results, id);
    if dir.join(SUBAGENT_DIR).join("conversations.json").is_file() {
        return Ok(Target::Agent(dir));
    }
    if let Some((run, step)) = name.split_once('/') {
        let run_dir = results.join(run);
        if run_dir.join("run.json").is_file() {
            return Ok(Target::Step {
                run: run_dir,
                step: step.to_string(),
            });
        }
    }
    Err(format!(
        "nothing named `{name}` in {}: give an agent (agent_1 or 1), a run id, RUN/STEP, or a directory",
        results.display()
    ))
}

pub fn load_run(dir: &Path) -> Result<RunRecord, String> {
    let path = dir.join("run.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not valid: {e}", path.display()))
}
