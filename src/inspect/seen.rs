//! A run as a reader finds it: its record, and whether anyone still runs
//! it. run.json says what the run last wrote, so a troupe killed without
//! a word (`kill -9`, a crash, the machine going down) leaves `planning`
//! or `running` there for good. A run holds its directory for as long as
//! it lives (`fsutil::dir_lock`), so a record under way in a directory
//! nobody holds is a run that died, and every reader says so: `died`,
//! with the command that resumes it. Readers only report: `died` is never
//! written into run.json, which is the run's own.

use std::path::Path;

use serde_json::Value;

use super::{Shown, Tone};
use crate::fsutil::dir_lock;
use crate::record::{RunRecord, RunStatus};

/// What a reader makes of a run.
pub struct SeenRun {
    pub record: RunRecord,
    /// Its record says it is under way, and no troupe holds its
    /// directory.
    pub died: bool,
}

/// A run's status as a reader tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    /// What run.json says.
    Recorded(RunStatus),
    /// run.json says planning or running, but nobody runs it.
    Died,
}

impl Shown for RunState {
    fn word(&self) -> &'static str {
        match self {
            RunState::Recorded(status) => status.word(),
            RunState::Died => "died",
        }
    }

    fn tone(&self) -> Tone {
        match self {
            RunState::Recorded(status) => status.tone(),
            RunState::Died => Tone::Wrong,
        }
    }
}

/// Reads the run in `dir` and finds out whether it died.
pub fn see(dir: &Path) -> Result<SeenRun, String> {
    let record = super::load_run(dir)?;
    if !record.status.is_under_way() {
        return Ok(SeenRun {
            record,
            died: false,
        });
    }
    // A directory that cannot be asked is not taken for a dead run.
    if dir_lock::probe(dir).unwrap_or(true) {
        return Ok(SeenRun {
            record,
            died: false,
        });
    }
    // Read again now that the directory was found free: a run that ended
    // between the first read and the probe has sealed its record by now.
    let record = super::load_run(dir)?;
    let died = record.status.is_under_way();
    Ok(SeenRun { record, died })
}

impl SeenRun {
    pub fn state(&self) -> RunState {
        match self.died {
            true => RunState::Died,
            false => RunState::Recorded(self.record.status),
        }
    }

    /// For a person, what `died` means and what to do about it.
    pub fn died_note(&self) -> Option<String> {
        self.died.then(|| {
            format!(
                "run.json says {}, but no troupe is running it any more (killed, or unable to write its end); `{}` continues it",
                self.record.status.as_str(),
                self.record.resume_command()
            )
        })
    }

    /// The record as JSON for a script: run.json's fields, with `status`
    /// `died` and `recorded_status` what run.json says, when it died.
    pub fn to_json(&self) -> serde_json::Result<Value> {
        let mut value = serde_json::to_value(&self.record)?;
        if self.died
            && let Some(fields) = value.as_object_mut()
        {
            let recorded = fields.insert("status".to_string(), Value::from("died"));
            if let Some(recorded) = recorded {
                fields.insert("recorded_status".to_string(), recorded);
            }
        }
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record_in(dir: &Path, status: &str) {
        let record = serde_json::json!({
            "run_id": "run_x", "goal": "g", "status": status,
            "workspace": "/the ws", "run_dir": "sub_agent_results/run_x",
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
            "plan_summary": "", "replans": 0, "steps": [],
            "totals": {}, "settings": {}
        });
        std::fs::write(dir.join("run.json"), record.to_string()).unwrap();
    }

    #[test]
    fn a_run_under_way_that_nobody_holds_died_and_the_record_stays() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path().canonicalize().unwrap();
        record_in(&dir, "running");
        let seen = see(&dir).unwrap();
        assert_eq!(seen.state(), RunState::Died);
        let note = seen.died_note().unwrap();
        assert!(
            note.contains("`troupe run --resume run_x --workspace '/the ws'`"),
            "{note}"
        );
        let json = seen.to_json().unwrap();
        assert_eq!(json["status"], "died");
        assert_eq!(json["recorded_status"], "running");
        let file = std::fs::read_to_string(dir.join("run.json")).unwrap();
        assert!(file.contains("\"running\""), "a reader writes nothing");

        let held = dir_lock::DirLock::take(&dir).unwrap();
        let seen = see(&dir).unwrap();
        assert_eq!(seen.state(), RunState::Recorded(RunStatus::Running));
        assert!(seen.died_note().is_none());
        assert_eq!(seen.to_json().unwrap()["status"], "running");
        drop(held);

        record_in(&dir, "interrupted");
        let seen = see(&dir).unwrap();
        assert_eq!(seen.state(), RunState::Recorded(RunStatus::Interrupted));
    }
}
