//! A long-lived git that answers questions over its pipes (`cat-file
//! --batch`, `check-ignore --stdin`), for the blocking thread that does a
//! change's work: started on the run's thread, asked with blocking reads
//! and writes, started again after an answer that failed, and ended
//! without its lock when a question waits on it past its bound.

use std::io::BufReader;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};

use super::{Git, GitError, Place};

#[derive(Default)]
pub struct Piped {
    live: Mutex<Option<Pipes>>,
    /// The live git's process group, to end it while a question holds
    /// the lock; 0 once it was ended.
    group: AtomicI32,
}

/// A live git's pipes.
pub struct Pipes {
    /// Killed when dropped.
    _child: tokio::process::Child,
    pub input: std::fs::File,
    pub output: BufReader<std::fs::File>,
}

impl Piped {
    /// Starts `git args` in `place` unless it runs. On the run's thread:
    /// a child is started there.
    pub fn start(&self, git: &Git, place: &Place<'_>, args: &[&str]) -> Result<(), GitError> {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        // One that was killed is started again.
        if live.is_some() && self.group.load(Ordering::Relaxed) > 0 {
            return Ok(());
        }
        let (child, input, output) = spawn(git, place, args)?;
        let group = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .unwrap_or(0);
        self.group.store(group, Ordering::Relaxed);
        *live = Some(Pipes {
            _child: child,
            input,
            output: BufReader::new(output),
        });
        Ok(())
    }

    /// Ends a git that does not answer; the question waiting on it fails.
    pub fn kill(&self) {
        let group = self.group.swap(0, Ordering::Relaxed);
        if group > 0 {
            crate::process::kill_group(group);
        }
    }

    /// `exchange` with the live git, `None` when none runs. A git whose
    /// exchange failed, unless `answered` says it answered in full, may
    /// be anywhere in its answer and is not asked again. Blocking.
    pub fn ask<T, E>(
        &self,
        exchange: impl FnOnce(&mut Pipes) -> Result<T, E>,
        answered: impl FnOnce(&E) -> bool,
    ) -> Option<Result<T, E>> {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let pipes = live.as_mut()?;
        let asked = exchange(pipes);
        if let Err(e) = &asked
            && !answered(e)
        {
            *live = None;
        }
        Some(asked)
    }
}

/// A long-lived `git args`, confined as every call is, with its stdin and
/// stdout as blocking pipes for a thread off the run's to use: its caller
/// bounds each exchange (`Git::bounded`, and killing its process group).
/// It is killed when dropped. Started on the run's thread.
fn spawn(
    git: &Git,
    place: &Place<'_>,
    args: &[&str],
) -> Result<(tokio::process::Child, std::fs::File, std::fs::File), GitError> {
    let mut command = git.prepared(place, args)?;
    // Each answer is flushed as it is made, whatever stdout is.
    let mut child = command
        .env("GIT_FLUSH", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| GitError::Missing { source })?;
    let pipes = child.stdin.take().zip(child.stdout.take());
    let Some((input, output)) = pipes else {
        return Err(GitError::Missing {
            source: std::io::Error::other("git has no pipes"),
        });
    };
    let blocking = |fd: std::io::Result<std::os::fd::OwnedFd>| {
        fd.map(std::fs::File::from)
            .map_err(|source| GitError::Missing { source })
    };
    let input = blocking(input.into_owned_fd())?;
    let output = blocking(output.into_owned_fd())?;
    Ok((child, input, output))
}
