//! How often a writer thread rewrites a record between commit points.
//!
//! A state that changes nothing a resume depends on (a turn, a heartbeat,
//! a counter) may wait a little for the next one, and only the latest is
//! written: a busy run rewrites its records a few times a second instead
//! of at every event, which on a file system that allocates inodes slowly
//! is most of what a record costs. A commit or a flush is written at once.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How long a pending state may wait.
pub const SETTLE: Duration = Duration::from_millis(50);

#[derive(Debug, Default)]
pub struct Pace {
    written_at: Option<Instant>,
}

/// What the writer does next.
pub enum Next<T> {
    Message(T),
    /// A pending state is due.
    Due,
    /// Every sender is gone.
    Closed,
}

impl Pace {
    /// Waits for the next message; with a state pending, only until it is
    /// due.
    pub fn next<T>(&self, inbox: &Receiver<T>, pending: bool) -> Next<T> {
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
    pub fn due(&self, urgent: bool) -> bool {
        urgent || self.since() >= SETTLE
    }

    /// Notes a write.
    pub fn wrote(&mut self) {
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
