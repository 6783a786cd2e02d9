//! `journal.jsonl`: a running agent's transcript, one JSON line per entry,
//! appended as it happens: first the conversation as it starts (its
//! metadata and opening messages), then every message and compaction. A
//! kill mid-write leaves at most one torn last line, which `replay` stops
//! at.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Compaction, Conversation};
use crate::chat::Message;

/// One line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Entry {
    /// The first line: the conversation as it begins.
    Start(Box<Conversation>),
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

/// The conversation the journal at `path` holds, up to the first line
/// that does not parse (a torn tail); `None` when there is no journal or
/// it does not begin with its start.
pub fn rebuild(path: &Path) -> Option<Conversation> {
    let text = crate::fsutil::read_record(path).ok()?;
    let mut entries = parsed(&text);
    let Some(Entry::Start(start)) = entries.next() else {
        return None;
    };
    let mut doc = *start;
    for entry in entries {
        add(&mut doc, entry);
    }
    Some(doc)
}

/// Adds to `doc` what the journal at `path` holds beyond its start, as
/// `rebuild` reads it; nothing when there is none.
pub fn replay(path: &Path, doc: &mut Conversation) {
    let Ok(text) = crate::fsutil::read_record(path) else {
        return;
    };
    for entry in parsed(&text) {
        add(doc, entry);
    }
}

fn parsed(text: &str) -> impl Iterator<Item = Entry> + '_ {
    text.lines()
        .map_while(|line| serde_json::from_str::<Entry>(line).ok())
}

fn add(doc: &mut Conversation, entry: Entry) {
    match entry {
        Entry::Start(_) => {}
        Entry::Message(message) => doc.messages.push(message),
        Entry::Compaction(compaction) => doc.compactions.push(compaction),
    }
}

/// The journal of a sealed transcript, which holds it all: gone.
pub fn remove(path: &Path) {
    let _ = std::fs::remove_file(path);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::Actor;
    use crate::protocol::AgentId;

    fn start() -> Conversation {
        Conversation::new(
            AgentId::new("1"),
            "c".to_string(),
            Actor::Worker,
            "s".to_string(),
        )
    }

    #[test]
    fn a_torn_last_line_is_where_the_journal_ends() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        let entries = [
            Entry::Start(Box::new(start())),
            Entry::Message(Message::user("first")),
            Entry::Message(Message::user("second")),
        ];
        let mut bytes = lines(&entries);
        bytes.extend_from_slice(br#"{"message": {"role": "user", "cont"#);
        std::fs::write(&path, &bytes).unwrap();
        let doc = rebuild(&path).unwrap();
        assert_eq!(doc.messages.len(), 2);
        assert_eq!(doc.agent_id, AgentId::new("1"));
    }

    #[test]
    fn a_journal_without_its_start_is_no_transcript() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        assert!(rebuild(&path).is_none(), "no journal");
        std::fs::write(&path, lines(&[Entry::Message(Message::user("x"))])).unwrap();
        assert!(rebuild(&path).is_none(), "no start line");
        std::fs::write(&path, br#"{"start": {"agent_"#).unwrap();
        assert!(rebuild(&path).is_none(), "a torn start");
    }
}
