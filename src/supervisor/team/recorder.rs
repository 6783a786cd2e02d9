//! The one writer of a run's records. Every change to the run goes through
//! `emit`: the state in `run.json` is updated and rewritten atomically, the
//! event is appended to `events.jsonl` as one whole line, printed on stdout
//! with `--json`, and shown to a person on stderr.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use chrono::Utc;
use serde::Serialize;

use super::events::RunEvent;
use super::record::RunRecord;
use crate::fsutil::write_json_atomic;

pub struct Recorder {
    inner: Mutex<Inner>,
    started: Instant,
    run_dir: PathBuf,
    json_stdout: bool,
}

struct Inner {
    record: RunRecord,
    events: File,
    /// Set once a write failed, so the warning is given once.
    write_failed: bool,
}

/// One line of `events.jsonl`.
#[derive(Serialize)]
struct EventLine<'a> {
    /// RFC 3339 in UTC, with milliseconds.
    at: String,
    /// Milliseconds since the run started, from a monotonic clock.
    elapsed_ms: u64,
    #[serde(flatten)]
    event: &'a RunEvent,
}

impl Recorder {
    /// Opens the run's records in `run_dir` and writes the first run.json.
    pub fn create(run_dir: &Path, record: RunRecord, json_stdout: bool) -> std::io::Result<Self> {
        let events = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(run_dir.join("events.jsonl"))?;
        write_json_atomic(&run_dir.join("run.json"), &record)?;
        Ok(Recorder {
            inner: Mutex::new(Inner {
                record,
                events,
                write_failed: false,
            }),
            started: Instant::now(),
            run_dir: run_dir.to_path_buf(),
            json_stdout,
        })
    }

    pub fn elapsed_seconds(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Applies `update` to the run's state and records `event`.
    pub fn emit(&self, event: RunEvent, update: impl FnOnce(&mut RunRecord)) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        update(&mut inner.record);
        inner.record.recount();
        inner.record.updated_at = Utc::now();
        let elapsed = self.started.elapsed();
        let line = EventLine {
            at: Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            elapsed_ms: elapsed.as_millis().try_into().unwrap_or(u64::MAX),
            event: &event,
        };
        let mut text = serde_json::to_string(&line).unwrap_or_default();
        text.push('\n');
        let saved = write_json_atomic(&self.run_dir.join("run.json"), &inner.record)
            .and_then(|()| inner.events.write_all(text.as_bytes()));
        if let Err(e) = saved
            && !inner.write_failed
        {
            inner.write_failed = true;
            eprintln!(
                "troupe: cannot write the run's records in {}: {e}",
                self.run_dir.display()
            );
        }
        if self.json_stdout {
            let mut stdout = std::io::stdout().lock();
            let _ = stdout.write_all(text.as_bytes());
            let _ = stdout.flush();
        }
        if let Some(human) = event.human_line() {
            eprintln!("[{:6.1}s] {human}", elapsed.as_secs_f64());
        }
    }

    /// Reads the run's state.
    pub fn with<R>(&self, read: impl FnOnce(&RunRecord) -> R) -> Option<R> {
        self.inner.lock().ok().map(|inner| read(&inner.record))
    }

    /// Changes the state without an event (counters), and saves it.
    pub fn update(&self, update: impl FnOnce(&mut RunRecord)) {
        if let Ok(mut inner) = self.inner.lock() {
            update(&mut inner.record);
            inner.record.recount();
            inner.record.updated_at = Utc::now();
            let _ = write_json_atomic(&self.run_dir.join("run.json"), &inner.record);
        }
    }
}
