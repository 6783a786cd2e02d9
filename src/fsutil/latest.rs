//! A JSON record kept current by a thread of its own, so that the thread
//! that runs agents never waits for the disk: each `save` hands over the
//! record's new state (an `Arc`, which the owner changes copy-on-write),
//! and the thread writes the latest one atomically, at most every 50 ms
//! between commit points (see `pace`), coalescing the states between.
//! `commit` hands over a state that must reach the disk (a commit point, see `durability`) and waits for
//! it; `flush` waits until what was handed over is written.

use std::path::PathBuf;
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::Durability;
use super::pace::{Keeper, Taken, keep_latest};

enum Job<T> {
    Save(Arc<T>, Durability),
    Flush(Sender<()>),
}

pub struct LatestWriter<T> {
    jobs: Sender<Job<T>>,
    /// The first write that failed, said at the next flush.
    failed: Arc<Mutex<Option<std::io::Error>>>,
}

impl<T: Serialize + Send + Sync + 'static> LatestWriter<T> {
    /// A writer of `path`, on a thread named `name`.
    pub fn spawn(path: PathBuf, name: &str) -> std::io::Result<Self> {
        let (jobs, inbox) = channel();
        let failed = Arc::new(Mutex::new(None));
        let keeper = Latest {
            path,
            failed: Arc::clone(&failed),
        };
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || keep_latest(inbox, keeper))?;
        Ok(LatestWriter { jobs, failed })
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
}

/// The writer thread's part: the latest state wins; a failed write is
/// kept for the next check.
struct Latest {
    path: PathBuf,
    failed: Arc<Mutex<Option<std::io::Error>>>,
}

impl<T: Serialize> Keeper<Job<T>> for Latest {
    type State = T;

    fn take(&mut self, job: Job<T>) -> Taken<T> {
        match job {
            Job::Save(state, durability) => Taken::State(state, durability),
            Job::Flush(done) => Taken::Flush(done),
        }
    }

    fn write(&mut self, state: &T, durability: Durability) {
        if let Err(e) = super::write_json_atomic(&self.path, state, durability)
            && let Ok(mut failed) = self.failed.lock()
        {
            failed.get_or_insert(e);
        }
    }
}
