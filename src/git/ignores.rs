//! Which new paths of a change git's ignore rules leave out, asked of one
//! long-lived `git check-ignore --stdin` per base on disk instead of a git
//! process per change: twenty attempts made from one head ask the same
//! rules, and each process costs milliseconds to start where a question
//! over its pipe costs microseconds. It is asked from the blocking thread
//! that does the rest of a change's work, as the objects' reader is.
//!
//! A checker reads each directory's `.gitignore` once, when first asked
//! about a path under it. A base troupe wrote is never changed; the
//! workspace, when it is the base, holds its rules as they were when the
//! first change on it was read.

use std::collections::HashSet;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::{Git, GitError, Place};
use crate::git::piped::{Piped, Pipes};

/// How many checkers are kept, the least recently asked going first: a
/// run asks about a few heads at a time.
const KEPT: usize = 4;

/// The most bytes of paths written before their answers are read: less
/// than a pipe holds, so a write never waits on a git that waits for its
/// answers to be read.
const ASKED_AT_ONCE: usize = 32 * 1024;

const ARGS: [&str; 6] = [
    "check-ignore",
    "--no-index",
    "--stdin",
    "-z",
    "--verbose",
    "--non-matching",
];

/// The run's checkers, by the base whose rules each reads.
#[derive(Default)]
pub struct Ignores {
    checkers: Mutex<Vec<(PathBuf, Arc<Checker>)>>,
}

/// One base's checker, started again after an answer that failed.
#[derive(Default)]
pub struct Checker {
    piped: Piped,
}

impl Ignores {
    /// The checker of the rules of the tree at `rules`, started unless
    /// it runs. On the run's thread: a child is started there.
    pub fn checker(&self, git: &Git, rules: &Path) -> Result<Arc<Checker>, GitError> {
        let checker = {
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
        };
        checker.start(git, rules)?;
        Ok(checker)
    }
}

impl Checker {
    fn start(&self, git: &Git, rules: &Path) -> Result<(), GitError> {
        let place = Place::tree(rules);
        self.piped.start(git, &place, &ARGS)
    }

    /// Ends a checker that does not answer; the question waiting on it
    /// fails.
    pub fn kill(&self) {
        self.piped.kill();
    }

    /// Those of `paths` that the rules match. Blocking.
    pub fn ignored(&self, paths: &[&[u8]]) -> Result<HashSet<Vec<u8>>, GitError> {
        let mut ignored = HashSet::new();
        if paths.is_empty() {
            return Ok(ignored);
        }
        let asked = self.piped.ask(
            |pipes| batches(paths).try_for_each(|batch| ask(pipes, batch, &mut ignored)),
            |_| false,
        );
        match asked {
            Some(Ok(())) => Ok(ignored),
            Some(Err(e)) => Err(broken(&e.to_string())),
            None => Err(broken("it is not running")),
        }
    }
}

/// `paths` in runs of at most `ASKED_AT_ONCE` bytes (one path at least).
fn batches<'a>(paths: &'a [&'a [u8]]) -> impl Iterator<Item = &'a [&'a [u8]]> {
    let mut rest = paths;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut bytes = 0;
        let count = rest
            .iter()
            .take_while(|path| {
                bytes += path.len() + 1;
                bytes <= ASKED_AT_ONCE
            })
            .count()
            .max(1);
        let (batch, after) = rest.split_at(count);
        rest = after;
        Some(batch)
    })
}

/// Asks about `paths` and reads one record for each: `<source> <line>
/// <pattern> <path>`, all but the path empty where nothing matched. A
/// path whose last match is a negated pattern (`!`) is not ignored.
fn ask(pipes: &mut Pipes, paths: &[&[u8]], ignored: &mut HashSet<Vec<u8>>) -> std::io::Result<()> {
    let mut question = Vec::new();
    for path in paths {
        question.extend_from_slice(path);
        question.push(0);
    }
    pipes.input.write_all(&question)?;
    for _ in paths {
        let mut fields = Vec::with_capacity(4);
        for _ in 0..4 {
            let mut field = Vec::new();
            pipes.output.read_until(0, &mut field)?;
            if field.pop() != Some(0) {
                return Err(std::io::Error::other("its answer ended early"));
            }
            fields.push(field);
        }
        if !fields[0].is_empty() && !fields[2].starts_with(b"!") {
            ignored.insert(fields.swap_remove(3));
        }
    }
    Ok(())
}

fn broken(why: &str) -> GitError {
    GitError::Failed {
        args: ARGS.join(" "),
        status: "running".to_string(),
        stderr: why.to_string(),
    }
}
