//! An attempt's change written by troupe: its blobs, the trees along its
//! paths (an edit of the base's tree) and its commit, as loose objects in
//! the repository. No index is read or written (a repository's is most of
//! a megabyte per 10,000 files) and no git process is started: the base's
//! trees come from the run's one `git cat-file` (`objects`).
//!
//! Every file is read by troupe from a descriptor opened without following
//! a link and checked to be a regular file, so a file swapped for a FIFO
//! or a link is never read, and one that changes size while it is read
//! is refused rather than half-taken. The layer is still once its
//! worker's processes are gone.

use std::os::fd::AsFd;

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use super::{Blob, Content};
use crate::git::objects::Objects;
use crate::git::objects::tree::Edit;
use crate::run::isolation::{IsolationError, io};

/// The commit an upper layer made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Made {
    pub commit: String,
    pub tree: String,
}

/// A blob of the layer, written: its path, mode and id.
struct Written {
    path: Vec<u8>,
    mode: &'static str,
    id: String,
}

/// The commit on `base` that removes each of `removed` (and all under
/// it), then sets each of `blobs`. Removals go first, so no blob meets a
/// path it replaces. Blocking.
pub(super) fn commit(
    objects: &Objects,
    base: &str,
    message: &str,
    removed: &[Vec<u8>],
    blobs: Vec<Blob>,
) -> Result<Made, IsolationError> {
    let written = write_blobs(objects, blobs)?;
    let base_tree = objects.tree_of(base)?;
    let mut edit = Edit::of(objects, &base_tree)?;
    for path in removed {
        edit.remove(objects, path)?;
    }
    for blob in &written {
        edit.set(objects, &blob.path, blob.mode, &blob.id)?;
    }
    let tree = edit.write(objects)?;
    let commit = objects.write_commit(&tree, &[base], message)?;
    Ok(Made { commit, tree })
}

fn write_blobs(objects: &Objects, blobs: Vec<Blob>) -> Result<Vec<Written>, IsolationError> {
    blobs
        .into_iter()
        .map(|blob| {
            let id = match &blob.content {
                Content::Bytes(bytes) => objects.write_bytes("blob", bytes)?,
                Content::File(path) => {
                    let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK;
                    let fd = crate::fsutil::nofollow::open(path, flags, Mode::empty())
                        .map_err(io(path))?;
                    let stat =
                        crate::fsutil::nofollow::regular_file(fd.as_fd()).map_err(io(path))?;
                    let size = u64::try_from(stat.st_size).unwrap_or_default();
                    // Named by the file it came from as well as by the
                    // objects it went to: either may be why.
                    objects
                        .write_file(std::fs::File::from(fd), size)
                        .map_err(|e| io(path)(std::io::Error::other(e.to_string())))?
                }
            };
            Ok(Written {
                path: blob.path,
                mode: blob.mode,
                id,
            })
        })
        .collect()
}
