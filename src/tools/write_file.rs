//! `write_file`: create or replace a whole file.

use std::io::Write;
use std::path::Path;

use schemars::JsonSchema;
use serde::Deserialize;

use super::{
    About, PathFence, ToolContext, ToolError, ToolOutput, TypedTool, blocking, within_file_limit,
};

pub(super) struct WriteFile;

impl TypedTool for WriteFile {
    type Args = Args;
    const ABOUT: About = About::changing("write_file", DESCRIPTION);

    async fn run(&self, args: Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let path = ctx.fence.resolve_write(&args.path)?;
        within_file_limit(
            ctx.limits.max_file_size,
            &ctx.fence.display(&path),
            args.content.len(),
        )?;
        let fence = ctx.fence.clone();
        let written = path.clone();
        let output = blocking(move || write(&fence, &path, &args.content)).await?;
        ctx.record_written(written);
        Ok(output)
    }
}

/// Replaces the content of the file at the resolved path `path`, never
/// through a link or a second hard link.
fn write(fence: &PathFence, path: &Path, content: &str) -> Result<ToolOutput, ToolError> {
    let shown = fence.display(path);
    if fence.open_dir(path).is_ok() {
        return Err(ToolError::RespondToModel(format!("{shown} is a directory")));
    }
    let fail = |e: std::io::Error| ToolError::RespondToModel(format!("cannot write {shown}: {e}"));
    let mut file = fence.open_to_write(path, false).map_err(fail)?;
    file.set_len(0)
        .and_then(|()| file.write_all(content.as_bytes()))
        .map_err(fail)?;
    Ok(ToolOutput::ok(format!(
        "wrote {} bytes to {shown}",
        content.len()
    )))
}

/// What the model is told of the tool.
const DESCRIPTION: &str =
    "Create a file, or replace its whole content. Parent directories are created.";

/// What the model sends.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct Args {
    /// File path, relative to the workspace
    path: String,
    /// The complete new content
    content: String,
}
