//! How often a writer thread rewrites a record between commit points.
//!
//! A state that changes nothing a resume depends on (a turn, a heartbeat,
//! a counter) may wait a little for the next one, and only the latest is
//! written: a busy run rewrites its records a few times a second instead
//! of at every event, which on a file system that allocates inodes slowly
//! is most of what a record costs. A commit or a flush is written at once.
//!
//! `keep_latest` is the loop of such a thread, for every writer that keeps
//! a record this way (`LatestWriter`, the run's recorder).

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use super::Durability;

/// What one message to a writer thread amounts to.
pub enum Taken<T> {
    /// The record's new state, and whether it must reach the disk.
    State(Arc<T>, Durability),
    /// Nothing to write for the record, but the round must reach
    /// `durability` (an event appended elsewhere at a commit point).
    Only(Durability),
    /// Answer once everything before is written.
    Flush(Sender<()>),
}

/// One writer thread's own part: how it reads its messages and writes its
/// record.
pub trait Keeper<M> {
    type State;
    /// Sorts one message, doing at once whatever it needs beyond the
    /// record (an event line appended).
    fn take(&mut self, message: M) -> Taken<Self::State>;
    /// After a round of messages, before the record is written: make what
    /// `take` did reach `durability`.
    fn settle(&mut self, _durability: Durability) {}
    fn write(&mut self, state: &Self::State, durability: Durability);
}

/// Takes what is waiting, writes the latest state when it is due, answers
/// flushes, and blocks for more; at the end, writes what is pending as a
/// commit.
pub fn keep_latest<M, K: Keeper<M>>(inbox: Receiver<M>, mut keeper: K) {
    let mut pace = Pace::default();
    let mut latest: Option<Arc<K::State>> = None;
    loop {
        let first = match pace.next(&inbox, latest.is_some()) {
            Next::Message(message) => Some(message),
            Next::Due => None,
            Next::Closed => {
                if let Some(state) = latest.take() {
                    keeper.write(&state, Durability::Commit);
                }
                return;
            }
        };
        let mut durability = Durability::Atomic;
        let mut flushes = Vec::new();
        for message in first.into_iter().chain(inbox.try_iter()) {
            let wanted = match keeper.take(message) {
                Taken::State(state, wanted) => {
                    latest = Some(state);
                    wanted
                }
                Taken::Only(wanted) => wanted,
                Taken::Flush(done) => {
                    flushes.push(done);
                    Durability::Atomic
                }
            };
            if wanted == Durability::Commit {
                durability = Durability::Commit;
            }
        }
        keeper.settle(durability);
        let urgent = durability == Durability::Commit || !flushes.is_empty();
        if pace.due(urgent)
            && let Some(state) = latest.take()
        {
            keeper.write(&state, durability);
            pace.wrote();
        }
        for done in flushes {
            let _ = done.send(());
        }
    }
}

/// How long a pending state may wait.
pub const SETTLE: Duration = Duration::from_millis(50);

#[derive(Debug, Default)]
struct Pace {
    written_at: Option<Instant>,
}

/// What the writer does next.
enum Next<T> {
    Message(T),
    /// A pending state is due.
    Due,
    /// Every sender is gone.
    Closed,
}

impl Pace {
    /// Waits for the next message; with a state pending, only until it is
    /// due.
    fn next<T>(&self, inbox: &Receiver<T>, pending: bool) -> Next<T> {
        let received = match pending {
            false => inbox.recv().map_err(|_| RecvTimeoutError::Disconnected),
            true => inbox.recv_timeout(SETTLE.saturating_sub(self.since())),
        };
        match received {
            Ok(message) => Next::Message(message),
            Err(RecvTimeoutError::Timeout) => Next::Due,
            Err(RecvTimeoutError::Disconnected) => Next::Closed,
        }
    }

    /// Whether a state should be written now: `urgent` (a commit point, a
    /// flush), or the last write is long enough ago.
    fn due(&self, urgent: bool) -> bool {
        urgent || self.since() >= SETTLE
    }

    /// Notes a write.
    fn wrote(&mut self) {
        self.written_at = Some(Instant::now());
    }

    fn since(&self) -> Duration {
        self.written_at.map_or(SETTLE, |at| at.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_state_waits_no_longer_than_the_settle_time() {
        let (tx, rx) = std::sync::mpsc::channel::<u32>();
        let mut pace = Pace::default();
        assert!(pace.due(false), "nothing written yet");
        pace.wrote();
        assert!(!pace.due(false));
        assert!(pace.due(true), "a commit is never held back");
        let started = Instant::now();
        assert!(matches!(pace.next(&rx, true), Next::Due));
        assert!(
            started.elapsed() < SETTLE * 20,
            "woke for the pending state"
        );
        tx.send(7).unwrap();
        assert!(matches!(pace.next(&rx, false), Next::Message(7)));
        drop(tx);
        assert!(matches!(pace.next(&rx, false), Next::Closed));
    }
}
