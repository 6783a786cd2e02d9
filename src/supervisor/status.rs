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
use std::time::Instant;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::events::{AgentEvent, EventSink};
use crate::chat::Usage;
use crate::fsutil::LatestWriter;
use crate::protocol::{AgentId, AgentStatus, TaskFile, round_seconds};
use crate::text::excerpt;
use crate::timefmt::{rfc3339, rfc3339_opt};

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
    /// Model turns answered so far.
    #[serde(default)]
    pub turns: u32,
    pub last_action: String,
    /// When `last_action` began: a long command or a slow model shows as
    /// an old time here while `updated_at` keeps moving.
    #[serde(default, with = "rfc3339_opt")]
    pub last_action_at: Option<DateTime<Utc>>,
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
    state: Mutex<Arc<StatusFile>>,
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
            turns: 0,
            last_action: "starting".to_string(),
            last_action_at: Some(now),
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
            state: Mutex::new(status),
        })
    }

    /// The last word: the agent's final status, flushed to the disk
    /// before this returns.
    pub fn finish(&self, status: AgentStatus) {
        self.update(|file| {
            file.status = status;
            file.act(format!("ended: {status}"));
        });
        let last = self.state.lock().map(|file| Arc::clone(&file));
        let committed = match last {
            Ok(file) => self.writer.commit(&file),
            Err(_) => self.writer.flush(),
        };
        if let Err(e) = committed {
            crate::tell!("troupe: cannot write the agent's status: {e}");
        }
    }

    /// Changes the status and hands it to the writer, which writes the
    /// latest state as fast as the disk takes it: every heartbeat and
    /// every turn reach the file, without a write per event.
    fn update(&self, change: impl FnOnce(&mut StatusFile)) {
        let Ok(mut file) = self.state.lock() else {
            return;
        };
        let status = Arc::make_mut(&mut file);
        change(status);
        status.runtime_seconds = round_seconds(self.started.elapsed().as_secs_f64());
        status.updated_at = Utc::now();
        self.writer.save(&file);
    }
}

impl StatusFile {
    /// What the agent does now, from now.
    fn act(&mut self, action: String) {
        self.last_action = action;
        self.last_action_at = Some(Utc::now());
    }
}

impl EventSink for StatusTracker<'_> {
    fn event(&self, agent: &str, event: AgentEvent<'_>) {
        match &event {
            AgentEvent::Started { pid } => {
                let pid = *pid;
                self.update(|file| {
                    file.agent_pid = Some(pid);
                    file.act("started".to_string());
                });
            }
            AgentEvent::ToolCall { name, arguments } => {
                let action = excerpt(&format!("{name} {arguments}"), 160);
                self.update(|file| file.act(action));
            }
            AgentEvent::ModelTurn { turn, usage, .. } => {
                let (turn, usage) = (*turn, *usage);
                self.update(|file| {
                    file.act(format!("model turn {turn} answered"));
                    file.turns = turn;
                    file.token_usage.add(usage);
                });
            }
            AgentEvent::ModelAsked { turn } => {
                let turn = *turn;
                self.update(|file| file.act(format!("waiting for the model (turn {turn})")));
            }
            AgentEvent::Stats { stats } => {
                let stats = (*stats).clone();
                self.update(|file| {
                    file.files_read = stats.files_read;
                    file.searches = stats.searches;
                    file.web_pages = stats.web_pages;
                    file.commands = stats.commands;
                });
            }
            AgentEvent::Stopping { reason } => {
                let reason = reason.to_string();
                self.update(|file| file.act(format!("stopping: {reason}")));
            }
            _ => {}
        }
        self.inner.event(agent, event);
    }
}
