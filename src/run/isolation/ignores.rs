//! Which new paths of a change git's ignore rules leave out, asked of one
//! long-lived `git check-ignore --stdin` per base on disk instead of a git
//! process per change: twenty attempts made from one head ask the same
//! rules, and each process costs milliseconds to start where a question
//! over its pipe costs microseconds.
//!
//! A checker reads each directory's `.gitignore` once, when first asked
//! about a path under it. A base troupe wrote is never changed; the
//! workspace, when it is the base, holds its rules as they were when the
//! first change on it was read.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::git::{Git, GitError, Place};

/// How many checkers are kept, the least recently asked going first: a
/// run asks about a few heads at a time.
const KEPT: usize = 4;

/// The run's checkers, by the base whose rules each reads.
#[derive(Default)]
pub struct Ignores {
    checkers: Mutex<Vec<(PathBuf, Checker)>>,
}

/// One base's checker, started when first asked, and again after an
/// answer that failed.
type Checker = Arc<tokio::sync::Mutex<Option<Live>>>;

struct Live {
    /// Killed when dropped.
    _child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

const ARGS: [&str; 6] = [
    "check-ignore",
    "--no-index",
    "--stdin",
    "-z",
    "--verbose",
    "--non-matching",
];

impl Ignores {
    /// Those of `paths` that the ignore rules of the tree at `rules`
    /// match.
    pub async fn ignored(
        &self,
        git: &Git,
        rules: &Path,
        paths: &[&[u8]],
    ) -> Result<HashSet<Vec<u8>>, GitError> {
        if paths.is_empty() {
            return Ok(HashSet::new());
        }
        let checker = self.checker(rules);
        let mut live = checker.lock().await;
        if live.is_none() {
            let place = Place {
                work_tree: Some(rules),
                index: None,
            };
            let mut child = git.spawn_piped(&place, &ARGS)?;
            let (Some(input), Some(output)) = (child.stdin.take(), child.stdout.take()) else {
                return Err(broken("it has no pipes"));
            };
            *live = Some(Live {
                _child: child,
                input,
                output: BufReader::new(output),
            });
        }
        let Some(pipes) = live.as_mut() else {
            return Err(broken("it is not running"));
        };
        let said = || ARGS.join(" ");
        let asked = git.bounded(said, ask(pipes, paths)).await;
        let asked = asked.and_then(|answer| answer);
        // One that failed may be anywhere in its answer.
        if asked.is_err() {
            *live = None;
        }
        asked
    }

    fn checker(&self, rules: &Path) -> Checker {
        let mut checkers = self.checkers.lock().unwrap_or_else(|e| e.into_inner());
        let found = checkers.iter().position(|(dir, _)| dir == rules);
        let entry = match found {
            Some(at) => checkers.remove(at),
            None => (rules.to_path_buf(), Arc::default()),
        };
        let checker = Arc::clone(&entry.1);
        checkers.push(entry);
        if checkers.len() > KEPT {
            checkers.remove(0);
        }
        checker
    }
}

/// Asks about `paths` and reads one record for each: `<source> <line>
/// <pattern> <path>`, all but the path empty where nothing matched. A
/// path whose last match is a negated pattern (`!`) is not ignored.
/// Paths are written while answers are read: a long list would fill both
/// pipes otherwise.
async fn ask(pipes: &mut Live, paths: &[&[u8]]) -> Result<HashSet<Vec<u8>>, GitError> {
    let mut question = Vec::new();
    for path in paths {
        question.extend_from_slice(path);
        question.push(0);
    }
    let Live { input, output, .. } = pipes;
    let written = async {
        input.write_all(&question).await?;
        input.flush().await
    };
    let answered = async {
        let mut ignored = HashSet::new();
        for _ in paths {
            let mut fields = Vec::with_capacity(4);
            for _ in 0..4 {
                let mut field = Vec::new();
                output.read_until(0, &mut field).await?;
                if field.pop() != Some(0) {
                    return Err(std::io::Error::other("its answer ended early"));
                }
                fields.push(field);
            }
            let matched = !fields[0].is_empty() && !fields[2].starts_with(b"!");
            if matched {
                ignored.insert(fields.swap_remove(3));
            }
        }
        Ok(ignored)
    };
    let (written, answered) = tokio::join!(written, answered);
    written.map_err(|e| broken(&e.to_string()))?;
    answered.map_err(|e| broken(&e.to_string()))
}

fn broken(why: &str) -> GitError {
    GitError::Failed {
        args: ARGS.join(" "),
        status: "running".to_string(),
        stderr: why.to_string(),
    }
}
