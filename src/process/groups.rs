//! The process groups an agent's commands run in, so none outlives it.
//!
//! `run_command` gives each command a group of its own, which is what lets
//! its timeout kill the whole pipeline it started. The agent remembers each
//! group here and kills them all when it ends or is cancelled; the parent's
//! kill of the agent's session covers the case where the agent itself is
//! killed first.

use std::collections::BTreeSet;
use std::sync::Mutex;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

#[derive(Debug, Default)]
pub struct ProcessGroups {
    groups: Mutex<BTreeSet<i32>>,
}

impl ProcessGroups {
    pub fn add(&self, pgid: i32) {
        if let Ok(mut groups) = self.groups.lock() {
            groups.insert(pgid);
        }
    }

    /// SIGKILL to every group a command was started in. Groups already gone
    /// are skipped silently: "already exited" counts as killed.
    pub fn kill_all(&self) {
        let groups = match self.groups.lock() {
            Ok(mut groups) => std::mem::take(&mut *groups),
            Err(_) => return,
        };
        for pgid in groups {
            kill_group(pgid);
        }
    }
}

/// SIGKILL to one process group; a group that no longer exists is fine.
pub fn kill_group(pgid: i32) {
    if pgid > 1 {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
}

/// Kills a command's group when dropped while armed: when the tool call is
/// abandoned (the agent was cancelled) the command dies with it.
pub struct GroupGuard {
    pgid: i32,
    armed: bool,
}

impl GroupGuard {
    pub fn new(pgid: i32) -> Self {
        GroupGuard { pgid, armed: true }
    }

    pub fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            kill_group(self.pgid);
        }
    }
}
