//! What one host's session holds: the agents and runs it started in the
//! background (for notices and `wait_sub_agents`), the results it was
//! already given, the notices not yet delivered, and its subscriptions.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::Serialize;
use serde_json::Value;

use super::tied::Tied;

/// One ended agent or run.
#[derive(Debug, Clone, Serialize)]
pub struct Notice {
    /// `agent N` or `run RUN_ID`: whose end it is.
    #[serde(skip)]
    pub key: String,
    /// The seed's completion text.
    pub text: String,
    /// The agent's result object, or the run's id and status.
    pub result: Value,
}

#[derive(Default)]
pub struct Session {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Agents started in the background, in the order they were.
    agents: Vec<String>,
    /// Runs started in the background, with their `troupe run`'s pid.
    runs: Vec<(String, u32)>,
    /// Agents whose result a call of this session returned.
    returned: HashSet<String>,
    /// Agents and runs whose end was noticed.
    noticed: HashSet<String>,
    /// Notices not yet carried by a tool result.
    pending: Vec<Notice>,
    /// Resources the host subscribed to, and whether their agent had
    /// ended when last looked at.
    subscribed: BTreeMap<String, bool>,
    /// The troupes of blocking calls under way, by agent id or run id.
    tied: HashMap<String, Arc<Tied>>,
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
        self.with(|s| s.runs.push((run_id.to_string(), pid)));
    }

    /// A blocking call's troupe, while the call is under way.
    pub fn tie(&self, key: &str, tied: Arc<Tied>) {
        self.with(|s| s.tied.insert(key.to_string(), tied));
    }

    pub fn untie(&self, key: &str) {
        self.with(|s| s.tied.remove(key));
    }

    /// The troupe of the blocking call under way for `key`, if any.
    pub fn tied_to(&self, key: &str) -> Option<Arc<Tied>> {
        self.with(|s| s.tied.get(key).cloned())
    }

    /// The troupes of the blocking calls under way.
    pub fn tied(&self) -> Vec<Arc<Tied>> {
        self.with(|s| s.tied.values().cloned().collect())
    }

    /// Interrupts the background runs whose end was not noticed yet and
    /// that `under_way` says still run: a run that ended no longer owns
    /// its pid.
    pub fn stop_background_runs(&self, under_way: impl Fn(&str) -> bool) {
        let open: Vec<(String, u32)> = self.with(|s| {
            s.runs
                .iter()
                .filter(|(run, _)| !s.noticed.contains(&run_key(run)))
                .cloned()
                .collect()
        });
        for (run, pid) in open {
            if under_way(&run) {
                let _ = kill(
                    Pid::from_raw(i32::try_from(pid).unwrap_or(0)),
                    Signal::SIGTERM,
                );
            }
        }
    }

    pub fn background_agents(&self) -> Vec<String> {
        self.with(|s| s.agents.clone())
    }

    /// Agents and runs started in the background whose end is not yet
    /// noticed.
    pub fn unnoticed(&self) -> (Vec<String>, Vec<String>) {
        self.with(|s| {
            let open = |ids: Vec<&String>, key: fn(&str) -> String| -> Vec<String> {
                ids.into_iter()
                    .filter(|id| !s.noticed.contains(&key(id)))
                    .cloned()
                    .collect()
            };
            let runs = s.runs.iter().map(|(run, _)| run).collect();
            (
                open(s.agents.iter().collect(), agent_key),
                open(runs, run_key),
            )
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
