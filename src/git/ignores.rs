//! Which new paths of a change git's ignore rules leave out: one `git
//! check-ignore --stdin` over the base's tree on disk, which reads each
//! directory's `.gitignore` as it meets a path under it. A base troupe
//! wrote is never changed; the workspace, when it is the base, holds its
//! rules as they are when the change is read.

use std::collections::HashSet;
use std::path::Path;

use super::{Git, GitError, Place};

const ARGS: [&str; 6] = [
    "check-ignore",
    "--no-index",
    "--stdin",
    "-z",
    "--verbose",
    "--non-matching",
];

/// Those of `paths` that the rules of the tree at `rules` match. Each
/// answer is a record `<source> <line> <pattern> <path>`, all but the
/// path empty where nothing matched; a path whose last match is a
/// negated pattern (`!`) is not ignored.
pub async fn ignored(
    git: &Git,
    rules: &Path,
    paths: &[&[u8]],
) -> Result<HashSet<Vec<u8>>, GitError> {
    let mut ignored = HashSet::new();
    if paths.is_empty() {
        return Ok(ignored);
    }
    let mut question = Vec::new();
    for path in paths {
        question.extend_from_slice(path);
        question.push(0);
    }
    let place = Place {
        work_tree: Some(rules),
        index: None,
    };
    // 1 says no path matched.
    let (code, answer) = git.output_bytes(&place, &ARGS, Some(question)).await?;
    let mut fields = answer.split(|b| *b == 0);
    for _ in paths {
        let record: Vec<&[u8]> = fields.by_ref().take(4).collect();
        let [source, _, pattern, path] = record[..] else {
            return Err(broken(code, "its answer ended early"));
        };
        if !source.is_empty() && !pattern.starts_with(b"!") {
            ignored.insert(path.to_vec());
        }
    }
    match code {
        Some(0 | 1) => Ok(ignored),
        _ => Err(broken(code, "it failed")),
    }
}

fn broken(code: Option<i32>, why: &str) -> GitError {
    GitError::Failed {
        args: ARGS.join(" "),
        status: code.map_or("killed".to_string(), |code| format!("exit {code}")),
        stderr: why.to_string(),
    }
}
