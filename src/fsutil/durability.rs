//! How far a write must reach before troupe goes on.
//!
//! Every record is atomic either way: written aside and renamed into
//! place, so a reader, or a kill of any process, finds the old copy or
//! the new one whole. Flushing to the disk (`fsync` of the data and of
//! the directory) is what costs; troupe pays it at the points a resume
//! depends on, its commit points: the task file before an agent starts,
//! the sealed transcript and the result when it ends, the run's record at
//! each step's end and at `run_finished`. Between them a power cut may
//! lose the turns since the last commit point. `--durability strict`
//! flushes every write; the mode itself is the task file's
//! (`protocol::DurabilityMode`), since the agent keeps to it too.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::protocol::DurabilityMode;

/// What one write needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Atomic; flushed only under `--durability strict`.
    Atomic,
    /// Atomic and flushed to the disk before the write returns.
    Commit,
}

static STRICT: AtomicBool = AtomicBool::new(false);

/// Sets the mode for the whole process, before its first record.
pub fn set_mode(mode: DurabilityMode) {
    STRICT.store(mode == DurabilityMode::Strict, Ordering::Relaxed);
}

impl Durability {
    /// Whether this write flushes, in this process's mode.
    pub fn flushes(self) -> bool {
        self == Durability::Commit || STRICT.load(Ordering::Relaxed)
    }
}
