//! Keeping a run's records on disk. The run's owner hands over every
//! event and every new state of the record; a writer thread appends each
//! event to `events.jsonl`, one whole line per write, and rewrites
//! `run.json` atomically, off the thread that runs the agents. Events are
//! also printed on stdout with `--json`, and shown to a person on stderr,
//! as they come, by a thread of their own: a reader that stops reading
//! stalls neither the agents nor the records.
//!
//! The writer coalesces: between commit points `run.json` is written at
//! most every 50 ms, once for the latest state, and at once at a commit
//! point or a flush. A state is an
//! `Arc<RunRecord>`, which the owner changes copy-on-write, so handing one
//! over costs a reference count, and a copy only while the writer still
//! holds the previous one.
//!
//! A write that fails (a full disk) does not stop the run, but is kept:
//! the first is said on stderr at once, and the owner, closing the run,
//! ends it as failed with it as the reason, since its records may miss
//! what happened.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use chrono::Utc;
use serde::Serialize;

use super::events::RunEvent;
use crate::fsutil::{Durability, Keeper, Taken, keep_latest};
use crate::record::RunRecord;

pub struct Recorder {
    log: EventLog,
    failures: Arc<Mutex<WriteFailures>>,
}

/// The writes of the run's records that failed so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteFailures {
    pub run_json: usize,
    pub events: usize,
    /// The first failure and the latest: which file, and why.
    pub first: Option<String>,
    pub last: Option<String>,
}

impl WriteFailures {
    pub fn count(&self) -> usize {
        self.run_json + self.events
    }
}

/// The run's event stream alone: for the events that change nothing in
/// the record (a model request retried), which come from wherever they
/// happen rather than through the owner.
#[derive(Clone)]
pub struct EventLog {
    writer: Sender<ToWriter>,
    output: Sender<ToOutput>,
    started: Instant,
    json_stdout: bool,
}

/// What the output thread prints.
enum ToOutput {
    Stdout(String),
    Stderr(String),
    /// Answer once everything before is printed.
    Flush(Sender<()>),
}

enum ToWriter {
    /// The record as it stands now.
    State(Arc<RunRecord>),
    /// One line for events.jsonl, newline included, with the record as it
    /// stands after the event; a commit point flushes both to the disk.
    Event(String, Durability, Option<Arc<RunRecord>>),
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

/// The space a run keeps for its last record: written as it starts, freed
/// only to write the run's end when the disk filled meanwhile, so that
/// `run.json` says how the run ended even then.
const RESERVE: &str = "reserved-for-the-end";

/// Why the run's end could not be written even in the space kept for it.
#[derive(Debug, thiserror::Error)]
pub enum EndUnwritten {
    /// There was no such space (it could not be kept as the run started).
    #[error("no space was kept for it: {0}")]
    NothingKept(std::io::Error),
    /// The space was freed, and the write failed all the same.
    #[error("{0}")]
    Write(std::io::Error),
}

/// How much it keeps: room for a run.json of some hundred steps written
/// beside the one it replaces.
const RESERVE_BYTES: usize = 2 << 20;

impl Recorder {
    /// Opens the run's records in `run_dir` and writes the first run.json
    /// before it returns.
    pub fn create(
        run_dir: &Path,
        record: &Arc<RunRecord>,
        json_stdout: bool,
    ) -> std::io::Result<Self> {
        let events = crate::fsutil::open_append(&run_dir.join("events.jsonl"))?;
        let (writer, inbox) = channel();
        let dir = run_dir.to_path_buf();
        let (output, lines) = channel();
        let failures = Arc::new(Mutex::new(WriteFailures::default()));
        let records = Records {
            events,
            dir,
            failures: Arc::clone(&failures),
        };
        std::thread::Builder::new()
            .name("troupe-output".to_string())
            .spawn(move || print_lines(lines))?;
        std::thread::Builder::new()
            .name("troupe-recorder".to_string())
            .spawn(move || keep_latest(inbox, records))?;
        let recorder = Recorder {
            log: EventLog {
                writer,
                output,
                started: Instant::now(),
                json_stdout,
            },
            failures,
        };
        recorder.save(record);
        recorder.flush();
        // Real blocks (zeros written, not a sparse length): a disk that
        // fills later cannot take them back. One that cannot be kept now
        // only means the end may go unrecorded on a full disk, as before.
        let _ = crate::fsutil::write_atomic(
            &run_dir.join(RESERVE),
            &vec![0u8; RESERVE_BYTES],
            Durability::Atomic,
        );
        Ok(recorder)
    }

    /// Writes `record` as the run's last run.json in the space kept for
    /// it, after a write of it failed (a full disk).
    pub fn write_end_in_reserve(run_dir: &Path, record: &RunRecord) -> Result<(), EndUnwritten> {
        let freed = std::fs::remove_file(run_dir.join(RESERVE));
        let written =
            crate::fsutil::write_json_atomic(&run_dir.join("run.json"), record, Durability::Commit);
        match (freed, written) {
            (_, Ok(())) => Ok(()),
            (Err(kept), Err(_)) => Err(EndUnwritten::NothingKept(kept)),
            (Ok(()), Err(written)) => Err(EndUnwritten::Write(written)),
        }
    }

    /// The space kept for the run's end, given back once the end is on
    /// disk.
    pub fn release_reserve(run_dir: &Path) {
        let _ = std::fs::remove_file(run_dir.join(RESERVE));
    }

    pub fn elapsed_seconds(&self) -> f64 {
        self.log.started.elapsed().as_secs_f64()
    }

    /// The event stream, for those who only add to it.
    pub fn log(&self) -> EventLog {
        self.log.clone()
    }

    /// Records `event`, and `record` as it stands after it.
    pub fn emit(&self, event: &RunEvent, record: &Arc<RunRecord>) {
        self.log.write(event, Some(Arc::clone(record)), true);
    }

    /// Records `record` as it stands, without an event (counters).
    pub fn save(&self, record: &Arc<RunRecord>) {
        let _ = self.log.writer.send(ToWriter::State(Arc::clone(record)));
    }

    /// Waits, off the agents' thread, until everything handed over so far
    /// is on disk: what must be written before troupe acts on it.
    pub async fn on_disk(&self) {
        let writer = self.log.writer.clone();
        let _ = tokio::task::spawn_blocking(move || written(&writer)).await;
    }

    /// Waits until everything handed over so far is written (not printed:
    /// a reader that stops reading must not hold up the run's end); the
    /// writes that failed, then.
    pub fn failures(&self) -> WriteFailures {
        written(&self.log.writer);
        self.failures
            .lock()
            .map(|failures| failures.clone())
            .unwrap_or_default()
    }

    /// Waits until everything handed over so far is written and printed.
    pub fn flush(&self) {
        written(&self.log.writer);
        let (done, wait) = channel();
        if self.log.output.send(ToOutput::Flush(done)).is_ok() {
            let _ = wait.recv();
        }
    }
}

/// Waits until everything handed to `writer` so far is written.
fn written(writer: &Sender<ToWriter>) {
    let (done, wait) = channel();
    if writer.send(ToWriter::Flush(done)).is_ok() {
        let _ = wait.recv();
    }
}

impl EventLog {
    /// One line in events.jsonl (and on stdout with `--json`), and the
    /// event's human line on stderr.
    pub fn event(&self, event: &RunEvent) {
        self.write(event, None, true);
    }

    /// The event in events.jsonl (and on stdout with `--json`) only: one
    /// of many alike whose human line was said already.
    pub fn event_unsaid(&self, event: &RunEvent) {
        self.write(event, None, false);
    }

    /// The event, and the record as it stands after it, handed over
    /// together, so that a commit point flushes both.
    fn write(&self, event: &RunEvent, record: Option<Arc<RunRecord>>, say: bool) {
        let elapsed = self.started.elapsed();
        let line = EventLine {
            at: Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            elapsed_ms: elapsed.as_millis().try_into().unwrap_or(u64::MAX),
            event,
        };
        let mut text = serde_json::to_string(&line).unwrap_or_default();
        text.push('\n');
        if self.json_stdout {
            let _ = self.output.send(ToOutput::Stdout(text.clone()));
        }
        if let Some(human) = event.human_line().filter(|_| say) {
            let painter = crate::paint::Painter::for_stderr();
            let time = painter.paint("2", &format!("[{:6.1}s]", elapsed.as_secs_f64()));
            let human = match event.colour() {
                Some(code) => painter.paint(code, &human),
                None => human,
            };
            let _ = self
                .output
                .send(ToOutput::Stderr(format!("{time} {human}\n")));
        }
        let durability = match event.commits() {
            true => Durability::Commit,
            false => Durability::Atomic,
        };
        let _ = self.writer.send(ToWriter::Event(text, durability, record));
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.flush();
    }
}

/// The writer thread's part: each event appended at once, in order, and
/// synced at a commit point before the record; the latest record written
/// when it is due (see `fsutil::keep_latest`).
struct Records {
    events: File,
    dir: PathBuf,
    failures: Arc<Mutex<WriteFailures>>,
}

/// The run's two records.
#[derive(Debug, Clone, Copy)]
enum Kept {
    RunJson,
    Events,
}

impl Kept {
    fn name(self) -> &'static str {
        match self {
            Kept::RunJson => "run.json",
            Kept::Events => "events.jsonl",
        }
    }
}

impl Keeper<ToWriter> for Records {
    type State = RunRecord;

    fn take(&mut self, message: ToWriter) -> Taken<RunRecord> {
        match message {
            ToWriter::State(record) => Taken::State(record, Durability::Atomic),
            ToWriter::Event(line, wanted, record) => {
                if let Err(e) = self.events.write_all(line.as_bytes()) {
                    self.failed(Kept::Events, &e);
                }
                match record {
                    Some(record) => Taken::State(record, wanted),
                    None => Taken::Only(wanted),
                }
            }
            ToWriter::Flush(done) => Taken::Flush(done),
        }
    }

    fn settle(&mut self, durability: Durability) {
        if durability.flushes()
            && let Err(e) = self.events.sync_data()
        {
            self.failed(Kept::Events, &e);
        }
    }

    fn write(&mut self, record: &RunRecord, durability: Durability) {
        let path = self.dir.join(Kept::RunJson.name());
        if let Err(e) = crate::fsutil::write_json_atomic(&path, record, durability) {
            self.failed(Kept::RunJson, &e);
        }
    }
}

impl Records {
    /// Keeps a failed write of `file`; the first is said at once.
    fn failed(&mut self, kept: Kept, error: &std::io::Error) {
        let file = kept.name();
        let said = format!("{file}: {error}");
        let Ok(mut failures) = self.failures.lock() else {
            return;
        };
        match kept {
            Kept::RunJson => failures.run_json += 1,
            Kept::Events => failures.events += 1,
        }
        if failures.first.is_none() {
            failures.first = Some(said.clone());
            crate::tell!(
                "troupe: cannot write {file} in {}: {error}; the run will end as failed",
                self.dir.display()
            );
        }
        failures.last = Some(said);
    }
}

/// The output thread: prints each line as it comes.
fn print_lines(lines: Receiver<ToOutput>) {
    for line in lines {
        match line {
            ToOutput::Stdout(text) => crate::console::out(&text),
            ToOutput::Stderr(text) => crate::console::progress(&text),
            ToOutput::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_is_kept_and_the_next_one_still_lands() {
        let ws = tempfile::tempdir().unwrap();
        let dir = ws.path().join("run_x");
        std::fs::create_dir(&dir).unwrap();
        let blocked = dir.join("run.json");
        std::fs::create_dir(&blocked).unwrap();
        let team = crate::run::tests::settings();
        let record = Arc::new(crate::run::fresh_record(
            ws.path(),
            &team,
            "run_x",
            "g",
            &dir,
        ));
        let recorder = Recorder::create(&dir, &record, false).unwrap();
        let failed = recorder.failures();
        assert_eq!((failed.run_json, failed.events), (1, 0));
        let first = failed.first.clone().unwrap();
        assert!(first.starts_with("run.json: "), "{first}");
        std::fs::remove_dir(&blocked).unwrap();
        recorder.save(&record);
        assert_eq!(recorder.failures(), failed, "nothing more failed");
        assert!(crate::fsutil::is_regular(&blocked), "run.json written");
    }
}
