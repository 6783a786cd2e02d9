//! Running git for a run's checkouts: one repository, named by its git
//! directory, with a work tree and an index given per call.
//!
//! Every call is the same kind of child: no terminal prompt, no hooks of
//! the user's (a `post-checkout` hook would run on every checkout), an
//! identity of troupe's own for the commits it makes (a repository with
//! no `user.email` must still work), and C-locale output that can be
//! parsed.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use tokio::process::Command;

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
#[derive(Debug, Clone)]
pub struct Git {
    /// The repository's own directory (`.git`, or a bare one).
    pub git_dir: PathBuf,
}

/// Where one call looks: a work tree, and an index other than the
/// repository's own.
#[derive(Debug, Clone, Default)]
pub struct Place<'a> {
    pub work_tree: Option<&'a Path>,
    pub index: Option<&'a Path>,
}

impl Git {
    /// Runs `git args` and fails unless it exits 0; its stdout.
    pub async fn run<I, S>(&self, place: &Place<'_>, args: I) -> Result<String, GitError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<std::ffi::OsString> =
            args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let out = self.output(place, &args).await?;
        match out.success {
            true => Ok(out.stdout),
            false => Err(failed(&args, &out)),
        }
    }

    /// Runs `git args` and returns what it said, whatever its exit.
    pub async fn output<S: AsRef<OsStr>>(
        &self,
        place: &Place<'_>,
        args: &[S],
    ) -> Result<Output, GitError> {
        let mut command = command();
        command.env("GIT_DIR", &self.git_dir);
        match place.work_tree {
            Some(tree) => command.env("GIT_WORK_TREE", tree).current_dir(tree),
            None => command.current_dir(&self.git_dir),
        };
        if let Some(index) = place.index {
            command.env("GIT_INDEX_FILE", index);
        }
        command.args(args);
        let out = command
            .output()
            .await
            .map_err(|source| GitError::Missing { source })?;
        Ok(Output {
            success: out.status.success(),
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// `git` with the environment every call gets.
fn command() -> Command {
    let mut command = Command::new("git");
    command
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "advice.detachedHead=false",
        ])
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .env("GIT_AUTHOR_NAME", "troupe")
        .env("GIT_AUTHOR_EMAIL", "troupe@localhost")
        .env("GIT_COMMITTER_NAME", "troupe")
        .env("GIT_COMMITTER_EMAIL", "troupe@localhost")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    command
}

fn failed(args: &[std::ffi::OsString], out: &Output) -> GitError {
    GitError::Failed {
        args: args
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" "),
        status: match out.code {
            Some(code) => format!("exit {code}"),
            None => "killed".to_string(),
        },
        stderr: crate::text::excerpt(&out.stderr, 600),
    }
}

/// The installed git's version, `(major, minor)`.
pub async fn version() -> Result<(u32, u32), GitError> {
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
    let out = command()
        .current_dir(dir)
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
