//! Replanning, read off the run's record: whether the rest should be
//! replanned (a step failed while under half the steps have completed,
//! with replans left), and what the Planner is told: the failures, and
//! the completed steps with their results. The owner asks the Planner and
//! records the answer.

use std::collections::HashSet;

use crate::record::{RunRecord, StepRecord, StepStatus};

/// Why the rest should be replanned now, if it should.
pub(super) fn replan_reason(run: &RunRecord, max_replans: u32, accept: bool) -> Option<String> {
    if run.replans >= max_replans {
        return None;
    }
    let active: Vec<&StepRecord> = run
        .steps
        .iter()
        .filter(|s| s.status != StepStatus::Replaced)
        .collect();
    let done = active.iter().filter(|s| s.is_done(accept)).count();
    (done * 2 < active.len()).then(|| format!("only {done} of {} steps completed", active.len()))
}

/// What the Planner is given for a replan.
pub(super) struct ReplanInput {
    pub failed: String,
    pub completed: String,
    /// Every step id of the run: a new step may take none of them.
    pub taken: HashSet<String>,
    /// The ids of the steps that are done: new steps may depend on these.
    pub done: HashSet<String>,
}

pub(super) fn replan_input(run: &RunRecord, accept: bool) -> ReplanInput {
    ReplanInput {
        failed: describe_failures(run),
        completed: describe_completed(run, accept),
        taken: run.steps.iter().map(|s| s.id.clone()).collect(),
        done: run
            .steps
            .iter()
            .filter(|s| s.is_done(accept))
            .map(|s| s.id.clone())
            .collect(),
    }
}

/// The steps a replan takes the place of: those that are not done.
pub(super) fn replaced_by_replan(run: &RunRecord, accept: bool) -> Vec<String> {
    run.steps
        .iter()
        .filter(|s| s.status != StepStatus::Replaced && !s.is_done(accept))
        .map(|s| s.id.clone())
        .collect()
}

fn describe_failures(run: &RunRecord) -> String {
    let lines: Vec<String> = run
        .steps
        .iter()
        .filter(|s| s.status.is_failure())
        .map(|s| {
            format!(
                "{} ({}) failed: {}",
                s.id,
                s.description.trim(),
                s.reason.as_deref().unwrap_or("")
            )
        })
        .collect();
    lines.join("; ")
}

fn describe_completed(run: &RunRecord, accept: bool) -> String {
    let lines: Vec<String> = run
        .steps
        .iter()
        .filter(|s| s.is_done(accept))
        .map(|s| {
            let mut line = format!("- {} ({})", s.id, s.description.trim());
            if let Some(report) = s.delivered() {
                line.push_str(&format!(": {}", report.summary.trim()));
                if !report.deliverables_files.is_empty() {
                    line.push_str(&format!(
                        " [files: {}]",
                        report.deliverables_files.join(", ")
                    ));
                }
            }
            line
        })
        .collect();
    if lines.is_empty() {
        "(none)".to_string()
    } else {
        lines.join("\n")
    }
}
