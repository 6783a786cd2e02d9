//! Killing everything a child started, found by its session.
//!
//! A child is started as the leader of a new session. Every process it
//! starts stays in that session, even in a process group of its own (as
//! `run_command` does), and keeps it after the child dies. So the session
//! id names the whole tree, orphans included, and `/proc` lists it.

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::{Pid, getsid};

/// The live members of session `sid` (zombies are dead and left out).
/// `getsid` on every pid is one cheap syscall each; only the few that
/// match have their `/proc/PID/stat` read, to leave zombies out.
pub fn members(sid: u32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let Ok(sid) = i32::try_from(sid) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| getsid(Some(Pid::from_raw(pid))).is_ok_and(|s| s.as_raw() == sid))
        .filter(|&pid| state_of(pid).is_some_and(|state| state != 'Z'))
        .collect()
}

/// The state letter from `/proc/PID/stat`. The command name may hold
/// spaces and parentheses, so the field is found after its last `)`.
fn state_of(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// SIGKILL to every process of session `sid`, repeated until none is left
/// or `patience` runs out. Returns the pids still alive (empty on success).
/// Each scan of `/proc` runs off the agents' thread.
pub async fn kill_session(sid: u32, patience: Duration) -> Vec<i32> {
    let Ok(leader) = i32::try_from(sid) else {
        return Vec::new();
    };
    // The child itself too: it may not have taken its session yet.
    let _ = kill(Pid::from_raw(leader), Signal::SIGKILL);
    let _ = killpg(Pid::from_raw(leader), Signal::SIGKILL);
    let give_up = crate::deadline::after(Instant::now(), patience);
    loop {
        let alive = tokio::task::spawn_blocking(move || members(sid))
            .await
            .unwrap_or_default();
        if alive.is_empty() || Instant::now() >= give_up {
            return alive;
        }
        for pid in &alive {
            let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The sessions of the children alive right now, so a second Ctrl-C can
/// kill them all at once. Each child is in it from spawn to reaping.
static LIVE: std::sync::Mutex<std::collections::BTreeSet<u32>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

pub fn register(sid: u32) {
    if let Ok(mut live) = LIVE.lock() {
        live.insert(sid);
    }
}

pub fn unregister(sid: u32) {
    if let Ok(mut live) = LIVE.lock() {
        live.remove(&sid);
    }
}

/// SIGKILL to every live child's session, without waiting.
pub fn kill_all_now() {
    let live: Vec<u32> = LIVE
        .lock()
        .map(|live| live.iter().copied().collect())
        .unwrap_or_default();
    for sid in live {
        let Ok(leader) = i32::try_from(sid) else {
            continue;
        };
        let _ = killpg(Pid::from_raw(leader), Signal::SIGKILL);
        for pid in members(sid) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}
