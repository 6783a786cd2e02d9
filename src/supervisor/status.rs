//! `.subagent/status.json`: a spawned agent as it runs, in the seed's
//! `get_sub_agent_status` shape, for `troupe status`, `wait` and
//! `terminate`.
//!
//! The supervisor writes it from the events it relays, at most a few times
//! a second and at every change of state, atomically. Whether the agent is
//! really still running is the lock's to say (see `registry`): a status
//! file that says `running` under a free lock is `lost`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::events::{AgentEvent, EventSink};
use crate::chat::Usage;
use crate::fsutil::LatestWriter;
use crate::protocol::{AgentId, AgentStatus, TaskFile, round_seconds};
use crate::text::excerpt;
use crate::timefmt::rfc3339;

/// The least time between two writes while nothing but counters changes.
/// (Tokens are counted here, as the parent answers each model turn.)
const WRITE_EVERY: Duration = Duration::from_millis(250);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusFile {
    pub agent_id: AgentId,
    pub summary: String,
    pub status: AgentStatus,
    pub runtime_seconds: f64,
    pub files_read: u64,
    pub searches: u64,
    pub web_pages: u64,
    pub commands: u64,
    pub token_usage: Usage,
    pub last_action: String,
    pub deliverables_dir: String,
    pub background: bool,
    /// The troupe process that supervises the agent.
    pub supervisor_pid: u32,
    #[serde(default)]
    pub agent_pid: Option<u32>,
    #[serde(with = "rfc3339")]
    pub started_at: DateTime<Utc>,
    #[serde(with = "rfc3339")]
    pub updated_at: DateTime<Utc>,
}

impl StatusFile {
    pub fn path(task: &TaskFile) -> PathBuf {
        task.subagent_dir().join("status.json")
    }

    pub fn load(task_dir: &std::path::Path) -> Option<StatusFile> {
        crate::fsutil::read_json(&task_dir.join("status.json"), "the status file").ok()
    }
}

/// An event sink that keeps the status file current and passes every
/// event on. The file is written by a thread of its own.
pub struct StatusTracker<'a> {
    inner: &'a dyn EventSink,
    writer: LatestWriter<StatusFile>,
    started: Instant,
    state: Mutex<(Arc<StatusFile>, Option<Instant>)>,
}

impl<'a> StatusTracker<'a> {
    /// Writes the first status, `running`, before it returns.
    pub fn start(
        task: &TaskFile,
        background: bool,
        inner: &'a dyn EventSink,
    ) -> std::io::Result<Self> {
        let now = Utc::now();
        let status = Arc::new(StatusFile {
            agent_id: task.agent_id.clone(),
            summary: task.summary.clone(),
            status: AgentStatus::Running,
            runtime_seconds: 0.0,
            files_read: 0,
            searches: 0,
            web_pages: 0,
            commands: 0,
            token_usage: Usage::default(),
            last_action: "starting".to_string(),
            deliverables_dir: task.agent_dir_display(),
            background,
            supervisor_pid: std::process::id(),
            agent_pid: None,
            started_at: now,
            updated_at: now,
        });
        let writer = LatestWriter::spawn(StatusFile::path(task), "troupe-status")?;
        writer.save(&status);
        writer.flush()?;
        Ok(StatusTracker {
            inner,
            writer,
            started: Instant::now(),
            state: Mutex::new((status, None)),
        })
    }

    /// The last word: the agent's final status, on disk before this
    /// returns.
    pub fn finish(&self, status: AgentStatus) {
        self.update(true, |file| {
            file.status = status;
            file.last_action = format!("ended: {status}");
        });
        if let Err(e) = self.writer.flush() {
            crate::tell!("troupe: cannot write the agent's status: {e}");
        }
    }

    fn update(&self, now: bool, change: impl FnOnce(&mut StatusFile)) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let (file, last_write) = &mut *state;
        let status = Arc::make_mut(file);
        change(status);
        status.runtime_seconds = round_seconds(self.started.elapsed().as_secs_f64());
        status.updated_at = Utc::now();
        let due = last_write.is_none_or(|at| at.elapsed() >= WRITE_EVERY);
        if now || due {
            self.writer.save(file);
            *last_write = Some(Instant::now());
        }
    }
}

impl EventSink for StatusTracker<'_> {
    fn event(&self, agent: &str, event: AgentEvent<'_>) {
        match &event {
            AgentEvent::Started { pid } => {
                let pid = *pid;
                self.update(true, |file| {
                    file.agent_pid = Some(pid);
                    file.last_action = "started".to_string();
                });
            }
            AgentEvent::ToolCall { name, arguments } => {
                let action = excerpt(&format!("{name} {arguments}"), 160);
                self.update(false, |file| file.last_action = action);
            }
            AgentEvent::ModelTurn { turn, usage, .. } => {
                let (turn, usage) = (*turn, *usage);
                self.update(false, |file| {
                    file.last_action = format!("model turn {turn}");
                    file.token_usage.add(usage);
                });
            }
            AgentEvent::Stats { stats } => {
                let stats = (*stats).clone();
                self.update(false, |file| {
                    file.files_read = stats.files_read;
                    file.searches = stats.searches;
                    file.web_pages = stats.web_pages;
                    file.commands = stats.commands;
                });
            }
            AgentEvent::Stopping { reason } => {
                let reason = reason.to_string();
                self.update(true, |file| {
                    file.last_action = format!("stopping: {reason}")
                });
            }
            _ => {}
        }
        self.inner.event(agent, event);
    }
}
