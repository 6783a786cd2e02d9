//! A stop request that many waiters can watch, carrying its cause, used
//! on both sides of the pipe: the parent's stop of a run or of `troupe
//! spawn` ([`StopCause`]) and the child's cancel (its own cause, in
//! `agent`). The first cause given wins.
//!
//! The signal is generic over its cause so that each side matches only
//! the causes it can meet: a run deciding how it ended gives a status to
//! every [`StopCause`], and never has to give one to a `cancel` message
//! that only a child receives.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// Why the parent stops its agents, or stops starting them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopCause {
    /// The run's `--deadline` passed: every agent is stopped.
    Deadline(Duration),
    /// Ctrl-C, SIGTERM or a closed output: every agent is stopped, and
    /// what was cut short is run again by `--resume`.
    Interrupted(Interruption),
    /// A budget of the run is spent: no new agent starts, and those
    /// running finish. The run's owner notes it; it never triggers the
    /// run's signal, which would stop the running agents too.
    Budget(Exhausted),
}

impl fmt::Display for StopCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopCause::Deadline(after) => write!(
                f,
                "the run's deadline of {} s passed (--deadline)",
                after.as_secs()
            ),
            StopCause::Interrupted(by @ (Interruption::Sigint | Interruption::Sigterm)) => {
                write!(f, "interrupted by {by}")
            }
            StopCause::Interrupted(by @ Interruption::Closed(_)) => write!(f, "interrupted: {by}"),
            StopCause::Budget(exhausted) => exhausted.fmt(f),
        }
    }
}

/// What interrupted troupe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interruption {
    /// Ctrl-C.
    Sigint,
    Sigterm,
    /// This output (`stdout`, `stderr`) could not be written: its reader
    /// went away (`troupe run ... | head`).
    Closed(&'static str),
}

impl fmt::Display for Interruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Interruption::Sigint => f.write_str("SIGINT"),
            Interruption::Sigterm => f.write_str("SIGTERM"),
            Interruption::Closed(output) => write!(f, "its {output} was closed"),
        }
    }
}

/// Which of a run's budgets is spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exhausted {
    /// It started `max` agents (`--max-agents`).
    Agents { max: u32 },
    /// It spent `spent` tokens of its `max` (`--max-tokens`).
    Tokens { spent: u64, max: u64 },
    /// It spent `spent_micros` millionths of a dollar of its `max_micros`
    /// (`--max-cost`).
    Cost { spent_micros: u64, max_micros: u64 },
}

impl fmt::Display for Exhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exhausted::Agents { max } => write!(
                f,
                "the run started its {max} agents (--max-agents); no new agent starts"
            ),
            Exhausted::Tokens { spent, max } => write!(
                f,
                "the run spent {spent} tokens of its {max} (--max-tokens); no new agent starts"
            ),
            Exhausted::Cost {
                spent_micros,
                max_micros,
            } => write!(
                f,
                "the run spent ${:.4} of its ${:.2} (--max-cost); no new agent starts",
                *spent_micros as f64 / 1e6,
                *max_micros as f64 / 1e6
            ),
        }
    }
}

#[derive(Clone)]
pub struct StopSignal<C = StopCause> {
    tx: Arc<watch::Sender<Option<C>>>,
    rx: watch::Receiver<Option<C>>,
}

impl<C> Default for StopSignal<C> {
    fn default() -> Self {
        let (tx, rx) = watch::channel(None);
        StopSignal {
            tx: Arc::new(tx),
            rx,
        }
    }
}

impl<C: Clone> StopSignal<C> {
    /// Stops, for `cause`, unless already stopped.
    pub fn trigger(&self, cause: C) {
        self.tx.send_if_modified(|current| {
            let first = current.is_none();
            if first {
                *current = Some(cause);
            }
            first
        });
    }

    /// The cause, once stopped.
    pub fn cause(&self) -> Option<C> {
        self.rx.borrow().clone()
    }

    /// Resolves with the cause when the stop is triggered; never when it
    /// is not.
    pub async fn stopped(&self) -> C {
        let mut rx = self.rx.clone();
        let cause = match rx.wait_for(Option::is_some).await {
            Ok(cause) => cause.clone(),
            Err(_) => None,
        };
        match cause {
            Some(cause) => cause,
            None => std::future::pending().await,
        }
    }

    /// Runs `work` unless stopped first; on a stop the work is dropped,
    /// which kills any command it was running.
    pub async fn race<T>(&self, work: impl Future<Output = T>) -> Result<T, C> {
        tokio::select! {
            biased;
            cause = self.stopped() => Err(cause),
            done = work => Ok(done),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_first_cause_wins() {
        let stop = StopSignal::default();
        stop.trigger(StopCause::Deadline(Duration::from_secs(5)));
        stop.trigger(StopCause::Interrupted(Interruption::Sigint));
        assert_eq!(
            stop.stopped().await,
            StopCause::Deadline(Duration::from_secs(5))
        );
        assert_eq!(
            stop.cause(),
            Some(StopCause::Deadline(Duration::from_secs(5)))
        );
    }

    #[test]
    fn each_cause_says_what_it_was_as_before() {
        let said = |cause: StopCause| cause.to_string();
        assert_eq!(
            said(StopCause::Interrupted(Interruption::Sigint)),
            "interrupted by SIGINT"
        );
        assert_eq!(
            said(StopCause::Interrupted(Interruption::Closed("stdout"))),
            "interrupted: its stdout was closed"
        );
        assert_eq!(
            said(StopCause::Deadline(Duration::from_secs(2))),
            "the run's deadline of 2 s passed (--deadline)"
        );
        assert_eq!(
            said(StopCause::Budget(Exhausted::Tokens { spent: 12, max: 10 })),
            "the run spent 12 tokens of its 10 (--max-tokens); no new agent starts"
        );
    }
}
