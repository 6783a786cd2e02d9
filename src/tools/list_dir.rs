//! `list_dir`: the entries of one directory.

use std::ffi::{OsStr, OsString};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::dir::Dir;
use nix::fcntl::{AtFlags, readlinkat};
use nix::sys::stat::fstatat;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{About, PathFence, ToolContext, ToolError, ToolOutput, TypedTool, blocking};
use crate::fsutil::nofollow;

const MAX_ENTRIES: usize = 1000;

pub(super) struct ListDir;

impl TypedTool for ListDir {
    type Args = Args;
    const ABOUT: About = About::reading("list_dir", DESCRIPTION);

    async fn run(&self, args: Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let path = ctx
            .fence
            .resolve_read(args.path.as_deref().unwrap_or("."))?;
        let fence = ctx.fence.clone();
        blocking(move || list(&fence, &path)).await
    }
}

/// The entries of the resolved directory `path`, read from a descriptor
/// opened through the fence; links are shown, not followed.
fn list(fence: &PathFence, path: &Path) -> Result<ToolOutput, ToolError> {
    let shown = fence.display(path);
    let refuse =
        |e: &dyn std::fmt::Display| ToolError::RespondToModel(format!("cannot list {shown}: {e}"));
    let fd = fence.open_dir(path).map_err(|e| refuse(&e))?;
    let mut dir = Dir::from_fd(fd).map_err(|e| refuse(&e))?;
    let mut entries = Vec::new();
    let names: Vec<OsString> = dir
        .iter()
        .filter_map(Result::ok)
        .map(|entry| OsStr::from_bytes(entry.file_name().to_bytes()).to_os_string())
        .filter(|name| name != "." && name != "..")
        .collect();
    for name in names {
        let shown_name = name.to_string_lossy().into_owned();
        let line = match fstatat(dir.as_fd(), name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) => match nofollow::kind(&stat) {
                "a directory" => format!("{shown_name}/"),
                "a symbolic link" => match readlinkat(dir.as_fd(), name.as_os_str()) {
                    Ok(target) => format!("{shown_name} -> {}", target.to_string_lossy()),
                    Err(_) => format!("{shown_name} -> ?"),
                },
                _ => format!("{shown_name}  ({} bytes)", stat.st_size),
            },
            Err(_) => shown_name,
        };
        entries.push(line);
    }
    entries.sort();
    let total = entries.len();
    if total == 0 {
        return Ok(ToolOutput::ok(format!("{shown} is empty")));
    }
    entries.truncate(MAX_ENTRIES);
    let mut out = entries.join("\n");
    if total > MAX_ENTRIES {
        out.push_str(&format!("\n[{MAX_ENTRIES} of {total} entries shown]"));
    }
    Ok(ToolOutput::ok(out))
}

/// What the model is told of the tool.
const DESCRIPTION: &str = "List a directory: subdirectories end with /, files show their size. Defaults to the workspace root.";

/// What the model sends.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct Args {
    /// Directory, relative to the workspace (default .)
    #[serde(default)]
    path: Option<String>,
}
