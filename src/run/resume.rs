//! `troupe run --resume RUN`: a run's records read back, checked against
//! its plan, and every step that did not complete set to run again.
//! Completed steps stay, with their results, which feed their dependents
//! as before; earlier attempts stay in the record and new ones are
//! numbered after them, but for one a stop cut short before its verdict,
//! which is done again under its own number (`cut_short`). A run that a troupe is still running is not
//! picked up twice: the run holds its directory while it lives.

use std::path::{Path, PathBuf};

use crate::fsutil::dir_lock::{DirLock, LockError};
use crate::plan::{Plan, parse_plan};
use crate::protocol::AgentStatus;
use crate::record::{IsolationMode, RunRecord, RunStatus, StepRecord, StepStatus};

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
/// line, which must be the run's own; `isolation` the mode asked for, which
/// must be the run's own unless it is `auto`.
pub fn load(
    run_dir: &Path,
    plan_file: Option<&Plan>,
    accept_unreviewed: bool,
    isolation: IsolationMode,
) -> Result<Resumed, ResumeError> {
    let fail = |reason: String| ResumeError {
        dir: run_dir.display().to_string(),
        reason,
    };
    let text = crate::fsutil::read_record(&run_dir.join("run.json"))
        .map_err(|e| fail(format!("cannot read run.json: {e}")))?;
    let mut record: RunRecord =
        serde_json::from_str(&text).map_err(|e| fail(format!("run.json is not valid: {e}")))?;
    // A run that ended before its plan reached run.json is planned again,
    // from the plan.json it wrote first if it got that far.
    let planned = !record.steps.is_empty();
    let written = match crate::fsutil::read_record(&run_dir.join("plan.json")) {
        Ok(text) => Some(
            parse_plan(&text)
                .map_err(|e| fail(format!("its plan.json is no longer valid: {e}")))?,
        ),
        Err(e) if planned => return Err(fail(format!("cannot read plan.json: {e}"))),
        Err(_) => None,
    };
    if planned
        && written
            .as_ref()
            .is_some_and(|plan| !same_steps(plan, &record))
    {
        return Err(fail(
            "its plan.json changed since the run started; resuming would mix two plans. Start a new run with --plan".to_string(),
        ));
    }
    if let (Some(written), Some(given)) = (&written, plan_file)
        && written.steps != given.steps
    {
        return Err(fail(
            "the plan given with --plan is not this run's plan; start a new run with it instead"
                .to_string(),
        ));
    }
    if !planned {
        let plan = written.or_else(|| plan_file.cloned());
        return Ok(Resumed::Unplanned { record, plan });
    }
    if let Some(ran) = isolation_of(&record)
        && isolation != IsolationMode::Auto
        && isolation != ran
    {
        return Err(fail(format!(
            "its workers ran with --isolation {}; a resume goes on the same way (leave --isolation out, or give {})",
            ran.as_str(),
            ran.as_str()
        )));
    }
    let mut repairs = super::replay::replay(&mut record, run_dir, accept_unreviewed);
    let mut again = Vec::new();
    for step in &mut record.steps {
        if !step.is_settled(accept_unreviewed) {
            let stopped = matches!(
                step.status,
                StepStatus::Interrupted | StepStatus::Running | StepStatus::Reviewing
            );
            close_cut_off(step);
            if stopped {
                let step_dir = run_dir.join(&step.id);
                let redo = super::cut_short::redo_last(step, &step_dir).map_err(|e| {
                    fail(format!(
                        "cannot set aside what {}'s cut attempt left in {}: {e}",
                        step.id,
                        step_dir.display()
                    ))
                })?;
                repairs.extend(redo);
            }
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
    Ok(Resumed::Going {
        record,
        again,
        repairs,
    })
}

/// A run read back for its resume.
pub enum Resumed {
    /// Planned: these steps run again, after the repairs said.
    Going {
        record: RunRecord,
        again: Vec<String>,
        repairs: Vec<String>,
    },
    /// Stopped while it planned: it plans again, or takes this plan.
    Unplanned {
        record: RunRecord,
        plan: Option<Plan>,
    },
}

/// How the run's workers shared the workspace, as far as its record says:
/// its isolation record, or the mode it chose, or, in a record older than
/// that field, shared when any step already made an attempt. `None`: not
/// chosen yet, for the resume to choose.
pub fn isolation_of(record: &RunRecord) -> Option<IsolationMode> {
    if record.isolation.is_some() {
        return Some(IsolationMode::Worktree);
    }
    record.isolation_mode.or_else(|| {
        record
            .steps
            .iter()
            .any(|s| !s.attempts.is_empty())
            .then_some(IsolationMode::Shared)
    })
}

/// What is said of an agent whose end troupe never recorded.
const CUT_OFF: &str = "troupe ended before this agent did (it was killed, or its machine went down); the step runs again";

/// The agents of `step` that a troupe killed without a word left running
/// in the record: ended, saying so. (Attempts on disk that the record
/// does not name are `reconcile`'s.)
fn close_cut_off(step: &mut StepRecord) {
    for attempt in &mut step.attempts {
        let agents = attempt.worker.iter_mut().chain(attempt.reviews.iter_mut());
        for agent in agents.filter(|a| a.status == AgentStatus::Running) {
            agent.status = AgentStatus::Error;
            agent.error = Some(CUT_OFF.to_string());
        }
    }
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
                && r.output_schema == p.output_schema
                && r.powers == p.powers
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Step;

    /// A run killed while step `a`'s first attempt was under review:
    /// run.json has its worker and reviewer running.
    #[test]
    fn a_killed_runs_agents_left_running_are_closed() {
        let ws = tempfile::tempdir().unwrap();
        let run_dir = ws.path().join("sub_agent_results/run_x");
        std::fs::create_dir_all(run_dir.join("a/worker-1")).unwrap();
        let plan = Plan {
            summary: "p".to_string(),
            steps: vec![Step {
                id: "a".to_string(),
                description: "do a".to_string(),
                kind: "FILE_WRITE".to_string(),
                dependencies: Vec::new(),
                output_schema: None,
                powers: None,
            }],
        };
        let team = crate::run::tests::settings();
        let mut record = crate::run::fresh_record(ws.path(), &team, "run_x", "g", &run_dir);
        record.status = RunStatus::Running;
        let mut step = StepRecord::new(&plan.steps[0], 0);
        step.status = StepStatus::Running;
        let slot = step.attempt_mut(1);
        let running = |dir: &str| {
            crate::record::AgentRecord::running(format!("sub_agent_results/run_x/a/{dir}"))
        };
        slot.worker = Some(running("worker-1"));
        slot.reviews.push(running("review-1"));
        record.steps.push(step);
        crate::fsutil::write_json_atomic(
            &run_dir.join("run.json"),
            &record,
            crate::fsutil::Durability::Atomic,
        )
        .unwrap();
        crate::fsutil::write_json_atomic(
            &run_dir.join("plan.json"),
            &plan,
            crate::fsutil::Durability::Atomic,
        )
        .unwrap();

        let Resumed::Going { record, again, .. } =
            load(&run_dir, None, false, IsolationMode::Auto).unwrap()
        else {
            panic!("a planned run goes on");
        };
        assert_eq!(again, ["a"]);
        let first = &record.step("a").unwrap().attempts[0];
        for agent in first.worker.iter().chain(&first.reviews) {
            assert_eq!(agent.status, AgentStatus::Error, "{agent:?}");
            assert!(agent.error.as_deref().is_some_and(|e| e.contains("killed")));
        }
    }
}
