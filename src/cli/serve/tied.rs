//! The troupes a session's blocking calls started (an agent's
//! supervisor, a run), each asked to stop at most once.
//!
//! A troupe takes a second SIGTERM as "kill every agent now, records
//! unwritten", and three things may ask one of these to stop: the host's
//! cancel of the call, the host's leaving, and the future of the call
//! being dropped. So every such request goes through the one `Tied` of
//! the process, which sends SIGTERM once; and the session's end waits
//! for them to exit, so that the server's own end (which each of them
//! watches, `--tied-to`) does not ask again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

pub struct Tied {
    pid: Pid,
    asked: AtomicBool,
    exited: AtomicBool,
}

impl Tied {
    pub fn new(pid: u32) -> Arc<Tied> {
        Arc::new(Tied {
            pid: Pid::from_raw(i32::try_from(pid).unwrap_or(0)),
            asked: AtomicBool::new(false),
            exited: AtomicBool::new(false),
        })
    }

    /// Asks it to stop (SIGTERM: it cancels its agents, waits out their
    /// grace, keeps the records), unless it was asked or has exited.
    pub fn stop(&self) {
        if self.pid.as_raw() > 0 && !self.exited.load(Ordering::SeqCst) && self.claim() {
            let _ = kill(self.pid, Signal::SIGTERM);
        }
    }

    /// Takes the one request to stop it, for a caller that sends it
    /// another way (`terminate_sub_agent`): false when it was taken.
    pub fn claim(&self) -> bool {
        !self.asked.swap(true, Ordering::SeqCst)
    }

    /// It exited and was waited for: its pid is no longer its own.
    pub fn exited(&self) {
        self.exited.store(true, Ordering::SeqCst);
    }

    /// It is no longer the call's to stop (a run left in the
    /// background).
    pub fn let_go(&self) {
        self.exited();
    }

    pub fn has_exited(&self) -> bool {
        self.exited.load(Ordering::SeqCst)
    }
}

/// Stops its troupe when dropped before it exited: the call's future was
/// dropped (its host went away).
pub struct StopOnDrop(pub Arc<Tied>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop();
    }
}
