//! Ctrl-C and SIGTERM on the parent, and a closed stdout or stderr (the
//! reader of a pipe went away), which troupe takes as the same request.
//! The first asks politely: new work stops, every running child is
//! cancelled the usual way (cancel, grace, kill) and the records are
//! written. The second signal kills every child at once.

use tokio::signal::unix::{SignalKind, signal};

use crate::signal::{Interruption, StopCause, StopSignal};

/// The exit code of an interrupted troupe (128 + SIGINT).
pub const EXIT_INTERRUPTED: u8 = 130;

/// The watch over the process's signals. Whether a stop was an
/// interruption is for its cause to say (`StopCause::Interrupted`), not
/// for a flag kept here: a stop that the deadline gave first stays the
/// deadline's when Ctrl-C comes during its grace period.
#[derive(Clone, Default)]
pub struct Interrupts {
    /// The second signal.
    hard: StopSignal<Interruption>,
}

impl Interrupts {
    /// Nothing watched until `watch`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts watching SIGINT and SIGTERM; the first signal triggers
    /// `stop`, the second kills every child.
    pub fn watch(&self, stop: StopSignal) -> std::io::Result<()> {
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        let watcher = self.clone();
        tokio::spawn(async move {
            for round in 0..2 {
                let closed = crate::console::closed();
                let by = tokio::select! {
                    _ = int.recv() => Interruption::Sigint,
                    _ = term.recv() => Interruption::Sigterm,
                    by = closed.stopped(), if round == 0 => by,
                };
                if round == 0 {
                    crate::tell!("troupe: {by}: stopping every agent (again to kill them at once)");
                    stop.trigger(StopCause::Interrupted(by));
                } else {
                    crate::tell!("troupe: {by} again: killing every agent now");
                    crate::process::session::kill_all_now();
                    watcher.hard.trigger(by);
                }
            }
        });
        Ok(())
    }

    /// Resolves on the second signal, after every child was killed, with
    /// that signal.
    pub async fn killed(&self) -> Interruption {
        self.hard.stopped().await
    }
}
