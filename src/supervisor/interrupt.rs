//! Ctrl-C and SIGTERM on the parent, and a closed stdout or stderr (the
//! reader of a pipe went away), which troupe takes as the same request.
//! The first asks politely: new work stops, every running child is
//! cancelled the usual way (cancel, grace, kill) and the records are
//! written. The second signal kills every child at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::signal::unix::{SignalKind, signal};

use crate::signal::StopSignal;

/// The exit code of an interrupted troupe (128 + SIGINT).
pub const EXIT_INTERRUPTED: u8 = 130;

#[derive(Clone)]
pub struct Interrupts {
    interrupted: Arc<AtomicBool>,
    hard: StopSignal,
}

impl Default for Interrupts {
    fn default() -> Self {
        Self::new()
    }
}

impl Interrupts {
    /// Nothing interrupted yet, and nothing watched until `watch`.
    pub fn new() -> Self {
        Interrupts {
            interrupted: Arc::new(AtomicBool::new(false)),
            hard: StopSignal::default(),
        }
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
                let (name, reason) = tokio::select! {
                    _ = int.recv() => ("SIGINT".to_string(), "interrupted by SIGINT".to_string()),
                    _ = term.recv() => ("SIGTERM".to_string(), "interrupted by SIGTERM".to_string()),
                    why = closed.stopped(), if round == 0 => (why.clone(), format!("interrupted: {why}")),
                };
                if round == 0 {
                    watcher.interrupted.store(true, Ordering::SeqCst);
                    crate::tell!(
                        "troupe: {name}: stopping every agent (again to kill them at once)"
                    );
                    stop.trigger(reason);
                } else {
                    crate::tell!("troupe: {name} again: killing every agent now");
                    crate::process::session::kill_all_now();
                    watcher.hard.trigger(format!("interrupted twice ({name})"));
                }
            }
        });
        Ok(())
    }

    pub fn interrupted(&self) -> bool {
        self.interrupted.load(Ordering::SeqCst)
    }

    /// Resolves on the second signal, after every child was killed.
    pub async fn killed(&self) -> String {
        self.hard.stopped().await
    }
}
