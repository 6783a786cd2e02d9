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

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Instant;

use chrono::Utc;
use serde::Serialize;

use super::events::RunEvent;
use crate::fsutil::{Durability, Keeper, Taken, keep_latest};
use crate::record::RunRecord;

pub struct Recorder {
    log: EventLog,
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
        std::thread::Builder::new()
            .name("troupe-output".to_string())
            .spawn(move || print_lines(lines))?;
        std::thread::Builder::new()
            .name("troupe-recorder".to_string())
            .spawn(move || {
                let records = Records {
                    events,
                    dir,
                    warned: false,
                };
                keep_latest(inbox, records)
            })?;
        let recorder = Recorder {
            log: EventLog {
                writer,
                output,
                started: Instant::now(),
                json_stdout,
            },
        };
        recorder.save(record);
        recorder.flush();
        Ok(recorder)
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
        self.log.write(event, Some(Arc::clone(record)));
    }

    /// Records `record` as it stands, without an event (counters).
    pub fn save(&self, record: &Arc<RunRecord>) {
        let _ = self.log.writer.send(ToWriter::State(Arc::clone(record)));
    }

    /// Waits, off the agents' thread, until everything handed over so far
    /// is on disk: what must be written before troupe acts on it.
    pub async fn written(&self) {
        let (done, wait) = channel();
        if self.log.writer.send(ToWriter::Flush(done)).is_ok() {
            let _ = tokio::task::spawn_blocking(move || wait.recv()).await;
        }
    }

    /// Waits until everything handed over so far is written and printed.
    pub fn flush(&self) {
        let (done, wait) = channel();
        if self.log.writer.send(ToWriter::Flush(done)).is_ok() {
            let _ = wait.recv();
        }
        let (done, wait) = channel();
        if self.log.output.send(ToOutput::Flush(done)).is_ok() {
            let _ = wait.recv();
        }
    }
}

impl EventLog {
    /// One line in events.jsonl (and on stdout with `--json`), and the
    /// event's human line on stderr.
    pub fn event(&self, event: &RunEvent) {
        self.write(event, None);
    }

    /// The event, and the record as it stands after it, handed over
    /// together, so that a commit point flushes both.
    fn write(&self, event: &RunEvent, record: Option<Arc<RunRecord>>) {
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
        if let Some(human) = event.human_line() {
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
    warned: bool,
}

impl Keeper<ToWriter> for Records {
    type State = RunRecord;

    fn take(&mut self, message: ToWriter) -> Taken<RunRecord> {
        match message {
            ToWriter::State(record) => Taken::State(record, Durability::Atomic),
            ToWriter::Event(line, wanted, record) => {
                if let Err(e) = self.events.write_all(line.as_bytes()) {
                    warn_once(&mut self.warned, &self.dir, &e);
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
            warn_once(&mut self.warned, &self.dir, &e);
        }
    }

    fn write(&mut self, record: &RunRecord, durability: Durability) {
        save_record(&self.dir, record, durability, &mut self.warned);
    }
}

/// The output thread: prints each line as it comes.
fn print_lines(lines: Receiver<ToOutput>) {
    for line in lines {
        match line {
            ToOutput::Stdout(text) => crate::console::out(&text),
            ToOutput::Stderr(text) => crate::console::err(&text),
            ToOutput::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

fn save_record(dir: &Path, record: &RunRecord, durability: Durability, warned: &mut bool) {
    if let Err(e) = crate::fsutil::write_json_atomic(&dir.join("run.json"), record, durability) {
        warn_once(warned, dir, &e);
    }
}

fn warn_once(warned: &mut bool, dir: &Path, error: &std::io::Error) {
    if !*warned {
        *warned = true;
        crate::tell!(
            "troupe: cannot write the run's records in {}: {error}",
            dir.display()
        );
    }
}
