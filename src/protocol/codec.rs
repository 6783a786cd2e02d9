//! Framing: one JSON object per line, with a cap on the line length.
//!
//! The cap exists because a child is untrusted output: a runaway child that
//! writes a gigabyte without a newline must cost the parent an error, not
//! its memory. Everything here returns `ProtocolError` values; nothing
//! panics on what a peer sends.

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

use crate::text::excerpt;

/// The default longest line, in bytes.
pub const DEFAULT_LINE_CAP: usize = 16 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("a line exceeded the {cap}-byte limit of the protocol")]
    LineTooLong { cap: usize },
    #[error("a line is not JSON ({reason}): {excerpt}")]
    NotJson { reason: String, excerpt: String },
    #[error("a `{kind}` message is malformed ({reason}): {excerpt}")]
    Malformed {
        kind: String,
        reason: String,
        excerpt: String,
    },
    #[error("reading the pipe failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads capped lines from a pipe. Cancel-safe: a partial line stays in the
/// reader's own buffer, so it can sit in a `select!`.
pub struct LineReader<R> {
    inner: R,
    cap: usize,
    partial: Vec<u8>,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    pub fn new(inner: R, cap: usize) -> Self {
        LineReader {
            inner,
            cap,
            partial: Vec::new(),
        }
    }

    /// The next line without its newline, or `None` at end of stream. A
    /// last line without a newline is still returned.
    pub async fn next_line(&mut self) -> Result<Option<String>, ProtocolError> {
        loop {
            let available = self.inner.fill_buf().await?;
            if available.is_empty() {
                if self.partial.is_empty() {
                    return Ok(None);
                }
                return self.take_line().map(Some);
            }
            let (chunk, complete) = match available.iter().position(|&b| b == b'\n') {
                Some(pos) => (&available[..pos], Some(pos + 1)),
                None => (available, None),
            };
            if self.partial.len() + chunk.len() > self.cap {
                return Err(ProtocolError::LineTooLong { cap: self.cap });
            }
            self.partial.extend_from_slice(chunk);
            let used = complete.unwrap_or(chunk.len());
            self.inner.consume(used);
            if complete.is_some() {
                return self.take_line().map(Some);
            }
        }
    }

    fn take_line(&mut self) -> Result<String, ProtocolError> {
        let bytes = std::mem::take(&mut self.partial);
        let mut line = String::from_utf8(bytes).map_err(|e| ProtocolError::NotJson {
            reason: "not UTF-8".to_string(),
            excerpt: excerpt(&String::from_utf8_lossy(e.as_bytes()), 200),
        })?;
        if line.ends_with('\r') {
            line.pop();
        }
        Ok(line)
    }
}

/// One message as a line, newline included.
pub fn encode_line<T: Serialize>(message: &T) -> String {
    // Our message types hold only strings, numbers and JSON values, which
    // always serialize; a failure here would be a bug in this crate.
    let mut line = serde_json::to_string(message).unwrap_or_else(|e| {
        serde_json::json!({"type": "error", "message": format!("cannot encode message: {e}")})
            .to_string()
    });
    line.push('\n');
    line
}

/// Decodes one line, telling "not JSON" apart from "JSON of the wrong
/// shape" and naming the message type in the second case. A good line is
/// parsed once; only a bad one is looked at again to say what is wrong.
pub fn decode_line<T: DeserializeOwned>(line: &str) -> Result<T, ProtocolError> {
    if let Ok(message) = serde_json::from_str(line) {
        return Ok(message);
    }
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|e| ProtocolError::NotJson {
            reason: e.to_string(),
            excerpt: excerpt(line, 200),
        })?;
    let kind = match value.get("type") {
        Some(serde_json::Value::String(kind)) => kind.clone(),
        Some(_) => "(non-string type)".to_string(),
        None => "(untyped)".to_string(),
    };
    serde_json::from_value(value).map_err(|e| ProtocolError::Malformed {
        kind,
        reason: e.to_string(),
        excerpt: excerpt(line, 200),
    })
}

/// The type tag of a line, for logging messages decoded as `Unknown`.
pub fn type_of(line: &str) -> String {
    serde_json::from_str::<serde_json::Value>(line)
        .ok()
        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_string))
        .unwrap_or_default()
}
