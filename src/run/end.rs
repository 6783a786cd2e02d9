//! How a run ends, and the one match that turns it into run.json's
//! status and troupe's exit code (the README lists them). A run its signal
//! stopped (the deadline, Ctrl-C) ends as that cause says, whatever its
//! steps; otherwise it completed when every step is done, reached its
//! limit when a budget kept a step from starting, and failed when a step
//! did not make it.

use crate::record::RunStatus;
use crate::signal::{Exhausted, StopCause};
use crate::supervisor::interrupt::EXIT_INTERRUPTED;

/// Exit codes, as the README lists them.
pub const EXIT_FAILED: u8 = 1;
pub const EXIT_DEADLINE: u8 = 124;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// Every step is done: approved, or accepted unreviewed.
    Completed,
    /// A step is not done, and nothing stopped the run.
    Failed,
    /// Stopped by this cause.
    Stopped(StopCause),
}

impl RunEnd {
    /// The end of a run whose signal has `signal` as its cause, if it was
    /// triggered, and one of whose budgets is `exhausted`, if one is. A
    /// spent budget only keeps agents from starting, so it ends a run
    /// only when that left a step undone.
    pub fn new(signal: Option<StopCause>, all_done: bool, exhausted: Option<Exhausted>) -> Self {
        match (signal, all_done, exhausted) {
            (Some(cause), _, _) => RunEnd::Stopped(cause),
            (None, true, _) => RunEnd::Completed,
            (None, false, Some(budget)) => RunEnd::Stopped(StopCause::Budget(budget)),
            (None, false, None) => RunEnd::Failed,
        }
    }

    /// run.json's status and the exit code.
    pub fn status(self) -> (RunStatus, u8) {
        match self {
            RunEnd::Completed => (RunStatus::Completed, 0),
            RunEnd::Failed => (RunStatus::Failed, EXIT_FAILED),
            RunEnd::Stopped(StopCause::Deadline(_)) => (RunStatus::DeadlineExceeded, EXIT_DEADLINE),
            RunEnd::Stopped(StopCause::Interrupted(_)) => {
                (RunStatus::Interrupted, EXIT_INTERRUPTED)
            }
            // What the run did is kept, its reason the limit; exit 1, as
            // scripts saw before `limit_reached` was a status of its own.
            RunEnd::Stopped(StopCause::Budget(_)) => (RunStatus::LimitReached, EXIT_FAILED),
        }
    }
}
