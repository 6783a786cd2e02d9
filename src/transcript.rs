//! `conversations.json`: the full record of one agent, in the seed's shape.
//!
//! The child owns its transcript while it runs and has it rewritten
//! atomically after every message (a turn's tool results together), by a
//! writer thread, so a kill at any instant leaves the last valid copy.
//! Once the child is gone the parent may seal it with the status only the
//! parent knows (timeout, crash), which keeps one writer at any time.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::chat::Actor;
use crate::chat::Message;
use crate::fsutil::{LatestWriter, RecordError, read_json, write_json_atomic};
use crate::protocol::{AgentId, AgentStats, AgentStatus, StopReason, TaskFile};
use crate::timefmt::{rfc3339, rfc3339_opt};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    pub agent_id: AgentId,
    pub conversation_id: String,
    pub role: Actor,
    pub summary: String,
    pub status: AgentStatus,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(default, with = "rfc3339_opt")]
    pub completed_at: Option<DateTime<Utc>>,
    pub messages: Vec<Message>,
    #[serde(default)]
    pub stats: AgentStats,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
    /// What went wrong, for every status but `completed` and `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Each time the conversation was made smaller for the model's
    /// context. `messages` above stay whole; these say what the model was
    /// sent instead from then on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compactions: Vec<Compaction>,
}

/// One step that made what the model is sent smaller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compaction {
    #[serde(with = "rfc3339")]
    pub at: DateTime<Utc>,
    pub reason: CompactionReason,
    /// Messages in the conversation at the time.
    pub messages: usize,
    /// Tokens of the request that did not fit, as troupe estimated them.
    pub estimated_tokens: u64,
    #[serde(flatten)]
    pub step: CompactionStep,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompactionReason {
    /// The endpoint refused the request as too long for the model.
    ContextExceeded,
    /// The request would have passed the `context_window` troupe was given.
    ContextWindow,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum CompactionStep {
    /// The long tool results before message `before` (`results` of them)
    /// are sent as their head and tail.
    Shortened { before: usize, results: usize },
    /// Messages `from..to` are sent as this summary, which the model wrote.
    Summarized {
        from: usize,
        to: usize,
        summary: String,
    },
}

impl Conversation {
    /// The empty conversation of the agent of `task`.
    pub fn for_task(task: &TaskFile) -> Self {
        Conversation::new(
            task.agent_id.clone(),
            task.conversation_id.clone(),
            task.role.actor(),
            task.summary.clone(),
        )
    }

    pub fn new(agent_id: AgentId, conversation_id: String, role: Actor, summary: String) -> Self {
        Conversation {
            agent_id,
            conversation_id,
            role,
            summary,
            status: AgentStatus::Running,
            created_at: Utc::now(),
            completed_at: None,
            messages: Vec::new(),
            stats: AgentStats::default(),
            stop_reason: None,
            error: None,
            compactions: Vec::new(),
        }
    }
}

/// The child's handle on its transcript: every change is handed to a
/// writer thread, which writes the latest state atomically, so the agent's
/// loop never waits for the disk; the first copy and the sealed one are
/// waited for.
pub struct TranscriptWriter {
    doc: Arc<Conversation>,
    writer: LatestWriter<Conversation>,
}

impl TranscriptWriter {
    /// Writes the first copy before it returns, so a transcript exists
    /// from the start.
    pub fn create(path: PathBuf, doc: Conversation) -> std::io::Result<Self> {
        let writer = TranscriptWriter {
            doc: Arc::new(doc),
            writer: LatestWriter::spawn(path, "troupe-transcript")?,
        };
        writer.writer.save(&writer.doc);
        writer.writer.flush()?;
        Ok(writer)
    }

    pub fn messages(&self) -> &[Message] {
        &self.doc.messages
    }

    /// Messages that arrive together (a turn's tool results), saved as one
    /// state; `Err` when an earlier write failed.
    pub fn push_all(&mut self, messages: impl IntoIterator<Item = Message>) -> std::io::Result<()> {
        Arc::make_mut(&mut self.doc).messages.extend(messages);
        self.writer.save(&self.doc);
        self.writer.check()
    }

    /// Records a compaction with the next save.
    pub fn note_compaction(&mut self, compaction: Compaction) -> std::io::Result<()> {
        Arc::make_mut(&mut self.doc).compactions.push(compaction);
        self.writer.save(&self.doc);
        self.writer.check()
    }

    /// The stats the next save carries.
    pub fn set_stats(&mut self, stats: AgentStats) {
        Arc::make_mut(&mut self.doc).stats = stats;
    }

    /// Seals the transcript and waits until it is on disk.
    pub fn finish(
        &mut self,
        status: AgentStatus,
        stop_reason: Option<StopReason>,
        error: Option<String>,
    ) -> std::io::Result<()> {
        let doc = Arc::make_mut(&mut self.doc);
        doc.status = status;
        doc.stop_reason = stop_reason;
        doc.error = error;
        doc.completed_at = Some(Utc::now());
        self.writer.save(&self.doc);
        self.writer.flush()
    }

    /// Time spent writing the transcript so far.
    pub fn write_time(&self) -> std::time::Duration {
        self.writer.write_time()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TranscriptError {
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error("cannot write the transcript {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

pub fn load(path: &Path) -> Result<Conversation, TranscriptError> {
    Ok(read_json(path, "the transcript")?)
}

/// The parent's last word on a transcript whose child is gone: the final
/// status, when it ended, the stats the parent measured, and why. When the
/// child died before writing any transcript, `fallback` is written instead,
/// so every agent leaves one.
pub fn seal(
    path: &Path,
    fallback: impl FnOnce() -> Conversation,
    status: AgentStatus,
    stats: AgentStats,
    error: Option<String>,
) -> Result<(), TranscriptError> {
    let mut doc = match load(path) {
        Ok(doc) => doc,
        Err(TranscriptError::Record(e)) if e.is_missing() => fallback(),
        Err(e) => return Err(e),
    };
    doc.status = status;
    doc.stats = stats;
    if error.is_some() {
        doc.error = error;
    }
    if doc.completed_at.is_none() {
        doc.completed_at = Some(Utc::now());
    }
    write_json_atomic(path, &doc).map_err(|source| TranscriptError::Write {
        path: path.to_path_buf(),
        source,
    })
}
