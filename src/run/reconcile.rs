//! What a resume does before it runs anything: the record set against
//! what is on disk and in the branch, which a killed troupe may have left
//! ahead of `run.json` (written up to 50 ms behind between commit points).
//!
//! - An attempt whose directories exist but that the record does not name
//!   is done again under its own number, its directories set aside for a
//!   look (`cut_short`); one with a landing under way keeps them, and the
//!   step goes on with the next number, so no directory is made twice.
//! - A landing that reached the branch, by its intent written before the
//!   branch moved (`landing-<attempt>.json`), is recorded as landed and its
//!   step as done: it is never run again on top of its own change.
//!
//! Each repair is one line, said as the resume starts.

use std::path::Path;

use crate::protocol::AgentStatus;
use crate::record::{AgentRecord, ChangeRecord, RunRecord, StepStatus};
use crate::run::isolation::Worktrees;

/// The repairs made, one line each; `again` loses the steps found done.
pub async fn reconcile(
    record: &mut RunRecord,
    run_dir: &Path,
    workspace: &Path,
    trees: Option<&Worktrees>,
    again: &mut Vec<String>,
) -> Vec<String> {
    let mut said = Vec::new();
    let mut done = Vec::new();
    for step in record.steps.iter_mut().filter(|s| again.contains(&s.id)) {
        let step_dir = run_dir.join(&step.id);
        let recorded = step.attempts.iter().map(|a| a.attempt).max().unwrap_or(0);
        let on_disk = highest_attempt_on_disk(&step_dir);
        for attempt in recorded + 1..=on_disk {
            let dir = step_dir.join(format!("worker-{attempt}"));
            let shown = crate::protocol::display_in(workspace, &dir);
            let kept = match super::cut_short::redo_unnamed(step, &step_dir, attempt, shown.clone())
            {
                Ok(Some(repair)) => {
                    said.push(repair);
                    continue;
                }
                Ok(None) => "with a landing under way".to_string(),
                Err(e) => format!("and cannot be set aside ({e})"),
            };
            step.attempt_mut(attempt).worker = Some(AgentRecord {
                status: AgentStatus::Error,
                error: Some(
                    "cut off: troupe ended before its record named this attempt".to_string(),
                ),
                ..AgentRecord::running(shown)
            });
            said.push(format!(
                "{}'s attempt {attempt} was cut off before run.json named it, {kept}; its directories stay, and the step goes on with attempt {}",
                step.id,
                attempt + 1
            ));
        }
        let Some(trees) = trees else { continue };
        let Some(intent) = trees.landed(&step.id, recorded.max(on_disk)).await else {
            continue;
        };
        let attempt = step.attempt_mut(intent.attempt);
        let change = attempt.change.get_or_insert_with(|| ChangeRecord {
            base: intent.from.clone(),
            ..ChangeRecord::default()
        });
        change.merge = Some(intent.to.clone());
        step.status = match intent.approved {
            true => StepStatus::Completed,
            false => StepStatus::Unreviewed,
        };
        step.reason = Some(format!(
            "its landing ({}) was found in the branch on resume",
            short(&intent.to)
        ));
        done.push(step.id.clone());
        said.push(format!(
            "{}'s landing of attempt {} was found in the branch and recorded; it is not run again",
            step.id, intent.attempt
        ));
    }
    again.retain(|id| !done.contains(id));
    said
}

/// The highest attempt number any of the step's directories or files
/// carry (`cut_short::attempt_of`).
fn highest_attempt_on_disk(step_dir: &Path) -> u32 {
    let Ok(entries) = std::fs::read_dir(step_dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| super::cut_short::attempt_of(&entry.file_name().to_string_lossy()))
        .max()
        .unwrap_or(0)
}

fn short(commit: &str) -> String {
    commit.chars().take(10).collect()
}
