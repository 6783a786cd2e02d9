//! What one host's session holds: the agents and runs it started in the
//! background (for notices and `wait_sub_agents`), the results it was
//! already given, the notices not yet delivered, and its subscriptions.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::notices::Notice;

#[derive(Default)]
pub struct Session {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Agents started in the background, in the order they were.
    agents: Vec<String>,
    /// Runs started in the background.
    runs: Vec<String>,
    /// Agents whose result a call of this session returned.
    returned: HashSet<String>,
    /// Agents and runs whose end was noticed.
    noticed: HashSet<String>,
    /// Notices not yet carried by a tool result.
    pending: Vec<Notice>,
    /// Resources the host subscribed to, and whether their agent had
    /// ended when last looked at.
    subscribed: BTreeMap<String, bool>,
    /// Agents of blocking calls under way.
    tied_agents: HashSet<String>,
    /// The `troupe run` processes of blocking calls under way.
    tied_runs: HashSet<u32>,
    /// The `troupe run` process of each background run.
    run_pids: HashMap<String, u32>,
}

impl Session {
    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        f(&mut state)
    }

    pub fn watch_agent(&self, id: &str) {
        self.with(|s| s.agents.push(id.to_string()));
    }

    pub fn watch_run(&self, run_id: &str, pid: u32) {
        self.with(|s| {
            s.runs.push(run_id.to_string());
            s.run_pids.insert(run_id.to_string(), pid);
        });
    }

    pub fn tie_agent(&self, id: &str) {
        self.with(|s| s.tied_agents.insert(id.to_string()));
    }

    pub fn untie_agent(&self, id: &str) {
        self.with(|s| s.tied_agents.remove(id));
    }

    pub fn tied_agents(&self) -> Vec<String> {
        self.with(|s| s.tied_agents.iter().cloned().collect())
    }

    pub fn tie_run(&self, pid: u32) {
        self.with(|s| s.tied_runs.insert(pid));
    }

    pub fn untie_run(&self, pid: u32) {
        self.with(|s| s.tied_runs.remove(&pid));
    }

    /// Interrupts the runs of blocking calls under way (as Ctrl-C would:
    /// `troupe run --resume` continues them).
    pub fn stop_tied_runs(&self) {
        for pid in self.with(|s| s.tied_runs.iter().copied().collect::<Vec<_>>()) {
            Tied::new(pid).stop();
        }
    }

    /// Interrupts the background runs whose end was not noticed yet.
    pub fn stop_background_runs(&self) {
        let open: Vec<u32> = self.with(|s| {
            s.run_pids
                .iter()
                .filter(|(run, _)| !s.noticed.contains(&run_key(run)))
                .map(|(_, pid)| *pid)
                .collect()
        });
        for pid in open {
            Tied::new(pid).stop();
        }
    }

    pub fn background_agents(&self) -> Vec<String> {
        self.with(|s| s.agents.clone())
    }

    /// Agents and runs started in the background whose end is not yet
    /// noticed.
    pub fn unnoticed(&self) -> (Vec<String>, Vec<String>) {
        self.with(|s| {
            let open = |list: &[String], key: fn(&str) -> String| -> Vec<String> {
                list.iter()
                    .filter(|id| !s.noticed.contains(&key(id)))
                    .cloned()
                    .collect()
            };
            (open(&s.agents, agent_key), open(&s.runs, run_key))
        })
    }

    /// Keeps the notice of an end, once.
    pub fn notice(&self, notice: Notice) -> bool {
        self.with(|s| {
            if !s.noticed.insert(notice.key.clone()) {
                return false;
            }
            s.pending.push(notice);
            true
        })
    }

    /// The notices no tool result carried yet; they are carried now.
    pub fn take_notices(&self) -> Vec<Notice> {
        self.with(|s| std::mem::take(&mut s.pending))
    }

    /// A call returned agent `id`'s result: no notice need tell of its
    /// end again.
    pub fn returned(&self, id: &str) {
        let key = agent_key(id);
        self.with(|s| {
            s.returned.insert(id.to_string());
            s.noticed.insert(key.clone());
            s.pending.retain(|notice| notice.key != key);
        });
    }

    pub fn was_returned(&self, id: &str) -> bool {
        self.with(|s| s.returned.contains(id))
    }

    /// Subscribes to `uri`, whose agent has `ended` already or not.
    pub fn subscribe(&self, uri: &str, ended: bool) {
        self.with(|s| s.subscribed.insert(uri.to_string(), ended));
    }

    pub fn unsubscribe(&self, uri: &str) {
        self.with(|s| s.subscribed.remove(uri));
    }

    /// The subscribed resources whose agent ended since the last look,
    /// as `ended` tells of a URI.
    pub fn updated_subscriptions(&self, ended: impl Fn(&str) -> bool) -> Vec<String> {
        let watched: Vec<String> = self.with(|s| {
            s.subscribed
                .iter()
                .filter(|(_, was)| !**was)
                .map(|(uri, _)| uri.clone())
                .collect()
        });
        let now: Vec<String> = watched.into_iter().filter(|uri| ended(uri)).collect();
        self.with(|s| {
            for uri in &now {
                if let Some(was) = s.subscribed.get_mut(uri) {
                    *was = true;
                }
            }
        });
        now
    }
}

pub fn agent_key(id: &str) -> String {
    format!("agent {id}")
}

pub fn run_key(id: &str) -> String {
    format!("run {id}")
}

/// The supervisor of a blocking call, stopped (SIGTERM: it cancels its
/// agent, waits out the grace, keeps the records) when the call is
/// cancelled or dropped before the supervisor ended: the host gave up on
/// it, or went away.
pub struct Tied {
    pid: Pid,
    ended: bool,
}

impl Tied {
    pub fn new(pid: u32) -> Tied {
        Tied {
            pid: Pid::from_raw(i32::try_from(pid).unwrap_or(0)),
            ended: false,
        }
    }

    pub fn stop(&self) {
        if self.pid.as_raw() > 0 {
            let _ = kill(self.pid, Signal::SIGTERM);
        }
    }

    /// The supervisor ended (and was waited for): nothing to stop.
    pub fn ended(mut self) {
        self.ended = true;
    }
}

impl Drop for Tied {
    fn drop(&mut self) {
        if !self.ended {
            self.stop();
        }
    }
}
