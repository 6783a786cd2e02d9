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

impl Interrupts {
    /// Starts watching; the first signal triggers `stop`.
    pub fn watch(stop: StopSignal) -> std::io::Result<Self> {
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        let interrupts = Interrupts {
            interrupted: Arc::new(AtomicBool::new(false)),
            hard: StopSignal::default(),
        };
        let watcher = interrupts.clone();
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
        Ok(interrupts)
    }

    pub fn interrupted(&self) -> bool {
        self.interrupted.load(Ordering::SeqCst)
    }

    /// Resolves on the second signal, after every child was killed.
    pub async fn killed(&self) -> String {
        self.hard.stopped().await
    }
}
