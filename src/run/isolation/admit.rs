//! What of a worker's checkout troupe takes into a change, and what of a
//! change it will land: troupe works on trees a worker made, so it reads
//! nothing there that could hold it up and lands nothing that reaches out.
//!
//! Before `git add -A`, a checkout may hold no FIFO, socket or device where
//! git would read it (git blocks forever on a FIFO), no file over
//! `--max-file-size` (a sparse file of terabytes would be hashed for
//! hours) and no nested `.git` (git would read the repository it names,
//! wherever that lies, as copy-on-write checkouts never do); ignored
//! paths are git's to skip and left alone. After, a change
//! may not add a nested repository (a gitlink names a commit troupe never
//! saw, in a directory the worker's sandbox may close), a symbolic link
//! whose target, followed through the change's other links, leaves the
//! workspace (applied, it would point the user's tree at `/etc/shadow`;
//! `links`), or troupe's own configuration (`troupe.toml`,
//! `.troupe/`). Each refusal is a sentence naming the path.

use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::named;
use super::stat::Raw;
use crate::git::{Git, GitError, Place};
use crate::supervisor::spawn::GUARDED;

/// What in `checkout` troupe will not read into a change.
pub async fn unfit_files(
    git: &Git,
    checkout: &Path,
    max_file_size: Option<u64>,
) -> Result<Vec<String>, GitError> {
    // A walk of the whole checkout: off the thread that serves the agents.
    // It cannot fail; a walk cut short by the runtime's end finds nothing.
    let owned = checkout.to_path_buf();
    let found = tokio::task::spawn_blocking(move || odd_entries(&owned, max_file_size))
        .await
        .unwrap_or_default();
    if found.is_empty() {
        return Ok(Vec::new());
    }
    let ignored = ignored(git, checkout, found.iter().map(|(p, _)| p.as_path())).await?;
    let unfit = found
        .into_iter()
        .filter(|(path, _)| !ignored.contains(path))
        .map(|(path, why)| {
            format!(
                "{} is {why}: troupe takes only files, directories and links of a sane size into a change, and no nested repository",
                path.display()
            )
        })
        .collect();
    Ok(named(unfit))
}

/// Which of `paths` git ignores, asked without reading any of them.
async fn ignored<'a>(
    git: &Git,
    checkout: &Path,
    paths: impl Iterator<Item = &'a Path>,
) -> Result<Vec<PathBuf>, GitError> {
    let mut args = vec![
        "check-ignore".to_string(),
        "--no-index".to_string(),
        "--".to_string(),
    ];
    args.extend(paths.map(|p| p.display().to_string()));
    let place = Place::tree(checkout);
    let out = git.output(&place, &args).await?;
    Ok(out.stdout.lines().map(PathBuf::from).collect())
}

/// What of a change (its `--raw` records, its `commit`) troupe will not
/// land; `guarded` are the workspace's paths troupe reads as its own
/// besides its guarded names.
pub async fn refusals(
    git: &Git,
    commit: &str,
    changed: &[Raw],
    guarded: &[PathBuf],
) -> Result<Vec<String>, GitError> {
    let mut refused = Vec::new();
    for Raw {
        path,
        old_mode,
        new_mode,
        ..
    } in changed
    {
        if GUARDED.iter().any(|name| Path::new(path).starts_with(name)) {
            refused.push(format!(
                "{path} is troupe's configuration, never a step's to change"
            ));
        } else if guarded.iter().any(|own| Path::new(path).starts_with(own)) {
            refused.push(format!(
                "{path} is troupe's (its prompts or settings, read-only to every agent), never a step's to change"
            ));
        } else if new_mode == "160000" && old_mode != "160000" {
            refused.push(format!(
                "{path} is a nested repository (a gitlink), which troupe does not land"
            ));
        }
    }
    let links: Vec<String> = changed
        .iter()
        .filter(|raw| raw.new_mode == "120000")
        .map(|raw| raw.path.clone())
        .collect();
    if !links.is_empty() {
        refused.extend(super::links::leading_out(git, commit, &links).await?);
    }
    Ok(named(refused))
}

/// Below this size a file's holes cost nothing to read.
const SPARSE_FROM: u64 = 1 << 20;

/// What a sparse file is called in a refusal, or `None` for a file read
/// as it is stored: one with holes costs troupe its whole size in hashing
/// (four files of 1 GiB held a run for half a minute) and the disk
/// nothing, so no worker has a reason to make one.
pub(super) fn sparse(path: &Path, size: u64) -> Option<String> {
    use std::os::fd::AsFd;
    if size < SPARSE_FROM {
        return None;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let hole = nix::unistd::lseek(file.as_fd(), 0, nix::unistd::Whence::SeekHole).ok()?;
    (u64::try_from(hole).ok()? < size)
        .then(|| format!("a sparse file of {size} bytes (a hole at byte {hole})"))
}

/// The entries of `checkout` that are no file, directory or link, or a
/// file over `max_file_size`, or a nested repository's `.git` (git would
/// read it, and the repository a `.git` file names may lie anywhere),
/// each with what it is.
fn odd_entries(checkout: &Path, max_file_size: Option<u64>) -> Vec<(PathBuf, String)> {
    walkdir::WalkDir::new(checkout)
        .follow_links(false)
        .into_iter()
        .filter_entry(|e| !(e.depth() == 1 && e.file_name() == ".git"))
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let kind = entry.file_type();
            let rel = entry.path().strip_prefix(checkout).ok()?.to_path_buf();
            let why = if entry.file_name().eq_ignore_ascii_case(".git") {
                "a .git, a nested repository's".to_string()
            } else if kind.is_fifo() {
                "a FIFO".to_string()
            } else if kind.is_socket() {
                "a socket".to_string()
            } else if kind.is_char_device() || kind.is_block_device() {
                "a device".to_string()
            } else {
                let size = entry.metadata().ok().filter(|m| m.is_file())?.len();
                match max_file_size.filter(|max| size > *max) {
                    Some(max) => format!("{size} bytes, more than --max-file-size {max}"),
                    None => sparse(entry.path(), size)?,
                }
            };
            Some((rel, why))
        })
        .collect()
}
