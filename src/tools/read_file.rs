//! `read_file`: a text file, or a window of its lines.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Counter, Tool, ToolContext, ToolError, ToolOutput, parse_args};
use crate::llm::BoxFuture;

const DEFAULT_LIMIT: usize = 2000;
const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

pub struct ReadFile;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    /// 1-based first line.
    #[serde(default)]
    offset: Option<usize>,
    #[serde(default)]
    limit: Option<usize>,
}

impl Tool for ReadFile {
    fn name(&self) -> &'static str {
        "read_file"
    }

    fn description(&self) -> &'static str {
        "Read a text file. For long files pass offset (1-based first line) and limit (number of lines, default 2000)."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace"},
                "offset": {"type": "integer", "minimum": 1, "description": "First line to read (1-based)"},
                "limit": {"type": "integer", "minimum": 1, "description": "How many lines to read"}
            },
            "required": ["path"]
        })
    }

    fn is_read_only(&self) -> bool {
        true
    }

    fn counter(&self) -> Option<Counter> {
        Some(Counter::FilesRead)
    }

    fn call<'a>(
        &'a self,
        arguments: &'a str,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let args: Args = parse_args(self.name(), arguments)?;
            let path = ctx.fence.resolve_read(&args.path)?;
            let shown = ctx.fence.display(&path);
            let refuse = |why: String| ToolError::RespondToModel(why);
            let meta = tokio::fs::metadata(&path)
                .await
                .map_err(|e| refuse(format!("cannot read {shown}: {e}")))?;
            if meta.is_dir() {
                return Err(refuse(format!("{shown} is a directory; use list_dir")));
            }
            if meta.len() > MAX_FILE_BYTES {
                return Err(refuse(format!(
                    "{shown} is {} bytes, too large to read whole; use run_command with head, tail or grep",
                    meta.len()
                )));
            }
            let bytes = tokio::fs::read(&path)
                .await
                .map_err(|e| refuse(format!("cannot read {shown}: {e}")))?;
            if bytes.iter().take(8192).any(|&b| b == 0) {
                return Err(refuse(format!(
                    "{shown} is a binary file ({} bytes) and is not shown",
                    bytes.len()
                )));
            }
            let text = String::from_utf8_lossy(&bytes);
            window(
                &text,
                &shown,
                args.offset.unwrap_or(1),
                args.limit.unwrap_or(DEFAULT_LIMIT),
            )
            .map(ToolOutput::ok)
            .map_err(refuse)
        })
    }
}

/// Lines `offset..offset+limit` of `text`, with a note on how to go on when
/// there are more.
fn window(text: &str, shown: &str, offset: usize, limit: usize) -> Result<String, String> {
    let lines: Vec<&str> = text.lines().collect();
    let total = lines.len();
    let first = offset.max(1);
    if total == 0 {
        return Ok(String::new());
    }
    if first > total {
        return Err(format!(
            "offset {first} is past the end of {shown}, which has {total} lines"
        ));
    }
    let last = (first - 1 + limit.max(1)).min(total);
    let mut out = lines[first - 1..last].join("\n");
    if first > 1 || last < total {
        out.push_str(&format!("\n[lines {first}-{last} of {total}"));
        if last < total {
            out.push_str(&format!("; read on with offset={}", last + 1));
        }
        out.push(']');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::window;

    #[test]
    fn windows_say_where_they_are() {
        let text = "a\nb\nc\n";
        assert_eq!(window(text, "f", 1, 10).unwrap(), "a\nb\nc");
        assert_eq!(
            window(text, "f", 2, 1).unwrap(),
            "b\n[lines 2-2 of 3; read on with offset=3]"
        );
        assert!(window(text, "f", 4, 1).is_err());
    }
}
