//! An attempt that the run's stop (Ctrl-C, SIGTERM) or a kill cut short
//! before its verdict is done again under its own number when the run
//! resumes: the step gets the attempts it would have had, and a scripted
//! or real model sees attempt 2 again, not a 3 it was never meant to
//! reach. What the cut attempt left is set aside under names that say so
//! (`worker-2` becomes `worker-2.cut-1`, `checkout-2.git`
//! `checkout-2.cut-1.git`) and kept for a look; its agents stay in the
//! attempt's record as `cut_short`, pointing there.
//!
//! An attempt with a landing intent (`landing-N.json`) is left as it is:
//! whether its change reached the branch is `reconcile`'s to find, and a
//! redo must never run on top of it.

use std::path::Path;

use crate::record::{AgentRecord, AttemptRecord, StepRecord};

/// Every kind of name troupe gives a step's directories and files, each
/// followed by the attempt's number.
const KINDS: [&str; 8] = [
    "worker-",
    "review-",
    "checkout-",
    "upper-",
    "work-",
    "change-",
    "landing-",
    "kept-",
];

/// Sets the step's last attempt aside for a redo under its own number, if
/// it ended without a verdict: its slot in the record is emptied (the
/// agents kept as `cut_short`), its directories renamed. The repair said,
/// or `None` when the attempt reached a verdict or holds a landing intent.
pub fn redo_last(step: &mut StepRecord, step_dir: &Path) -> std::io::Result<Option<String>> {
    let id = step.id.clone();
    let Some(attempt) = step.attempts.iter_mut().max_by_key(|a| a.attempt) else {
        return Ok(None);
    };
    let decided = attempt.reviews.iter().any(|r| r.verdict.is_some())
        || !attempt.result_errors.is_empty()
        || attempt.change.as_ref().is_some_and(|c| c.merge.is_some());
    if decided || attempt.worker.is_none() {
        return Ok(None);
    }
    let Some(aside) = set_aside(step_dir, attempt.attempt)? else {
        return Ok(None);
    };
    let number = attempt.attempt;
    empty_for_redo(attempt, &aside.suffix);
    Ok(Some(format!(
        "{id}'s attempt {number} was cut short before its verdict; it is done again, and what it left is kept in {}",
        aside.said(&id)
    )))
}

/// An attempt on disk that `run.json` never named (troupe was killed
/// within the moment the record lags), set aside the same way: its worker,
/// if it started, is kept as cut short. `None` when it holds a landing
/// intent.
pub fn redo_unnamed(
    step: &mut StepRecord,
    step_dir: &Path,
    attempt: u32,
    worker_dir: String,
) -> std::io::Result<Option<String>> {
    let started = step_dir.join(format!("worker-{attempt}")).is_dir();
    let Some(aside) = set_aside(step_dir, attempt)? else {
        return Ok(None);
    };
    let slot = step.attempt_mut(attempt);
    if started {
        slot.worker = Some(AgentRecord {
            status: crate::protocol::AgentStatus::Error,
            error: Some("cut off: troupe ended before its record named this attempt".to_string()),
            ..AgentRecord::running(worker_dir)
        });
    }
    empty_for_redo(slot, &aside.suffix);
    Ok(Some(format!(
        "{}'s attempt {attempt} was cut off before run.json named it; it is done again, and what it left is kept in {}",
        step.id,
        aside.said(&step.id)
    )))
}

/// The attempt's agents moved to `cut_short` (their directories renamed
/// with `suffix`), the rest of its record cleared: the next worker takes
/// the slot.
fn empty_for_redo(attempt: &mut AttemptRecord, suffix: &str) {
    let agents = attempt
        .worker
        .take()
        .into_iter()
        .chain(attempt.reviews.drain(..));
    let moved: Vec<AgentRecord> = agents
        .map(|mut agent| {
            agent.dir = format!("{}{suffix}", agent.dir);
            agent
        })
        .collect();
    attempt.cut_short.extend(moved);
    attempt.claims = None;
    attempt.change = None;
    attempt.result_errors.clear();
}

/// What an attempt's set-aside renamed.
struct SetAside {
    /// `.cut-K`, added to each name.
    suffix: String,
    /// The names they have now.
    names: Vec<String>,
}

impl SetAside {
    /// The names, under the step's directory, for a person.
    fn said(&self, step: &str) -> String {
        match self.names.is_empty() {
            true => "nothing (it had made no directory yet)".to_string(),
            false => self
                .names
                .iter()
                .map(|name| format!("{step}/{name}"))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// Renames every directory and file of `attempt` in `step_dir` with the
/// first `.cut-K` suffix none of them has yet; `None` when the attempt
/// holds a landing intent.
fn set_aside(step_dir: &Path, attempt: u32) -> std::io::Result<Option<SetAside>> {
    let names: Vec<String> = match std::fs::read_dir(step_dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| attempt_of(name) == Some(attempt))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    if names.iter().any(|n| n.starts_with("landing-")) {
        return Ok(None);
    }
    let taken = |k: u32| names.iter().any(|n| n.contains(&format!(".cut-{k}")));
    let k = (1..).find(|k| !taken(*k)).unwrap_or(1);
    let suffix = format!(".cut-{k}");
    let mut moved = Vec::new();
    for name in names.iter().filter(|n| !n.contains(".cut-")) {
        let aside = match name.strip_suffix(".git") {
            Some(stem) => format!("{stem}{suffix}.git"),
            None => format!("{name}{suffix}"),
        };
        std::fs::rename(step_dir.join(name), step_dir.join(&aside))?;
        moved.push(aside);
    }
    moved.sort();
    Ok(Some(SetAside {
        suffix,
        names: moved,
    }))
}

/// The attempt a name of a step's directory carries: `worker-N`,
/// `review-N`, `review-N-2`, `checkout-N`, `checkout-N.git`, `upper-N`,
/// `work-N`, `change-N.diff`, `landing-N.json`, and those set aside
/// (`worker-N.cut-1`).
pub fn attempt_of(name: &str) -> Option<u32> {
    let rest = KINDS.iter().find_map(|prefix| name.strip_prefix(prefix))?;
    let digits: &str = rest.split(['-', '.']).next()?;
    digits.parse().ok().filter(|n| *n > 0)
}

#[cfg(test)]
mod tests {
    use super::attempt_of;

    #[test]
    fn the_attempt_is_read_from_every_name_troupe_gives() {
        assert_eq!(attempt_of("worker-3"), Some(3));
        assert_eq!(attempt_of("review-2-2"), Some(2));
        assert_eq!(attempt_of("checkout-4.git"), Some(4));
        assert_eq!(attempt_of("checkout-4.cut-1.git"), Some(4));
        assert_eq!(attempt_of("change-5.diff"), Some(5));
        assert_eq!(attempt_of("landing-6.json"), Some(6));
        assert_eq!(attempt_of("upper-7"), Some(7));
        assert_eq!(attempt_of("work-8"), Some(8));
        assert_eq!(attempt_of("worker-9.cut-2"), Some(9));
        assert_eq!(attempt_of("planted"), None);
        assert_eq!(attempt_of("worker-x"), None);
        assert_eq!(attempt_of("worker-0"), None);
    }
}
