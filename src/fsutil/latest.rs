//! A JSON record kept current by a thread of its own, so that the thread
//! that runs agents never waits for the disk: each `save` hands over the
//! record's new state (an `Arc`, which the owner changes copy-on-write),
//! and the thread writes the latest one atomically, at most every 50 ms
//! between commit points (see `pace`), coalescing the states between. `commit` hands over a state that
//! must reach the disk (a commit point, see `durability`) and waits for
//! it; `flush` waits until what was handed over is written.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{Durability, Next, Pace};

enum Job<T> {
    Save(Arc<T>, Durability),
    Flush(Sender<()>),
}

pub struct LatestWriter<T> {
    jobs: Sender<Job<T>>,
    /// The first write that failed, said at the next flush.
    failed: Arc<Mutex<Option<std::io::Error>>>,
    /// Nanoseconds spent writing.
    spent: Arc<AtomicU64>,
}

impl<T: Serialize + Send + Sync + 'static> LatestWriter<T> {
    /// A writer of `path`, on a thread named `name`.
    pub fn spawn(path: PathBuf, name: &str) -> std::io::Result<Self> {
        let (jobs, inbox) = channel();
        let failed = Arc::new(Mutex::new(None));
        let spent = Arc::new(AtomicU64::new(0));
        let state = (Arc::clone(&failed), Arc::clone(&spent));
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || write_latest(inbox, path, state))?;
        Ok(LatestWriter {
            jobs,
            failed,
            spent,
        })
    }

    /// Hands over the record's new state.
    pub fn save(&self, state: &Arc<T>) {
        let _ = self
            .jobs
            .send(Job::Save(Arc::clone(state), Durability::Atomic));
    }

    /// Hands over a state that must reach the disk, and waits until it
    /// has.
    pub fn commit(&self, state: &Arc<T>) -> std::io::Result<()> {
        let _ = self
            .jobs
            .send(Job::Save(Arc::clone(state), Durability::Commit));
        self.flush()
    }

    /// Waits until every state handed over is written; the first write
    /// that failed since the last check, if any.
    pub fn flush(&self) -> std::io::Result<()> {
        let (done, wait) = channel();
        if self.jobs.send(Job::Flush(done)).is_ok() {
            let _ = wait.recv();
        }
        self.check()
    }

    /// The first write that failed since the last check, without waiting.
    pub fn check(&self) -> std::io::Result<()> {
        match self.failed.lock().ok().and_then(|mut f| f.take()) {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Time spent writing so far.
    pub fn write_time(&self) -> Duration {
        Duration::from_nanos(self.spent.load(Ordering::Relaxed))
    }
}

type Shared = (Arc<Mutex<Option<std::io::Error>>>, Arc<AtomicU64>);

fn write_latest<T: Serialize>(inbox: Receiver<Job<T>>, path: PathBuf, (failed, spent): Shared) {
    let mut pace = Pace::default();
    let mut latest: Option<Arc<T>> = None;
    loop {
        let first = match pace.next(&inbox, latest.is_some()) {
            Next::Message(job) => Some(job),
            Next::Due => None,
            Next::Closed => {
                if let Some(state) = latest.take() {
                    write(&path, &*state, Durability::Commit, &failed, &spent);
                }
                return;
            }
        };
        let mut durability = Durability::Atomic;
        let mut flushes = Vec::new();
        for job in first.into_iter().chain(inbox.try_iter()) {
            match job {
                Job::Save(state, wanted) => {
                    latest = Some(state);
                    if wanted == Durability::Commit {
                        durability = Durability::Commit;
                    }
                }
                Job::Flush(done) => flushes.push(done),
            }
        }
        let urgent = durability == Durability::Commit || !flushes.is_empty();
        if pace.due(urgent)
            && let Some(state) = latest.take()
        {
            write(&path, &*state, durability, &failed, &spent);
            pace.wrote();
        }
        for done in flushes {
            let _ = done.send(());
        }
    }
}

fn write<T: Serialize>(
    path: &Path,
    state: &T,
    durability: Durability,
    failed: &Mutex<Option<std::io::Error>>,
    spent: &AtomicU64,
) {
    let started = Instant::now();
    if let Err(e) = super::write_json_atomic(path, state, durability)
        && let Ok(mut failed) = failed.lock()
    {
        failed.get_or_insert(e);
    }
    let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
    spent.fetch_add(nanos, Ordering::Relaxed);
}
