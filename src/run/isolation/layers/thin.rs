//! The base of a head the run's landings made, where the workspace is
//! the snapshot's base: a thin layer of what landed since the snapshot
//! (the files changed, a whiteout for each path gone), laid over the
//! workspace, instead of the whole tree written out again. A DAG's every
//! level starts from such a head, and writing it whole cost a full
//! checkout of the repository each time (seconds per head on 10,000
//! files on a disk); the layer costs what the run changed, and the
//! head's index, merged from the snapshot's.
//!
//! The kernel refuses a lower layer inside another one, so the layers
//! cannot be in the run directory, which is in the workspace: they are
//! kept in a directory of the run's own in the temp directory, named by
//! the run directory (so that a later troupe on the same run, and `troupe
//! clean`, find what a killed one left). Only where that directory is on
//! the workspace's file system, outside the workspace: a file system the
//! agents' overlays already mount from. Elsewhere, and for a head whose
//! landings changed what a layer cannot say as the snapshot's base says it
//! (an ignore file, whose rules the change's check reads from the
//! workspace; a nested repository), the base is written whole.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::git::{Git, Place};
use crate::run::isolation::{IsolationError, io, off_runtime};

/// The run's directory of thin layers, for the run in `run_dir` over
/// `workspace`; `None` where none can be kept (see the module's doc).
pub fn place(run_dir: &Path, workspace: &Path) -> Option<PathBuf> {
    let dir = named(run_dir)?;
    let temp = dir.parent()?;
    let workspace = std::fs::canonicalize(workspace).ok()?;
    let same_disk = std::fs::metadata(temp).ok()?.dev() == std::fs::metadata(run_dir).ok()?.dev();
    (same_disk && !temp.starts_with(&workspace)).then_some(dir)
}

/// Where the run in `run_dir` keeps its thin layers, if it keeps them.
pub fn named(run_dir: &Path) -> Option<PathBuf> {
    let run = std::fs::metadata(run_dir).ok()?;
    let temp = std::fs::canonicalize(std::env::temp_dir()).ok()?;
    Some(temp.join(format!("troupe-layers-{:x}-{:x}", run.dev(), run.ino())))
}

/// Removes the directory of thin layers at `dir` if this user owns it:
/// what a killed troupe left, or the run's at its end.
pub fn remove(dir: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() && meta.uid() == nix::unistd::geteuid().as_raw() => {
            std::fs::remove_dir_all(dir)
        }
        _ => Ok(()),
    }
}

/// Makes the run's directory of thin layers, emptied of what a killed
/// troupe left; false where it cannot be made as this user's own.
pub fn make(dir: &Path) -> bool {
    if remove(dir).is_err() {
        return false;
    }
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().mode(0o700).create(dir).is_ok()
}

/// One record of `git diff-tree --raw -z`.
struct Record<'a> {
    new_mode: &'a [u8],
    deleted: bool,
    path: &'a [u8],
}

const TREE: &[u8] = b"040000";
const GITLINK: &[u8] = b"160000";

fn records(raw: &[u8]) -> Option<Vec<Record<'_>>> {
    let mut fields = raw.split(|b| *b == 0).filter(|f| !f.is_empty());
    let mut found = Vec::new();
    while let Some(meta) = fields.next() {
        let meta = meta.strip_prefix(b":")?;
        let parts: Vec<&[u8]> = meta.split(|b| *b == b' ').collect();
        let [old_mode, new_mode, _, _, status] = parts[..] else {
            return None;
        };
        if old_mode == GITLINK || new_mode == GITLINK {
            return None;
        }
        found.push(Record {
            new_mode,
            deleted: status == b"D",
            path: fields.next()?,
        });
    }
    Some(found)
}

/// Whether `path` is a file of ignore rules, which a layer cannot change
/// (the change's check reads them from the workspace).
fn is_ignore_file(path: &[u8]) -> bool {
    path.rsplit(|b| *b == b'/').next() == Some(b".gitignore")
}

/// Whether a layer can say what `records` change as the snapshot's base
/// says it.
fn layerable(records: &[Record<'_>]) -> bool {
    !records.iter().any(|r| is_ignore_file(r.path))
}

/// The two heads a thin layer lies between.
pub struct Heads<'a> {
    pub snapshot: &'a str,
    pub head: &'a str,
    /// Every path that landed between them, where troupe knows them all
    /// (each landing added and modified files only).
    pub known: Option<&'a [String]>,
}

/// What a layer holds: the files to write (each ended by a NUL, as
/// `checkout-index -z --stdin` reads them), and the paths gone.
struct Changed {
    written: Vec<u8>,
    gone: Vec<PathBuf>,
}

/// What landed between `heads`: known, or read by one `git diff-tree`;
/// `None` when a layer cannot say it.
async fn changed(git: &Git, heads: &Heads<'_>) -> Result<Option<Changed>, IsolationError> {
    if let Some(known) = heads.known {
        if known.iter().any(|path| is_ignore_file(path.as_bytes())) {
            return Ok(None);
        }
        let mut written = Vec::new();
        for path in known {
            written.extend_from_slice(path.as_bytes());
            written.push(0);
        }
        let gone = Vec::new();
        return Ok(Some(Changed { written, gone }));
    }
    let args = [
        "diff-tree",
        "-r",
        "-t",
        "--no-renames",
        "--raw",
        "-z",
        heads.snapshot,
        heads.head,
    ];
    let raw = git.run_bytes(&Place::default(), &args, None).await?;
    let Some(records) = records(&raw).filter(|r| layerable(r)) else {
        return Ok(None);
    };
    let mut changed = Changed {
        written: Vec::new(),
        gone: Vec::new(),
    };
    for record in &records {
        if record.deleted {
            let path = std::ffi::OsStr::from_bytes(record.path);
            changed.gone.push(PathBuf::from(path));
        } else if record.new_mode != TREE {
            changed.written.extend_from_slice(record.path);
            changed.written.push(0);
        }
    }
    Ok(Some(changed))
}

/// Writes the thin layer of `heads.head` into `dir` (made new), with
/// its index at `index`: the snapshot's index at `seed` merged to the head
/// by one `read-tree -m -u`, which writes the files that differ and keeps
/// the stat data git read the others with. False, with nothing written,
/// when a layer cannot say what landed since the snapshot.
pub async fn write(
    git: &Git,
    heads: Heads<'_>,
    dir: &Path,
    (seed, index): (&Path, &Path),
) -> Result<bool, IsolationError> {
    let Some(Changed { written, mut gone }) = changed(git, &heads).await? else {
        return Ok(false);
    };
    let made = (dir.to_path_buf(), seed.to_path_buf(), index.to_path_buf());
    let seeded = off_runtime(move || {
        let (dir, seed, index) = made;
        crate::fsutil::nofollow::remake_dir(&dir).map_err(io(&dir))?;
        let _ = std::fs::remove_file(&index);
        Ok(std::fs::copy(&seed, &index).is_ok())
    })
    .await?;
    let place = Place::with_index(dir, index);
    let Heads { snapshot, head, .. } = heads;
    if seeded {
        git.run(&place, ["read-tree", "-m", "-u", snapshot, head])
            .await?;
    } else {
        git.run(&place, ["read-tree", head]).await?;
        if !written.is_empty() {
            let args = ["checkout-index", "-f", "-q", "-z", "--stdin"];
            git.run_bytes(&place, &args, Some(written)).await?;
        }
    }
    if gone.is_empty() {
        return Ok(true);
    }
    // Parents sort before what they hold: a directory gone is one whiteout,
    // and the paths it held under it are left alone.
    gone.sort();
    let dir = dir.to_path_buf();
    off_runtime(move || super::carry::whiteouts(&dir, &gone)).await?;
    Ok(true)
}

#[cfg(test)]
mod tests;
