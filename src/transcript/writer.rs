//! The child's handle on its transcript: the whole record in memory, the
//! start and each change appended to the journal in one write each, and
//! `conversations.json` written, sealed and flushed, at the end. Both are
//! written through the agent's open `.subagent/`, which its commands see
//! read-only.

use std::fs::File;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;

use super::journal::{self, Entry};
use super::{Compaction, Conversation};
use crate::chat::Message;
use crate::fsutil::{Durability, RecordDir};
use crate::protocol::{AgentStats, AgentStatus, StopReason};

/// The names of the transcript and its journal in `.subagent/`.
const TRANSCRIPT: &str = "conversations.json";
const JOURNAL: &str = "journal.jsonl";

pub struct TranscriptWriter {
    dir: Arc<RecordDir>,
    doc: Arc<Conversation>,
    journal: File,
    /// Time spent writing so far.
    spent: Duration,
}

impl TranscriptWriter {
    /// Opens the journal with the conversation's start before it returns,
    /// so a transcript exists from the start.
    pub fn create(dir: Arc<RecordDir>, doc: Conversation) -> std::io::Result<Self> {
        let started = Instant::now();
        let journal = dir.create_file(JOURNAL)?;
        let mut writer = TranscriptWriter {
            dir,
            doc: Arc::new(doc),
            journal,
            spent: Duration::ZERO,
        };
        writer.append(&[Entry::Start(Box::new((*writer.doc).clone()))])?;
        writer.spent = started.elapsed();
        Ok(writer)
    }

    pub fn messages(&self) -> &[Message] {
        &self.doc.messages
    }

    /// Messages that arrive together (a turn's tool results), appended in
    /// one write.
    pub fn push_all(&mut self, messages: impl IntoIterator<Item = Message>) -> std::io::Result<()> {
        let entries: Vec<Entry> = messages.into_iter().map(Entry::Message).collect();
        let doc = Arc::make_mut(&mut self.doc);
        for entry in &entries {
            if let Entry::Message(message) = entry {
                doc.messages.push(message.clone());
            }
        }
        self.append(&entries)
    }

    /// Records a compaction.
    pub fn note_compaction(&mut self, compaction: Compaction) -> std::io::Result<()> {
        Arc::make_mut(&mut self.doc)
            .compactions
            .push(compaction.clone());
        self.append(&[Entry::Compaction(compaction)])
    }

    fn append(&mut self, entries: &[Entry]) -> std::io::Result<()> {
        let started = Instant::now();
        let written = journal::append(&mut self.journal, &journal::lines(entries)).and_then(|()| {
            match Durability::Atomic.flushes() {
                true => self.journal.sync_data(),
                false => Ok(()),
            }
        });
        self.spent += started.elapsed();
        written
    }

    /// The stats the sealed transcript carries.
    pub fn set_stats(&mut self, stats: AgentStats) {
        Arc::make_mut(&mut self.doc).stats = stats;
    }

    /// Seals the transcript: the whole record, flushed to the disk (a
    /// commit point), and the journal, now redundant, gone.
    pub fn finish(
        &mut self,
        status: AgentStatus,
        stop_reason: Option<StopReason>,
        error: Option<String>,
    ) -> std::io::Result<()> {
        let started = Instant::now();
        let doc = Arc::make_mut(&mut self.doc);
        doc.status = status;
        doc.stop_reason = stop_reason;
        doc.error = error;
        doc.completed_at = Some(Utc::now());
        let written = self
            .dir
            .write_json_atomic(TRANSCRIPT, &*self.doc, Durability::Commit);
        if written.is_ok() {
            // The sealed transcript holds it all.
            let _ = self.dir.remove(JOURNAL);
        }
        self.spent += started.elapsed();
        written
    }

    /// Time spent writing the transcript so far.
    pub fn write_time(&self) -> Duration {
        self.spent
    }
}
