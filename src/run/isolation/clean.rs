//! `troupe clean` and the run's end: the checkouts a run kept removed,
//! and what only its unlanded attempts wrote pruned from the repository.

use std::path::{Path, PathBuf};

use super::keep::KEPT;
use super::{layered, thin};
use crate::fsutil::remove_dir_if_there;
use crate::git::{Git, GitError, Place};
use crate::record::IsolationRecord;

pub(super) fn remove_all(dirs: &[PathBuf]) -> std::io::Result<()> {
    dirs.iter().try_for_each(|dir| remove_dir_if_there(dir))
}

/// Removes every checkout left in `run_dir` (those of steps that did not
/// complete), with its git directory and layers; `troupe clean`. The
/// checkouts removed, and the commits that wrote the copy-on-write ones
/// out (`Worktrees::keep`), which nothing needs once they are gone.
pub fn clean(run_dir: &Path) -> std::io::Result<(Vec<PathBuf>, Vec<String>)> {
    let commits = kept_commits(run_dir);
    let kept = kept_checkouts(run_dir);
    for checkout in &kept {
        let mut git_dir = checkout.clone().into_os_string();
        git_dir.push(".git");
        remove_all(&[checkout.clone(), PathBuf::from(git_dir)])?;
        // A copy-on-write checkout's layers, kept where troupe could not
        // write the attempt out (or a troupe killed left them).
        let name = checkout.file_name().unwrap_or_default().to_string_lossy();
        if let Some(attempt) = name.strip_prefix("checkout-") {
            let beside = |kind: &str| checkout.with_file_name(format!("{kind}-{attempt}"));
            layered::remove_layers(&beside("upper"), &beside("work"))?;
        }
    }
    remove_all(&[run_dir.join("bases")])?;
    if let Some(thin) = thin::named(run_dir) {
        thin::remove(&thin)?;
    }
    Ok((kept, commits))
}

/// The commits `kept-N.commit` files name in the run's step directories
/// (those of attempts set aside too, `kept-N.commit.cut-K`).
fn kept_commits(run_dir: &Path) -> Vec<String> {
    walkdir::WalkDir::new(run_dir)
        .min_depth(2)
        .max_depth(2)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|entry| {
            entry.file_type().is_file() && entry.file_name().to_string_lossy().starts_with(KEPT)
        })
        .filter_map(|entry| std::fs::read_to_string(entry.path()).ok())
        .map(|text| text.trim().to_string())
        .filter(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit()))
        .collect()
}

/// What `prune` took out of a repository.
#[derive(Debug, Default)]
pub struct Pruned {
    pub objects: usize,
    pub bytes: u64,
}

/// Removes from the user's repository the loose objects that only the
/// run's unlanded attempts (`commits`) hold: what a rejected attempt wrote
/// (its blobs, trees and commit) stays in the repository's `objects/`
/// otherwise, a 300 MB attempt as 300 MB, until git's own prune two weeks
/// later. An object any ref, reflog or the index still reaches is kept (a
/// walk of every object they reach, done only when there are candidates),
/// and so is a packed one; troupe's own repository (`private`) is left
/// alone.
pub async fn prune(record: &IsolationRecord, commits: &[String]) -> Result<Pruned, GitError> {
    let mut pruned = Pruned::default();
    if record.private || commits.is_empty() {
        return Ok(pruned);
    }
    let git = Git::new(record.git_dir.clone());
    let here = Place::default();
    // Those pruned already (a completed step's, as its run ended) are
    // no more.
    let mut args = ["rev-list", "--objects", "--ignore-missing"]
        .map(String::from)
        .to_vec();
    args.extend(commits.iter().cloned());
    args.extend(["--not", "--all", "--reflog", "--indexed-objects"].map(String::from));
    let candidates = git.run(&here, &args).await?;
    let candidates: std::collections::HashSet<&str> = candidates
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    if candidates.is_empty() {
        return Ok(pruned);
    }
    // `--not` excludes only what the boundary's trees hold: a blob a
    // landed attempt wrote again (the same text under another path) is
    // listed above all the same. Only what no ref reaches at all goes.
    let reached = git
        .run(
            &here,
            [
                "rev-list",
                "--objects",
                "--all",
                "--reflog",
                "--indexed-objects",
            ],
        )
        .await?;
    let mut unreached = candidates;
    for line in reached.lines() {
        if let Some(id) = line.split_whitespace().next() {
            unreached.remove(id);
        }
    }
    let common = git
        .run(
            &here,
            ["rev-parse", "--path-format=absolute", "--git-common-dir"],
        )
        .await?;
    let objects = PathBuf::from(common.trim()).join("objects");
    for id in unreached {
        if id.len() < 3 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        let loose = objects.join(&id[..2]).join(&id[2..]);
        let size = std::fs::symlink_metadata(&loose).map(|m| m.len());
        if let Ok(size) = size
            && std::fs::remove_file(&loose).is_ok()
        {
            pruned.objects += 1;
            pruned.bytes += size;
        }
    }
    Ok(pruned)
}

/// The checkouts still in `run_dir` (`<step>/checkout-N`, not their git
/// directories beside them), in order.
pub fn kept_checkouts(run_dir: &Path) -> Vec<PathBuf> {
    let mut kept: Vec<PathBuf> = walkdir::WalkDir::new(run_dir)
        .min_depth(2)
        .max_depth(2)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|entry| {
            let name = entry.file_name().to_string_lossy();
            entry.file_type().is_dir() && name.starts_with("checkout-") && !name.ends_with(".git")
        })
        .map(|entry| entry.path().to_path_buf())
        .collect();
    kept.sort();
    kept
}
