//! Running git for a run's checkouts: one repository, named by its git
//! directory, with a work tree and an index given per call.
//!
//! Every call is the same kind of child, narrow, since it works on trees
//! and repositories that workers could have written: a cleared
//! environment (never the API key), the system and global configuration
//! off, no hooks (a `post-checkout` hook would run on every checkout), no
//! fsmonitor, external diff, textconv or pager a configuration could name,
//! a Landlock domain that writes only the repository, the work tree and
//! the index it is given, and a time limit, past which its process group
//! is killed; a run's stop (its deadline, Ctrl-C) ends it too. It has an
//! identity of troupe's own for the commits it makes (a repository with
//! no `user.email` must still work), and C-locale output that can be
//! parsed.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::process::Spawn;

use crate::sandbox::Narrow;
use crate::signal::{StopCause, StopSignal};

/// The longest one git call may take: far beyond what a checkout, a
/// change or a landing of a large repository takes, and a bound on one
/// that reads something that never ends.
const CALL_LIMIT: Duration = Duration::from_secs(600);

/// The oldest git with what isolation needs (`merge-tree --write-tree`).
pub const MIN_VERSION: (u32, u32) = (2, 38);

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("cannot run git: {source} (isolation needs git {major}.{minor} or newer on PATH)", major = MIN_VERSION.0, minor = MIN_VERSION.1)]
    Missing {
        #[source]
        source: std::io::Error,
    },
    #[error("`git {args}` failed ({status}): {stderr}")]
    Failed {
        args: String,
        status: String,
        stderr: String,
    },
    #[error("`git {args}` did not end within {} s and was killed", CALL_LIMIT.as_secs())]
    TimedOut { args: String },
    /// The run stopped (Ctrl-C, its deadline, its output closed) while
    /// git was at work: said as the stop, not as the call it cut short.
    #[error("{cause}")]
    Stopped { args: String, cause: StopCause },
}

/// What a git call printed, and whether it exited 0.
#[derive(Debug)]
pub struct Output {
    pub success: bool,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// One repository.
#[derive(Clone)]
pub struct Git {
    /// The repository's own directory (`.git`, or a bare one).
    pub git_dir: PathBuf,
    /// Where its calls write besides the work tree and index of a call:
    /// the git directory, and for a checkout's own git directory the
    /// repository's, where its objects go.
    writes: Vec<PathBuf>,
    /// The run's stop, which ends a call under way.
    stop: Option<StopSignal>,
}

impl std::fmt::Debug for Git {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Git")
            .field("git_dir", &self.git_dir)
            .finish()
    }
}

/// Where one call looks: a work tree, and an index other than the
/// repository's own.
#[derive(Debug, Clone, Default)]
pub struct Place<'a> {
    pub work_tree: Option<&'a Path>,
    pub index: Option<&'a Path>,
}

impl<'a> Place<'a> {
    /// The work tree `dir`, with the repository's own index.
    pub fn tree(dir: &'a Path) -> Self {
        Place {
            work_tree: Some(dir),
            index: None,
        }
    }

    /// The work tree `dir`, with the index `index`.
    pub fn with_index(dir: &'a Path, index: &'a Path) -> Self {
        Place {
            work_tree: Some(dir),
            index: Some(index),
        }
    }
}

impl Git {
    /// The repository whose git directory is `git_dir`.
    pub fn new(git_dir: PathBuf) -> Git {
        Git {
            writes: vec![git_dir.clone()],
            git_dir,
            stop: None,
        }
    }

    /// A checkout's own git directory, whose objects go to `common`.
    pub fn linked(&self, git_dir: PathBuf, common: &Path) -> Git {
        Git {
            writes: vec![git_dir.clone(), common.to_path_buf()],
            git_dir,
            stop: self.stop.clone(),
        }
    }

    /// Calls under way end when `stop` is triggered.
    pub fn stopped_by(mut self, stop: StopSignal) -> Git {
        self.stop = Some(stop);
        self
    }

    /// Runs `git args` and fails unless it exits 0; its stdout.
    pub async fn run<I, S>(&self, place: &Place<'_>, args: I) -> Result<String, GitError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<S> = args.into_iter().collect();
        let out = self.output(place, &args).await?;
        match out.success {
            true => Ok(out.stdout),
            false => Err(failed(&args, &out)),
        }
    }

    /// Runs `git args` with its stdout into `file` (a diff too large to
    /// hold), and fails unless it exits 0.
    pub async fn run_into<S: AsRef<OsStr>>(
        &self,
        place: &Place<'_>,
        args: &[S],
        file: std::fs::File,
    ) -> Result<(), GitError> {
        let out = as_text(self.exec(place, args, Some(file), None).await?);
        match out.success {
            true => Ok(()),
            false => Err(failed(args, &out)),
        }
    }

    /// Runs `git args` (summary records with `-z`, then a patch), keeping
    /// what it prints up to the empty field git puts between the two and
    /// writing the patch to `file`: the records are troupe's to read, the
    /// patch may be far larger than troupe should hold. Fails unless it
    /// exits 0.
    pub async fn run_split<S: AsRef<OsStr>>(
        &self,
        place: &Place<'_>,
        args: &[S],
        file: std::fs::File,
    ) -> Result<Vec<u8>, GitError> {
        let mut command = self.prepared(place, args)?;
        let mut child = command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| GitError::Missing { source })?;
        let pgid = child.id().and_then(|id| i32::try_from(id).ok());
        let (Some(stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(GitError::Missing {
                source: std::io::Error::other("git has no pipes"),
            });
        };
        let work = async {
            let mut said = Vec::new();
            let (split, _) = tokio::join!(
                split_at_separator(stdout, tokio::fs::File::from_std(file)),
                stderr.read_to_end(&mut said)
            );
            let status = child.wait().await;
            let out = Output {
                success: status.as_ref().is_ok_and(|s| s.success()),
                code: status.as_ref().ok().and_then(|s| s.code()),
                stdout: String::new(),
                stderr: String::from_utf8_lossy(&said).trim().to_string(),
            };
            match (split, out.success) {
                (Ok(records), true) => Ok(records),
                (Err(e), true) => Err(GitError::Failed {
                    args: said_of(args),
                    status: "exit 0".to_string(),
                    stderr: format!("what it printed could not be kept: {e}"),
                }),
                (_, false) => Err(failed(args, &out)),
            }
        };
        let done = self.bounded(|| said_of(args), work).await;
        if done.is_err()
            && let Some(pgid) = pgid
        {
            crate::process::kill_group(pgid);
        }
        done?
    }

    /// Runs `git args` with `input` on its stdin (else `/dev/null`), and
    /// fails unless it exits 0; its stdout as it is: the paths `-z` output
    /// names are bytes, not always UTF-8.
    pub async fn run_bytes<S: AsRef<OsStr>>(
        &self,
        place: &Place<'_>,
        args: &[S],
        input: Option<Vec<u8>>,
    ) -> Result<Vec<u8>, GitError> {
        let out = self.exec(place, args, None, input).await?;
        match out.status.success() {
            true => Ok(out.stdout),
            false => Err(failed(args, &as_text(out))),
        }
    }

    /// `run_bytes` whatever its exit: its exit code and its stdout.
    pub async fn output_bytes<S: AsRef<OsStr>>(
        &self,
        place: &Place<'_>,
        args: &[S],
        input: Option<Vec<u8>>,
    ) -> Result<(Option<i32>, Vec<u8>), GitError> {
        let out = self.exec(place, args, None, input).await?;
        Ok((out.status.code(), out.stdout))
    }

    /// Runs `git args` and returns what it said, whatever its exit.
    pub async fn output<S: AsRef<OsStr>>(
        &self,
        place: &Place<'_>,
        args: &[S],
    ) -> Result<Output, GitError> {
        Ok(as_text(self.exec(place, args, None, None).await?))
    }

    /// `git args`' output, with its stdout into a file or kept, and
    /// `input` written to its stdin while it runs (a git that answers as it
    /// reads would block on a full pipe otherwise), within the call limit
    /// and unless the run's stop comes first; either way its process group
    /// is killed.
    async fn exec<S: AsRef<OsStr>>(
        &self,
        place: &Place<'_>,
        args: &[S],
        stdout: Option<std::fs::File>,
        input: Option<Vec<u8>>,
    ) -> Result<std::process::Output, GitError> {
        let mut command = self.prepared(place, args)?;
        let stdout = match stdout {
            Some(file) => std::process::Stdio::from(file),
            None => std::process::Stdio::piped(),
        };
        if input.is_some() {
            command.stdin(std::process::Stdio::piped());
        }
        let mut child = command
            .stdout(stdout)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|source| GitError::Missing { source })?;
        let pgid = child.id().and_then(|id| i32::try_from(id).ok());
        let pipe = child.stdin.take();
        let fed = async move {
            if let (Some(mut pipe), Some(input)) = (pipe, input) {
                // A git that stops reading has failed, and says why on its
                // stderr; the pipe closes when dropped, which ends its input.
                let _ = pipe.write_all(&input).await;
            }
        };
        let finished = async {
            let (out, ()) = tokio::join!(child.wait_with_output(), fed);
            out
        };
        let done = self.bounded(|| said_of(args), finished).await;
        if done.is_err()
            && let Some(pgid) = pgid
        {
            crate::process::kill_group(pgid);
        }
        done?.map_err(|source| GitError::Missing { source })
    }

    /// The tree `git merge-tree` makes of `ours` and `theirs`, or, when
    /// they conflict, what it printed: the tree and the conflicted paths.
    pub async fn merge_tree(
        &self,
        ours: &str,
        theirs: &str,
    ) -> Result<Result<String, String>, GitError> {
        let args = ["merge-tree", "--write-tree", "--name-only", ours, theirs];
        let out = self.output(&Place::default(), &args).await?;
        match (out.code, out.stdout.lines().next()) {
            (Some(0), Some(tree)) => Ok(Ok(tree.trim().to_string())),
            (Some(1), _) => Ok(Err(out.stdout)),
            _ => Err(failed(&args, &out)),
        }
    }

    /// `work` (an exchange with a long-lived git), within the call limit
    /// and unless the run's stop comes first.
    pub async fn bounded<T>(
        &self,
        said: impl Fn() -> String,
        work: impl std::future::Future<Output = T>,
    ) -> Result<T, GitError> {
        let stopped = async {
            match &self.stop {
                Some(stop) => stop.stopped().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            done = work => Ok(done),
            () = tokio::time::sleep(CALL_LIMIT) => Err(GitError::TimedOut { args: said() }),
            cause = stopped => Err(GitError::Stopped { args: said(), cause }),
        }
    }

    /// `git args` for `place`, confined, not started.
    pub(super) fn prepared<S: AsRef<OsStr>>(
        &self,
        place: &Place<'_>,
        args: &[S],
    ) -> Result<Command, GitError> {
        let mut command = command();
        command.env("GIT_DIR", &self.git_dir);
        let mut writes = self.writes.clone();
        match place.work_tree {
            Some(tree) => {
                command.env("GIT_WORK_TREE", tree).current_dir(tree);
                writes.push(tree.to_path_buf());
            }
            None => {
                command.current_dir(&self.git_dir);
            }
        };
        if let Some(index) = place.index {
            command.env("GIT_INDEX_FILE", index);
            writes.extend(index.parent().map(Path::to_path_buf));
        }
        command.args(args);
        let narrow = Narrow::new(&writes, false);
        if let Some(narrow) = &narrow {
            narrow
                .confine(&mut command)
                .map_err(|source| GitError::Missing { source })?;
        }
        Ok(command)
    }
}

/// What a call printed, as text.
fn as_text(out: std::process::Output) -> Output {
    Output {
        success: out.status.success(),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    }
}

fn said_of<S: AsRef<OsStr>>(args: &[S]) -> String {
    args.iter()
        .map(|a| a.as_ref().to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

/// What `stdout` prints up to the first empty `-z` field (two NULs in a
/// row: no record is empty), with the rest copied into `file`.
async fn split_at_separator(
    mut stdout: tokio::process::ChildStdout,
    mut file: tokio::fs::File,
) -> std::io::Result<Vec<u8>> {
    let mut records = Vec::new();
    let mut chunk = vec![0; 64 * 1024];
    let mut searched = 0;
    loop {
        let read = stdout.read(&mut chunk).await?;
        if read == 0 {
            return Ok(records);
        }
        records.extend_from_slice(&chunk[..read]);
        let found = records[searched..].windows(2).position(|w| w == b"\0\0");
        if let Some(at) = found.map(|at| at + searched) {
            file.write_all(&records[at + 2..]).await?;
            records.truncate(at + 1);
            break;
        }
        searched = records.len().saturating_sub(1);
    }
    tokio::io::copy(&mut stdout, &mut file).await?;
    file.flush().await?;
    Ok(records)
}

/// Settings every call gets on its command line, which no configuration
/// file overrides: what could run a program or reach the network is off.
const HARDENED: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.pager=cat",
    "core.sshCommand=false",
    "core.askPass=false",
    "credential.helper=",
    "diff.external=",
    "protocol.allow=never",
    "advice.detachedHead=false",
];

/// What git flushes itself: every ref it moves; under `--durability
/// strict` every object too, in batches. Between, the objects a landing
/// names are flushed by troupe at once before the branch moves
/// (`Worktrees::land`), which costs one flush instead of one per file of
/// a large change.
fn fsync_settings() -> [&'static str; 4] {
    match crate::fsutil::Durability::Atomic.flushes() {
        true => ["-c", "core.fsync=committed", "-c", "core.fsyncMethod=batch"],
        false => ["-c", "core.fsync=reference", "-c", "core.fsyncMethod=fsync"],
    }
}

/// `git` with the environment every call gets (`process::Spawn::git`).
fn command() -> Command {
    let mut command = Spawn::git().command_for("git");
    for setting in HARDENED {
        command.args(["-c", setting]);
    }
    command.args(fsync_settings());
    command
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_ATTR_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .env("GIT_AUTHOR_NAME", "troupe")
        .env("GIT_AUTHOR_EMAIL", "troupe@localhost")
        .env("GIT_COMMITTER_NAME", "troupe")
        .env("GIT_COMMITTER_EMAIL", "troupe@localhost")
        .stdin(std::process::Stdio::null());
    command
}

fn failed<S: AsRef<OsStr>>(args: &[S], out: &Output) -> GitError {
    GitError::Failed {
        args: said_of(args),
        status: match out.code {
            Some(code) => format!("exit {code}"),
            None => "killed".to_string(),
        },
        stderr: crate::text::excerpt(&out.stderr, 600),
    }
}

/// The installed git's version, `(major, minor)`: asked once per process
/// (a run asks before it snapshots and again when it opens its trees).
pub async fn version() -> Result<(u32, u32), GitError> {
    static FOUND: tokio::sync::OnceCell<(u32, u32)> = tokio::sync::OnceCell::const_new();
    FOUND.get_or_try_init(ask_version).await.copied()
}

async fn ask_version() -> Result<(u32, u32), GitError> {
    let out = command()
        .arg("--version")
        .output()
        .await
        .map_err(|source| GitError::Missing { source })?;
    let text = String::from_utf8_lossy(&out.stdout);
    let number = text.split_whitespace().nth(2).unwrap_or("");
    let mut parts = number.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    Ok((parts.next().unwrap_or(0), parts.next().unwrap_or(0)))
}

/// The repository whose top-level work tree is exactly `dir`, if any:
/// its git directory. A workspace inside a repository, but not at its
/// top, gets a private repository instead, so the user's is never
/// committed to from a part of it.
pub async fn repository_at(dir: &Path) -> Option<PathBuf> {
    // The one call that finds a repository rather than being given one;
    // the user named the workspace, so its owner need not be troupe's user.
    let safe = format!("safe.directory={}", dir.display());
    let out = command()
        .current_dir(dir)
        .args(["-c", &safe])
        .args([
            "rev-parse",
            "--path-format=absolute",
            "--show-toplevel",
            "--absolute-git-dir",
        ])
        .output()
        .await
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let top = PathBuf::from(lines.next()?);
    let git_dir = PathBuf::from(lines.next()?);
    let same = top.canonicalize().ok()? == dir.canonicalize().ok()?;
    same.then_some(git_dir)
}
