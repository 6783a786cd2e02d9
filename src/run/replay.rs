//! The journal's part of a resume: the steps `events.jsonl` says are done
//! that `run.json` does not. At a commit point the recorder appends the
//! event and flushes it before it writes `run.json`, so a kill between the
//! two leaves the journal one step ahead of the record. Such a step's end
//! is taken from its event, and its worker's record, when `run.json` did
//! not get it either, from the `result.json` troupe sealed when that
//! worker ended; the step is not run again on top of its own work.
//!
//! A step's end is final: no later event undoes a step's completion (a
//! replan replaces only steps that did not complete), so the journal is
//! read whole, with no position to keep in step with the record.

use std::path::Path;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::runner::ended;
use crate::protocol::{AgentStatus, display_in};
use crate::record::{AgentRecord, RunRecord, StepRecord, StepStatus};
use crate::supervisor::result::AgentResult;
use crate::timefmt::rfc3339_opt;

/// The fields of an `events.jsonl` line a step's end is read from.
#[derive(Deserialize)]
struct Line {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    step: Option<String>,
    #[serde(default)]
    accepted: bool,
    #[serde(default)]
    seconds: Option<f64>,
    #[serde(default, with = "rfc3339_opt")]
    at: Option<DateTime<Utc>>,
}

/// Marks done every step the journal says is done and the record does
/// not; one line for each.
pub fn replay(record: &mut RunRecord, run_dir: &Path, accept_unreviewed: bool) -> Vec<String> {
    let Ok(journal) = crate::fsutil::read_record(&run_dir.join("events.jsonl")) else {
        return Vec::new();
    };
    let workspace = std::path::PathBuf::from(&record.workspace);
    let mut said = Vec::new();
    // A torn last line (a kill mid-append) does not parse and is passed by.
    for line in journal
        .lines()
        .filter_map(|l| serde_json::from_str::<Line>(l).ok())
    {
        let status = match line.kind.as_str() {
            "step_completed" => StepStatus::Completed,
            "step_unreviewed" if line.accepted && accept_unreviewed => StepStatus::Unreviewed,
            _ => continue,
        };
        let Some(step) = line.step.as_deref().and_then(|id| record.step_mut(id)) else {
            continue;
        };
        if step.is_done(accept_unreviewed) || !adopt_worker(step, run_dir, &workspace) {
            continue;
        }
        step.status = status;
        step.reason = None;
        step.completed_at = line.at;
        step.duration_seconds = line.seconds;
        // Its result was checked before troupe wrote its end.
        step.result = step.checked_result();
        said.push(format!(
            "{}'s end ({}) was found in events.jsonl ahead of run.json and recorded; it is not run again",
            step.id,
            status.as_str()
        ));
    }
    said
}

/// Makes sure the step's last attempt has its worker's record: the one
/// `run.json` has when the worker's end reached it, or one read from the
/// worker's sealed result. `false` when neither is there.
fn adopt_worker(step: &mut StepRecord, run_dir: &Path, workspace: &Path) -> bool {
    let Some(last) = step.attempts.iter().map(|a| a.attempt).max() else {
        return false;
    };
    let attempt = step.attempt_mut(last);
    if attempt
        .worker
        .as_ref()
        .is_some_and(|w| w.status == AgentStatus::Completed)
    {
        return true;
    }
    let dir = run_dir.join(&step.id).join(format!("worker-{last}"));
    let sealed = dir.join(".subagent/result.json");
    let Ok(result) = crate::fsutil::read_json::<AgentResult>(&sealed, "a worker's result") else {
        return false;
    };
    if result.status != AgentStatus::Completed {
        return false;
    }
    let attempt = step.attempt_mut(last);
    attempt.worker = Some(ended(display_in(workspace, &dir), &result));
    let step_dir = run_dir.join(&step.id);
    for review in step.attempt_mut(last).reviews.iter_mut() {
        if review.status == AgentStatus::Running {
            *review = sealed_review(review, &step_dir);
        }
    }
    true
}

/// A review `run.json` left running, as its sealed result gives it, or
/// closed as cut off when it has none.
fn sealed_review(review: &AgentRecord, step_dir: &Path) -> AgentRecord {
    let name = Path::new(&review.dir).file_name().unwrap_or_default();
    let sealed = step_dir.join(name).join(".subagent/result.json");
    match crate::fsutil::read_json::<AgentResult>(&sealed, "a reviewer's result") {
        Ok(result) => ended(review.dir.clone(), &result),
        Err(_) => AgentRecord {
            status: AgentStatus::Error,
            error: Some("troupe ended before this review's end was recorded".to_string()),
            ..review.clone()
        },
    }
}
