//! "Still running" lines: an agent of a run that has said nothing for a
//! while (a long command, a slow model) gets a line every half minute,
//! with what it is doing and for how long, so that a quiet run is not
//! mistaken for a hung one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::supervisor::events::AgentEvent;
use crate::text::excerpt;

/// Silence after which, and between which, an agent is said to be still
/// running.
pub const QUIET: Duration = Duration::from_secs(30);

#[derive(Default)]
pub struct Liveness {
    agents: Mutex<HashMap<String, Activity>>,
}

struct Activity {
    doing: String,
    since: Instant,
    told: Instant,
}

impl Liveness {
    /// Notes what `agent` does now; a heartbeat is no news.
    pub fn saw(&self, agent: &str, event: &AgentEvent<'_>) {
        let doing = match event {
            AgentEvent::Stats { .. } | AgentEvent::Sandbox { .. } => return,
            AgentEvent::Ended { .. } => {
                if let Ok(mut agents) = self.agents.lock() {
                    agents.remove(agent);
                }
                return;
            }
            AgentEvent::Started { .. } => "starting".to_string(),
            AgentEvent::ModelAsked { turn } => format!("waiting for the model (turn {turn})"),
            AgentEvent::ToolCall { name, arguments } => {
                excerpt(&format!("{name} {arguments}"), 100)
            }
            _ => "working".to_string(),
        };
        let now = Instant::now();
        if let Ok(mut agents) = self.agents.lock() {
            agents.insert(
                agent.to_string(),
                Activity {
                    doing,
                    since: now,
                    told: now,
                },
            );
        }
    }

    /// The lines due now, for the agents quiet for `QUIET` since they were
    /// last heard of or told about.
    pub fn due(&self, now: Instant) -> Vec<String> {
        let Ok(mut agents) = self.agents.lock() else {
            return Vec::new();
        };
        let mut lines: Vec<String> = agents
            .iter_mut()
            .filter(|(_, activity)| now.duration_since(activity.told) >= QUIET)
            .map(|(agent, activity)| {
                activity.told = now;
                let secs = now.duration_since(activity.since).as_secs();
                format!(
                    "agent {agent} | still running: {} ({secs} s)",
                    activity.doing
                )
            })
            .collect();
        lines.sort();
        lines
    }
}

/// Says the lines that come due, until aborted.
pub fn start(liveness: Arc<Liveness>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(Duration::from_secs(5));
        loop {
            ticks.tick().await;
            for line in liveness.due(Instant::now()) {
                crate::tell!("{line}");
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::{Liveness, QUIET};
    use crate::supervisor::events::AgentEvent;
    use serde_json::json;
    use tokio::time::{Duration, Instant};

    #[tokio::test(start_paused = true)]
    async fn a_quiet_agent_is_told_every_half_minute_until_it_ends() {
        let live = Liveness::default();
        let arguments = json!({"command": "cargo test"});
        live.saw(
            "s1/worker-1",
            &AgentEvent::ToolCall {
                name: "run_command",
                arguments: &arguments,
            },
        );
        assert!(live.due(Instant::now()).is_empty());
        tokio::time::advance(QUIET).await;
        let lines = live.due(Instant::now());
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0].starts_with("agent s1/worker-1 | still running: run_command"),
            "{}",
            lines[0]
        );
        assert!(lines[0].ends_with("(30 s)"), "{}", lines[0]);
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(
            live.due(Instant::now()).is_empty(),
            "not again before another 30 s"
        );
        let ended = AgentEvent::Ended {
            status: crate::protocol::AgentStatus::Completed,
            runtime: QUIET,
            detail: "",
        };
        live.saw("s1/worker-1", &ended);
        tokio::time::advance(QUIET).await;
        assert!(live.due(Instant::now()).is_empty());
    }
}
