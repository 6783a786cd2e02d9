//! The one writer of a run's records. Every change to the run goes through
//! `emit`: the state is updated, the event printed on stdout with `--json`
//! and shown to a person on stderr at once, and a writer thread appends the
//! event to `events.jsonl`, one whole line per write, and rewrites
//! `run.json` atomically.
//!
//! The writer coalesces: when changes come faster than the disk takes
//! them, `run.json` is written once for the latest state rather than once
//! per change, and none of that blocks the thread that runs the agents.
//! `flush` waits until everything emitted so far is on disk.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use chrono::Utc;
use serde::Serialize;

use super::events::RunEvent;
use super::record::RunRecord;
use crate::fsutil::write_json_atomic;

pub struct Recorder {
    record: Arc<Mutex<RunRecord>>,
    writer: Sender<ToWriter>,
    started: Instant,
    json_stdout: bool,
}

enum ToWriter {
    /// The record changed.
    Dirty,
    /// One line for events.jsonl, newline included.
    Event(String),
    /// Answer once everything before is written.
    Flush(Sender<()>),
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
        let events = crate::fsutil::open_append(&run_dir.join("events.jsonl"))?;
        write_json_atomic(&run_dir.join("run.json"), &record)?;
        let record = Arc::new(Mutex::new(record));
        let (writer, inbox) = channel();
        let shared = Arc::clone(&record);
        let dir = run_dir.to_path_buf();
        std::thread::Builder::new()
            .name("troupe-recorder".to_string())
            .spawn(move || write_records(inbox, shared, events, dir))?;
        Ok(Recorder {
            record,
            writer,
            started: Instant::now(),
            json_stdout,
        })
    }

    pub fn elapsed_seconds(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Applies `update` to the run's state and records `event`.
    pub fn emit(&self, event: RunEvent, update: impl FnOnce(&mut RunRecord)) {
        self.change(update);
        let elapsed = self.started.elapsed();
        let line = EventLine {
            at: Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            elapsed_ms: elapsed.as_millis().try_into().unwrap_or(u64::MAX),
            event: &event,
        };
        let mut text = serde_json::to_string(&line).unwrap_or_default();
        text.push('\n');
        if self.json_stdout {
            let mut stdout = std::io::stdout().lock();
            let _ = stdout.write_all(text.as_bytes());
            let _ = stdout.flush();
        }
        if let Some(human) = event.human_line() {
            eprintln!("[{:6.1}s] {human}", elapsed.as_secs_f64());
        }
        let _ = self.writer.send(ToWriter::Event(text));
    }

    /// Reads the run's state.
    pub fn with<R>(&self, read: impl FnOnce(&RunRecord) -> R) -> Option<R> {
        self.record.lock().ok().map(|record| read(&record))
    }

    /// Changes the state without an event (counters).
    pub fn update(&self, update: impl FnOnce(&mut RunRecord)) {
        self.change(update);
    }

    /// Waits until everything emitted so far is written.
    pub fn flush(&self) {
        let (done, wait) = channel();
        if self.writer.send(ToWriter::Flush(done)).is_ok() {
            let _ = wait.recv();
        }
    }

    fn change(&self, update: impl FnOnce(&mut RunRecord)) {
        if let Ok(mut record) = self.record.lock() {
            update(&mut record);
            record.recount();
            record.updated_at = Utc::now();
        }
        let _ = self.writer.send(ToWriter::Dirty);
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.flush();
    }
}

/// The writer thread: takes what is waiting, appends the events in order,
/// writes the latest state once, answers flushes, and blocks for more.
fn write_records(
    inbox: Receiver<ToWriter>,
    record: Arc<Mutex<RunRecord>>,
    mut events: File,
    dir: PathBuf,
) {
    let mut warned = false;
    while let Ok(first) = inbox.recv() {
        let mut dirty = false;
        let mut flushes = Vec::new();
        for message in std::iter::once(first).chain(inbox.try_iter()) {
            match message {
                ToWriter::Dirty => dirty = true,
                ToWriter::Event(line) => {
                    if let Err(e) = events.write_all(line.as_bytes()) {
                        warn_once(&mut warned, &dir, &e);
                    }
                }
                ToWriter::Flush(done) => flushes.push(done),
            }
        }
        if dirty {
            let bytes = record
                .lock()
                .ok()
                .and_then(|r| serde_json::to_vec_pretty(&*r).ok());
            if let Some(mut bytes) = bytes {
                bytes.push(b'\n');
                if let Err(e) = crate::fsutil::write_atomic(&dir.join("run.json"), &bytes) {
                    warn_once(&mut warned, &dir, &e);
                }
            }
        }
        for done in flushes {
            let _ = done.send(());
        }
    }
}

fn warn_once(warned: &mut bool, dir: &Path, error: &std::io::Error) {
    if !*warned {
        *warned = true;
        eprintln!(
            "troupe: cannot write the run's records in {}: {error}",
            dir.display()
        );
    }
}
