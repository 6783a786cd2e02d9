//! Ctrl-C and SIGTERM on the parent. The first asks politely: new work
//! stops, every running child is cancelled the usual way (cancel, grace,
//! kill) and the records are written. The second kills every child at once.

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
                let name = tokio::select! {
                    _ = int.recv() => "SIGINT",
                    _ = term.recv() => "SIGTERM",
                };
                if round == 0 {
                    watcher.interrupted.store(true, Ordering::SeqCst);
                    eprintln!("troupe: {name}: stopping every agent (again to kill them at once)");
                    stop.trigger(format!("interrupted by {name}"));
                } else {
                    eprintln!("troupe: {name} again: killing every agent now");
                    super::session::kill_all_now();
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
