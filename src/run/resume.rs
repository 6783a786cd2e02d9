//! `troupe run --resume RUN`: a run's records read back, checked against
//! its plan, and every step that did not complete set to run again.
//! Completed steps stay, with their results, which feed their dependents
//! as before; earlier attempts stay in the record and new ones are
//! numbered after them. A run that a troupe is still running is not
//! picked up twice: the run holds its directory while it lives.

use std::path::{Path, PathBuf};

use crate::fsutil::dir_lock::{DirLock, LockError};
use crate::plan::{Plan, parse_plan};
use crate::record::{RunRecord, RunStatus, StepStatus};

/// Why a run cannot be resumed: the user's to fix.
#[derive(Debug, thiserror::Error)]
#[error("cannot resume {dir}: {reason}")]
pub struct ResumeError {
    pub dir: String,
    pub reason: String,
}

/// The run directory `run` names: a path to one (relative to the current
/// directory), or a run id in the workspace's `sub_agent_results/`. It is
/// returned absolute and real, and must be one of `workspace`'s runs: its
/// agents work there, and their task files name its paths.
pub fn find_run(workspace: &Path, run: &str) -> Result<PathBuf, ResumeError> {
    let results = workspace.join(crate::protocol::RESULTS_DIR);
    let fail = |reason: String| ResumeError {
        dir: run.to_string(),
        reason,
    };
    let typed = Path::new(run).canonicalize().ok();
    let dir = typed
        .into_iter()
        .chain([results.join(run)])
        .find(|dir| crate::fsutil::is_regular(&dir.join("run.json")))
        .ok_or_else(|| {
            fail(format!(
                "no run.json there, nor in {}; give a run id from sub_agent_results/ or a run directory",
                results.display()
            ))
        })?;
    if dir.parent() != Some(results.as_path()) {
        return Err(fail(format!(
            "{} is not a run of the workspace {}; pass that run's workspace with --workspace",
            dir.display(),
            workspace.display()
        )));
    }
    Ok(dir)
}

/// The run's directory, held for the resumed run's life; refused, naming
/// the holder's pid, while another troupe runs it.
pub fn hold(run_dir: &Path) -> Result<DirLock, ResumeError> {
    let fail = |reason: String| ResumeError {
        dir: run_dir.display().to_string(),
        reason,
    };
    let run = run_dir.file_name().map_or_else(
        || run_dir.display().to_string(),
        |id| id.to_string_lossy().into_owned(),
    );
    DirLock::take(run_dir).map_err(|e| match e {
        LockError::Held { pid: Some(pid) } => fail(format!(
            "troupe (pid {pid}) is running it now; follow it with `troupe show {run} --follow`, or stop it (Ctrl-C there, or kill -INT {pid}) and resume it then"
        )),
        LockError::Held { pid: None } => fail(format!(
            "another troupe is running it now; follow it with `troupe show {run} --follow`, or stop that one first"
        )),
        LockError::Io(e) => fail(format!("cannot hold its directory: {e}")),
    })
}

/// The run's record, ready to go on: the plan checked, the steps that did
/// not complete pending again. `plan_file` is a plan given on the command
/// line, which must be the run's own.
pub fn load(
    run_dir: &Path,
    plan_file: Option<&Plan>,
    accept_unreviewed: bool,
) -> Result<(RunRecord, Vec<String>), ResumeError> {
    let fail = |reason: String| ResumeError {
        dir: run_dir.display().to_string(),
        reason,
    };
    let text = crate::fsutil::read_record(&run_dir.join("run.json"))
        .map_err(|e| fail(format!("cannot read run.json: {e}")))?;
    let mut record: RunRecord =
        serde_json::from_str(&text).map_err(|e| fail(format!("run.json is not valid: {e}")))?;
    let plan_text = crate::fsutil::read_record(&run_dir.join("plan.json"))
        .map_err(|e| fail(format!("cannot read plan.json: {e}")))?;
    let plan = parse_plan(&plan_text)
        .map_err(|e| fail(format!("its plan.json is no longer valid: {e}")))?;
    if !same_steps(&plan, &record) {
        return Err(fail(
            "its plan.json changed since the run started; resuming would mix two plans. Start a new run with --plan".to_string(),
        ));
    }
    if let Some(given) = plan_file
        && given.steps != plan.steps
    {
        return Err(fail(
            "the plan given with --plan is not this run's plan; start a new run with it instead"
                .to_string(),
        ));
    }
    let mut again = Vec::new();
    for step in &mut record.steps {
        if !step.is_settled(accept_unreviewed) {
            step.status = StepStatus::Pending;
            step.reason = None;
            step.started_at = None;
            step.completed_at = None;
            step.duration_seconds = None;
            again.push(step.id.clone());
        }
    }
    record.status = RunStatus::Running;
    record.reason = None;
    record.completed_at = None;
    Ok((record, again))
}

/// Whether the first plan's steps in the record are the plan's.
fn same_steps(plan: &Plan, record: &RunRecord) -> bool {
    let recorded: Vec<_> = record.steps.iter().filter(|s| s.round == 0).collect();
    recorded.len() == plan.steps.len()
        && recorded.iter().zip(&plan.steps).all(|(r, p)| {
            r.id == p.id
                && r.description == p.description
                && r.kind == p.kind
                && r.dependencies == p.dependencies
        })
}

