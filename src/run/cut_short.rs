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
    let Some(aside) = set_aside(step_dir, attempt.attempt, &recorded_cuts(attempt))? else {
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
    let recorded = step
        .attempts
        .iter()
        .find(|a| a.attempt == attempt)
        .map(recorded_cuts)
        .unwrap_or_default();
    let Some(aside) = set_aside(step_dir, attempt, &recorded)? else {
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

/// The `K`s of the set-asides the record already names for `attempt`.
fn recorded_cuts(attempt: &AttemptRecord) -> Vec<u32> {
    attempt
        .cut_short
        .iter()
        .filter_map(|a| cut_of(&a.dir))
        .collect()
}

/// The `K` of a name set aside as `.cut-K`.
fn cut_of(name: &str) -> Option<u32> {
    let rest = &name[name.find(".cut-")? + ".cut-".len()..];
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// Renames every directory and file of `attempt` in `step_dir` with a
/// `.cut-K` suffix; `None` when the attempt holds a landing intent. `K`
/// is one past those on disk and in the record (`recorded`), but for a
/// set-aside a kill cut short before the record named it: a `K` on disk
/// that the record does not know is finished, not begun again, so that
/// what one attempt left keeps one suffix and the record names it.
fn set_aside(step_dir: &Path, attempt: u32, recorded: &[u32]) -> std::io::Result<Option<SetAside>> {
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
    let aside = |name: &str, k: u32| match name.strip_suffix(".git") {
        Some(stem) => format!("{stem}.cut-{k}.git"),
        None => format!("{name}.cut-{k}"),
    };
    let fresh: Vec<&String> = names.iter().filter(|n| cut_of(n).is_none()).collect();
    let on_disk: Vec<u32> = names.iter().filter_map(|n| cut_of(n)).collect();
    let next = on_disk.iter().chain(recorded).max().map_or(1, |k| k + 1);
    // Never onto a name that is there: one the record does not know may
    // be a set-aside of an attempt that had no agent to record.
    let free = |k: &u32| fresh.iter().all(|n| !names.contains(&aside(n, *k)));
    let k = on_disk
        .iter()
        .filter(|k| !recorded.contains(k))
        .filter(|k| free(k))
        .max()
        .copied()
        .unwrap_or(next);
    let suffix = format!(".cut-{k}");
    let mut moved: Vec<String> = names
        .iter()
        .filter(|n| cut_of(n) == Some(k))
        .cloned()
        .collect();
    for name in fresh {
        let to = aside(name, k);
        std::fs::rename(step_dir.join(name), step_dir.join(&to))?;
        moved.push(to);
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
    use super::{attempt_of, set_aside};

    fn names(dir: &std::path::Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// A resume killed between two renames, before run.json said so: the
    /// next one finishes that set-aside under the same suffix.
    #[test]
    fn a_set_aside_a_kill_cut_short_is_finished_under_its_own_suffix() {
        let dir = tempfile::tempdir().unwrap();
        for made in ["worker-2.cut-1", "checkout-2", "checkout-2.git", "worker-1"] {
            std::fs::create_dir(dir.path().join(made)).unwrap();
        }
        let aside = set_aside(dir.path(), 2, &[]).unwrap().unwrap();
        assert_eq!(aside.suffix, ".cut-1");
        assert_eq!(
            names(dir.path()),
            [
                "checkout-2.cut-1",
                "checkout-2.cut-1.git",
                "worker-1",
                "worker-2.cut-1"
            ]
        );
        assert_eq!(aside.names.len(), 3, "{:?}", aside.names);
    }

    /// An attempt cut short a second time, the first set-aside recorded:
    /// a suffix of its own.
    #[test]
    fn a_second_cut_of_one_attempt_takes_the_next_suffix() {
        let dir = tempfile::tempdir().unwrap();
        for made in ["worker-2.cut-1", "worker-2"] {
            std::fs::create_dir(dir.path().join(made)).unwrap();
        }
        let aside = set_aside(dir.path(), 2, &[1]).unwrap().unwrap();
        assert_eq!(aside.suffix, ".cut-2");
        assert_eq!(names(dir.path()), ["worker-2.cut-1", "worker-2.cut-2"]);
    }

    /// A set-aside the record could not name (the attempt had no agent)
    /// is never renamed onto.
    #[test]
    fn a_name_that_is_there_is_never_renamed_onto() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("change-2.diff.cut-1"), "first").unwrap();
        std::fs::write(dir.path().join("change-2.diff"), "second").unwrap();
        let aside = set_aside(dir.path(), 2, &[]).unwrap().unwrap();
        assert_eq!(aside.suffix, ".cut-2");
        let first = std::fs::read_to_string(dir.path().join("change-2.diff.cut-1")).unwrap();
        assert_eq!(first, "first");
    }

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
