//! `read_file`: a text file, or a window of its lines.

use std::os::fd::AsFd;
use std::path::Path;

use schemars::JsonSchema;
use serde::Deserialize;

use super::{
    About, Counter, MAX_READ_BYTES, PathFence, ToolContext, ToolError, ToolOutput, TypedTool,
    blocking,
};
use crate::fsutil::read_bounded;

const DEFAULT_LIMIT: usize = 2000;

pub(super) struct ReadFile;

impl TypedTool for ReadFile {
    type Args = Args;
    const ABOUT: About = About::reading("read_file", DESCRIPTION).counting(Counter::FilesRead);

    async fn run(&self, args: Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let path = ctx.fence.resolve_read(&args.path)?;
        let fence = ctx.fence.clone();
        let offset = args.offset.unwrap_or(1);
        let limit = args.limit.unwrap_or(DEFAULT_LIMIT);
        blocking(move || read(&fence, &path, offset, limit)).await
    }
}

/// The window of the file at the resolved path `path`, read from the
/// fence: a regular file, bounded before anything is allocated.
fn read(
    fence: &PathFence,
    path: &Path,
    offset: usize,
    limit: usize,
) -> Result<ToolOutput, ToolError> {
    let shown = fence.display(path);
    let refuse = |why: String| ToolError::RespondToModel(why);
    let fd = match fence.open_file(path) {
        Ok(fd) => fd,
        Err(_) if fence.open_dir(path).is_ok() => {
            return Err(refuse(format!("{shown} is a directory; use list_dir")));
        }
        Err(e) => return Err(refuse(format!("cannot read {shown}: {e}"))),
    };
    let size = nix::sys::stat::fstat(fd.as_fd())
        .map(|stat| u64::try_from(stat.st_size).unwrap_or(0))
        .map_err(|e| refuse(format!("cannot read {shown}: {e}")))?;
    if size > MAX_READ_BYTES {
        return Err(refuse(format!(
            "{shown} is {size} bytes, too large to read whole; use run_command with head, tail or grep"
        )));
    }
    let bytes = read_bounded(fd, MAX_READ_BYTES)
        .map_err(|e| refuse(format!("cannot read {shown}: {e}")))?;
    if bytes.iter().take(8192).any(|&b| b == 0) {
        return Err(refuse(format!(
            "{shown} is a binary file ({} bytes) and is not shown",
            bytes.len()
        )));
    }
    let text = String::from_utf8_lossy(&bytes);
    window(&text, &shown, offset, limit)
        .map(ToolOutput::ok)
        .map_err(refuse)
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
    let last = (first - 1).saturating_add(limit.max(1)).min(total);
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

/// What the model is told of the tool.
const DESCRIPTION: &str = "Read a text file. For long files pass offset (1-based first line) and limit (number of lines, default 2000).";

/// What the model sends.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct Args {
    /// File path, relative to the workspace
    path: String,
    /// First line to read (1-based)
    #[serde(default)]
    #[schemars(range(min = 1))]
    offset: Option<usize>,
    /// How many lines to read
    #[serde(default)]
    #[schemars(range(min = 1))]
    limit: Option<usize>,
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
        assert_eq!(
            window(text, "f", 3, usize::MAX).unwrap(),
            "c\n[lines 3-3 of 3]",
            "a limit past the end of memory is the rest of the file"
        );
    }
}
