//! `edit_file`: replace one exact piece of text. The old text must occur
//! exactly once, so an edit can never land in the wrong place.

use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use schemars::JsonSchema;
use serde::Deserialize;

use super::{
    About, MAX_READ_BYTES, PathFence, ToolContext, ToolError, ToolOutput, TypedTool, blocking,
    within_file_limit,
};
use crate::fsutil::read_bounded;

pub(super) struct EditFile;

impl TypedTool for EditFile {
    type Args = Args;
    const ABOUT: About = About::changing("edit_file", DESCRIPTION);

    async fn run(&self, args: Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let path = ctx.fence.resolve_write(&args.path)?;
        if args.old_text.is_empty() {
            return Err(ToolError::RespondToModel(
                "old_text is empty; to create a file use write_file".into(),
            ));
        }
        let fence = ctx.fence.clone();
        let max = ctx.limits.max_file_size;
        let edited = path.clone();
        let output = blocking(move || edit(&fence, &path, &args, max)).await?;
        ctx.record_written(edited);
        Ok(output)
    }
}

/// Replaces the one occurrence of `old_text` in the file at the resolved
/// path `path`, read and written through one descriptor.
fn edit(
    fence: &PathFence,
    path: &Path,
    args: &Args,
    max: Option<u64>,
) -> Result<ToolOutput, ToolError> {
    let shown = fence.display(path);
    let refuse = |why: String| ToolError::RespondToModel(why);
    let file = match fence.open_to_write(path, true) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(refuse(format!(
                "{shown} does not exist; use write_file to create it"
            )));
        }
        Err(e) => return Err(refuse(format!("cannot edit {shown}: {e}"))),
    };
    let bytes = read_bounded(
        file.try_clone()
            .map(OwnedFd::from)
            .map_err(|e| refuse(format!("cannot read {shown}: {e}")))?,
        MAX_READ_BYTES,
    )
    .map_err(|e| refuse(format!("cannot read {shown}: {e}")))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| refuse(format!("{shown} is not UTF-8 text; edit_file changes text")))?;
    match text.matches(&args.old_text).count() {
        0 => Err(refuse(format!(
            "old_text was not found in {shown}; read the file and copy the text exactly"
        ))),
        1 => {
            let edited = text.replacen(&args.old_text, &args.new_text, 1);
            within_file_limit(max, &shown, edited.len())?;
            file.set_len(0)
                .and_then(|()| file.write_all_at(edited.as_bytes(), 0))
                .map_err(|e| refuse(format!("cannot write {shown}: {e}")))?;
            Ok(ToolOutput::ok(format!(
                "replaced 1 occurrence in {shown} ({} -> {} bytes)",
                text.len(),
                edited.len()
            )))
        }
        n => Err(refuse(format!(
            "old_text occurs {n} times in {shown}; include more surrounding lines so it matches exactly once"
        ))),
    }
}

/// What the model is told of the tool.
const DESCRIPTION: &str = "Replace old_text by new_text in a file. old_text must occur exactly once: copy it exactly, with enough surrounding lines to be unique.";

/// What the model sends.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct Args {
    /// File path, relative to the workspace
    path: String,
    /// The exact text to replace; it must occur exactly once
    old_text: String,
    /// The replacement
    new_text: String,
}
