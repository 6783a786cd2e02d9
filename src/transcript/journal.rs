//! `journal.jsonl`: what a running agent's transcript gained since its
//! first copy, one JSON line per entry, appended as it happens. A kill
//! mid-write leaves at most one torn last line, which `replay` stops at.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Compaction, Conversation};
use crate::chat::Message;

/// One line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Entry {
    Message(Message),
    Compaction(Compaction),
}

/// The journal beside `conversations.json`.
pub fn path_of(transcript: &Path) -> PathBuf {
    transcript.with_file_name("journal.jsonl")
}

/// `entries` as the lines to append, in one buffer.
pub fn lines<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> Vec<u8> {
    let mut buffer = Vec::new();
    for entry in entries {
        if serde_json::to_writer(&mut buffer, entry).is_ok() {
            buffer.push(b'\n');
        }
    }
    buffer
}

/// Appends `bytes` in one write.
pub fn append(file: &mut std::fs::File, bytes: &[u8]) -> std::io::Result<()> {
    file.write_all(bytes)
}

/// Adds to `doc` what the journal at `path` holds, up to the first line
/// that does not parse (a torn tail); nothing when there is none.
pub fn replay(path: &Path, doc: &mut Conversation) {
    let Ok(text) = crate::fsutil::read_record(path) else {
        return;
    };
    for line in text.lines() {
        match serde_json::from_str::<Entry>(line) {
            Ok(Entry::Message(message)) => doc.messages.push(message),
            Ok(Entry::Compaction(compaction)) => doc.compactions.push(compaction),
            Err(_) => break,
        }
    }
}

/// The journal of a sealed transcript, which holds it all: gone.
pub fn remove(path: &Path) {
    let _ = std::fs::remove_file(path);
}
