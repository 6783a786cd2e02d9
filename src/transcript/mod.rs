//! `conversations.json`: the full record of one agent, in the seed's shape.
//!
//! The child owns its transcript while it runs. It appends the
//! conversation's start and then every message to `journal.jsonl`, one
//! `write` per turn instead of rewriting the whole record, and writes
//! `conversations.json` when it ends (sealed, flushed: a commit point),
//! removing the journal; `load` reads whichever is there, so a reader, or
//! the parent sealing after a kill, sees every message that reached the
//! journal. Once the child is gone the parent may seal the transcript
//! with the status only the parent knows (timeout, crash), which keeps
//! one writer at any time.

mod journal;
mod writer;

pub use writer::TranscriptWriter;

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::chat::Actor;
use crate::chat::Message;
use crate::fsutil::{Durability, RecordError, read_json, write_json_atomic};
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

/// The transcript at `path` (`conversations.json`), or while it is still
/// being written, what its journal holds.
pub fn load(path: &Path) -> Result<Conversation, TranscriptError> {
    match read_json::<Conversation>(path, "the transcript") {
        Ok(mut doc) => {
            if doc.status == AgentStatus::Running {
                journal::replay(&journal::path_of(path), &mut doc);
            }
            Ok(doc)
        }
        Err(e) if e.is_missing() => match journal::rebuild(&journal::path_of(path)) {
            Some(doc) => Ok(doc),
            // Sealed in between: the sealed transcript is written before
            // its journal goes, so it is there now if it ever will be.
            None => Ok(read_json::<Conversation>(path, "the transcript")?),
        },
        Err(e) => Err(e.into()),
    }
}

/// Whether there is a transcript at `path`, sealed or still in its
/// journal.
pub fn exists(path: &Path) -> bool {
    crate::fsutil::is_regular(path) || crate::fsutil::is_regular(&journal::path_of(path))
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
    write_json_atomic(path, &doc, Durability::Commit).map_err(|source| TranscriptError::Write {
        path: path.to_path_buf(),
        source,
    })?;
    journal::remove(&journal::path_of(path));
    Ok(())
}
