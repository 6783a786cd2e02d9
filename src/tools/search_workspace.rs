//! `search_workspace`: a regular expression over the files of a tree,
//! skipping what is never the agent's to read (`.git`, build output, other
//! agents' results).

use std::path::{Path, PathBuf};

use regex::Regex;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{About, Counter, PathFence, ToolContext, ToolError, ToolOutput, TypedTool, blocking};
use crate::fsutil::read_bounded;

const SKIPPED_DIRS: &[&str] = &[".git", "target", crate::protocol::RESULTS_DIR];
const DEFAULT_MAX_RESULTS: usize = 100;
const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;
const MAX_LINE_SHOWN: usize = 240;

pub(super) struct SearchWorkspace;

impl TypedTool for SearchWorkspace {
    type Args = Args;
    const ABOUT: About =
        About::reading("search_workspace", DESCRIPTION).counting(Counter::Searches);

    async fn run(&self, args: Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let regex = Regex::new(&args.pattern)
            .map_err(|e| ToolError::RespondToModel(format!("invalid regular expression: {e}")))?;
        let root = ctx
            .fence
            .resolve_read(args.path.as_deref().unwrap_or("."))?;
        let max = args.max_results.unwrap_or(DEFAULT_MAX_RESULTS).max(1);
        let fence = ctx.fence.clone();
        let shown = fence.display(&root);
        let (hits, stopped) = blocking(move || Ok(search(&regex, &root, max, &fence))).await?;
        if hits.is_empty() {
            return Ok(ToolOutput::ok(format!(
                "no matches for /{}/ in {shown}",
                args.pattern
            )));
        }
        let mut out = hits.join("\n");
        if stopped {
            out.push_str(&format!(
                "\n[stopped at {max} matches; narrow the pattern or the path]"
            ));
        }
        Ok(ToolOutput::ok(out))
    }
}

/// Matching lines as `path:line: text`, and whether the limit cut them.
fn search(regex: &Regex, root: &Path, max: usize, fence: &PathFence) -> (Vec<String>, bool) {
    let mut hits = Vec::new();
    let files = walkdir::WalkDir::new(root)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|entry| {
            entry.depth() == 0
                || !(entry.file_type().is_dir()
                    && SKIPPED_DIRS.iter().any(|skip| entry.file_name() == *skip))
        })
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_file());
    for entry in files {
        let path: PathBuf = entry.into_path();
        let Some(text) = readable_text(fence, &path) else {
            continue;
        };
        let shown = fence.display(&path);
        for (number, line) in text.lines().enumerate() {
            if regex.is_match(line) {
                if hits.len() == max {
                    return (hits, true);
                }
                let line = crate::text::excerpt(line, MAX_LINE_SHOWN);
                hits.push(format!("{shown}:{}: {line}", number + 1));
            }
        }
    }
    (hits, false)
}

/// The file as text, read through the fence, or `None` for large and
/// binary files and anything that is not a regular file.
fn readable_text(fence: &PathFence, path: &Path) -> Option<String> {
    let bytes = read_bounded(fence.open_file(path).ok()?, MAX_FILE_BYTES).ok()?;
    if bytes.iter().take(8192).any(|&b| b == 0) {
        return None;
    }
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// What the model is told of the tool.
const DESCRIPTION: &str = "Search file contents with a regular expression (Rust regex syntax). Prints path:line: text for each matching line. Skips .git, target and sub_agent_results.";

/// What the model sends.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct Args {
    /// Regular expression
    pattern: String,
    /// Directory or file to search, relative to the workspace (default .)
    #[serde(default)]
    path: Option<String>,
    /// Most matching lines to return (default 100)
    #[serde(default)]
    #[schemars(range(min = 1))]
    max_results: Option<usize>,
}
