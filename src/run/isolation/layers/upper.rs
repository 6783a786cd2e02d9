//! An attempt's change read from the upper layer of its overlay checkout:
//! the base's tree with what the upper directory holds laid over it, as
//! the kernel lays it in the merged view the worker saw. Only the upper
//! directory is walked and only its files are hashed, so a change costs
//! what the attempt wrote, not the size of the repository (`git add -A`
//! of a whole checkout reads every file again).
//!
//! The upper directory speaks overlayfs (the kernel's
//! `Documentation/filesystems/overlayfs.rst`): a character device 0/0 is
//! a whiteout, the base's entry deleted; a directory whose `opaque`
//! marker is `y` hides the base's directory of that name; any other
//! directory merges with the base's. A file or link replaces whatever the
//! base has at its path, a directory replaces a base file. Troupe's mounts
//! turn redirects and metacopy off; whiteouts in xattr form are for
//! lower layers other tools build (composefs), and the kernel never
//! writes one, nor honours one in an upper layer (such a file is listed,
//! yet not found). An entry carrying any of these markers was not made
//! through the mount and is refused, unread, as FIFOs, sockets, devices
//! and files too large are (the wording and the cap are `admit`'s).

use std::collections::HashSet;
use std::fs::Metadata;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::git::Cached;
use crate::git::Git;
use crate::git::ignores::Checker;
use crate::git::objects::{Objects, tree};
use crate::run::isolation::named;
use crate::run::isolation::{IsolationError, io, off_runtime};

mod write;

pub use self::write::Made;

/// Which xattr namespace an overlay mount keeps its markers in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Markers {
    /// `trusted.overlay.*`: a mount made with `CAP_SYS_ADMIN` in the
    /// initial user namespace.
    Trusted,
    /// `user.overlay.*`: a mount with `userxattr`, as one made in an
    /// unprivileged user namespace must be.
    User,
}

impl Markers {
    fn prefix(self) -> &'static str {
        match self {
            Markers::Trusted => "trusted.overlay.",
            Markers::User => "user.overlay.",
        }
    }
}

/// What an upper layer is laid over.
#[derive(Debug, Clone, Copy)]
pub struct Over<'a> {
    /// The base's commit, the change's parent.
    pub commit: &'a str,
    /// The base on disk, whose ignore rules say which new paths to leave
    /// out.
    pub rules: &'a Path,
}

/// What the upper layer of an attempt holds, committed on its base.
#[derive(Debug)]
pub struct UpperChange {
    /// `None` when anything was refused: a change is taken whole or not
    /// at all.
    pub made: Option<Made>,
    /// What troupe will not take, each a sentence naming its path.
    pub refused: Vec<String>,
}

/// The upper directory `upper` laid over the base, committed on it with
/// `message`: its blobs, the trees along its paths and the commit written
/// into `git`'s repository by troupe, reading only the base's trees the
/// paths go through. The upper directory must be still: read while a
/// worker writes to it, the commit may hold half of a change. A path the
/// base does not have that the ignore rules in `rules` (the base's tree
/// on disk) match is left out, as `add -A` leaves it out of a full
/// checkout's change: a build's output is not a change.
///
/// All of it is one job off the run's thread, bounded as a git call is:
/// with twenty agents ending at once, each trip back to the run's thread
/// waits its turn for the CPU.
pub async fn commit_upper(
    git: &Git,
    cached: &Cached,
    base: Over<'_>,
    upper: &Path,
    markers: Markers,
    message: &str,
    max_file_size: Option<u64>,
) -> Result<UpperChange, IsolationError> {
    let objects = cached.objects(git).await?;
    objects.start()?;
    let checker = cached.ignores.checker(git, base.rules)?;
    let job = Job {
        objects: Arc::clone(&objects),
        checker: Arc::clone(&checker),
        base: base.commit.to_string(),
        upper: upper.to_path_buf(),
        markers,
        message: message.to_string(),
        max_file_size,
    };
    let said = || {
        format!(
            "cat-file --batch, check-ignore --stdin (the change in {})",
            upper.display()
        )
    };
    match git.bounded(said, off_runtime(move || job.run())).await {
        Ok(done) => done,
        Err(e) => {
            objects.kill();
            checker.kill();
            Err(e.into())
        }
    }
}

/// A change's work, for a blocking thread.
struct Job {
    objects: Arc<Objects>,
    checker: Arc<Checker>,
    base: String,
    upper: PathBuf,
    markers: Markers,
    message: String,
    max_file_size: Option<u64>,
}

impl Job {
    fn run(self) -> Result<UpperChange, IsolationError> {
        let layer = read_layer(&self.upper, self.markers, self.max_file_size)?;
        if !layer.refused.is_empty() {
            return Ok(UpperChange {
                made: None,
                refused: named(layer.refused),
            });
        }
        let made = self.build(layer)?;
        Ok(UpperChange {
            made: Some(made),
            refused: Vec::new(),
        })
    }

    /// Writes `layer` as a commit on the base.
    fn build(&self, mut layer: Layer) -> Result<Made, IsolationError> {
        let paths: Vec<&[u8]> = layer
            .blobs
            .iter()
            .map(|blob| blob.path.as_slice())
            .collect();
        // Left out unless the base has them: a tracked file is never
        // ignored.
        let candidates = self.checker.ignored(&paths)?;
        let bare = bare_dirs(&layer, &candidates);
        let asked: Vec<&[u8]> = candidates
            .iter()
            .map(Vec::as_slice)
            .chain(bare.iter().map(Vec::as_slice))
            .collect();
        let files = base_files(&self.objects, &self.base, &asked)?;
        layer
            .blobs
            .retain(|blob| !candidates.contains(&blob.path) || files.contains(&blob.path));
        // A directory of the layer replaces a file of the base at its path.
        let replaced = bare.into_iter().filter(|dir| files.contains(dir));
        let removed: Vec<Vec<u8>> = layer
            .whiteouts
            .into_iter()
            .chain(layer.opaque)
            .chain(replaced)
            .collect();
        write::commit(
            &self.objects,
            &self.base,
            &self.message,
            &removed,
            layer.blobs,
        )
    }
}

/// What a walk of an upper directory found, each path relative to it.
#[derive(Default)]
struct Layer {
    /// Files and links, new or changed.
    blobs: Vec<Blob>,
    /// The base's entry at each goes, and all under it.
    whiteouts: Vec<Vec<u8>>,
    /// Directories that merge with the base's, and replace a base file.
    dirs: Vec<Vec<u8>>,
    /// Every base entry under one goes, but what the upper holds.
    opaque: Vec<Vec<u8>>,
    refused: Vec<String>,
}

pub(in crate::run::isolation) struct Blob {
    pub(in crate::run::isolation) path: Vec<u8>,
    pub(in crate::run::isolation) mode: &'static str,
    pub(in crate::run::isolation) content: Content,
}

pub(in crate::run::isolation) enum Content {
    /// A file of the upper directory, which git reads itself.
    File(PathBuf),
    /// Bytes troupe hands git in the stream: a link's target (git would
    /// follow the link), or a small file troupe read.
    Bytes(Vec<u8>),
}

/// What one entry of the upper directory is.
enum Entry {
    Blob(&'static str, Content),
    Dir { opaque: bool },
    Whiteout,
    Refused(String),
}

/// Which of `paths` the base has as a file or link (not a directory),
/// each looked up along its own path: a change costs what it holds, not
/// the base's size.
fn base_files(
    objects: &Objects,
    base: &str,
    paths: &[&[u8]],
) -> Result<HashSet<Vec<u8>>, IsolationError> {
    let mut files = HashSet::new();
    if paths.is_empty() {
        return Ok(files);
    }
    let tree = objects.tree_of(base)?;
    for path in paths {
        if let Some(entry) = tree::entry_at(objects, &tree, path)?
            && !entry.is_tree()
        {
            files.insert(path.to_vec());
        }
    }
    Ok(files)
}

/// The layer's merging directories with no blob in them but ignored
/// ones: the only ones that may stand for nothing but the removal of a
/// base file at their path (one with a blob in it replaces that file as
/// the blob is written).
fn bare_dirs(layer: &Layer, ignored: &HashSet<Vec<u8>>) -> Vec<Vec<u8>> {
    let holding: HashSet<&[u8]> = layer
        .blobs
        .iter()
        .filter(|blob| !ignored.contains(&blob.path))
        .flat_map(|blob| parents(&blob.path))
        .collect();
    layer
        .dirs
        .iter()
        .map(Vec::as_slice)
        .filter(|dir| !holding.contains(dir) && !layer.opaque.iter().any(|o| o == dir))
        .map(<[u8]>::to_vec)
        .collect()
}

/// The directories `path` is in, outermost first.
fn parents(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    path.iter()
        .enumerate()
        .filter(|(_, byte)| **byte == b'/')
        .map(move |(end, _)| &path[..end])
}

/// Every entry of `upper` but its top-level `.git` (troupe's link to the
/// checkout's git directory) and results directory (hidden from a worker
/// whose base is the workspace itself, and never part of a change), links
/// not followed.
fn read_layer(
    upper: &Path,
    markers: Markers,
    max_file_size: Option<u64>,
) -> Result<Layer, IsolationError> {
    let mut layer = Layer::default();
    let mut walk = walkdir::WalkDir::new(upper)
        .min_depth(1)
        .follow_links(false)
        .sort_by_file_name()
        .into_iter();
    while let Some(entry) = walk.next() {
        let entry = entry.map_err(|e| {
            let path = e.path().unwrap_or(upper).to_path_buf();
            IsolationError::Io {
                path,
                source: e.into(),
            }
        })?;
        let is_dir = entry.file_type().is_dir();
        let own = [".git", crate::protocol::RESULTS_DIR];
        if entry.depth() == 1 && own.iter().any(|name| entry.file_name() == *name) {
            if is_dir {
                walk.skip_current_dir();
            }
            continue;
        }
        let rel = entry.path().strip_prefix(upper).unwrap_or(entry.path());
        let path = rel.as_os_str().as_bytes().to_vec();
        let meta = entry.metadata().map_err(|e| IsolationError::Io {
            path: entry.path().to_path_buf(),
            source: e.into(),
        })?;
        let found = match entry.file_name().eq_ignore_ascii_case(".git") {
            true => Entry::Refused(
                "is a .git inside the change: troupe takes no nested repository into a change"
                    .to_string(),
            ),
            false => {
                read_entry(entry.path(), &meta, markers, max_file_size).map_err(io(entry.path()))?
            }
        };
        match found {
            Entry::Blob(mode, content) => layer.blobs.push(Blob {
                path,
                mode,
                content,
            }),
            Entry::Dir { opaque } => {
                if opaque {
                    layer.opaque.push(path.clone());
                }
                layer.dirs.push(path);
            }
            Entry::Whiteout => layer.whiteouts.push(path),
            Entry::Refused(why) => {
                layer.refused.push(format!("{} {why}", rel.display()));
                if is_dir {
                    walk.skip_current_dir();
                }
            }
        }
    }
    Ok(layer)
}

/// What the entry at `path` is; what it refuses is never opened.
fn read_entry(
    path: &Path,
    meta: &Metadata,
    markers: Markers,
    max_file_size: Option<u64>,
) -> std::io::Result<Entry> {
    const TAKES: &str =
        "troupe takes only files, directories and links of a sane size into a change";
    let kind = meta.file_type();
    let odd = if kind.is_fifo() {
        Some("a FIFO")
    } else if kind.is_socket() {
        Some("a socket")
    } else if kind.is_block_device() {
        Some("a block device")
    } else if kind.is_char_device() && meta.rdev() != 0 {
        Some("a device")
    } else {
        None
    };
    if let Some(odd) = odd {
        return Ok(Entry::Refused(format!("is {odd}: {TAKES}")));
    }
    let opaque = match marked(path, kind.is_dir(), markers)? {
        Marked::Foreign(name) => {
            return Ok(Entry::Refused(format!(
                "carries the overlay marker {name}, which troupe's mounts never make: troupe takes only what came through its mount into a change"
            )));
        }
        Marked::Opaque => true,
        Marked::Plain => false,
    };
    if kind.is_dir() {
        return Ok(Entry::Dir { opaque });
    }
    if kind.is_symlink() {
        let target = std::fs::read_link(path)?;
        let target = target.into_os_string().into_vec();
        return Ok(Entry::Blob("120000", Content::Bytes(target)));
    }
    if kind.is_char_device() {
        return Ok(Entry::Whiteout);
    }
    let size = meta.len();
    if let Some(max) = max_file_size.filter(|max| size > *max) {
        return Ok(Entry::Refused(format!(
            "is {size} bytes, more than --max-file-size {max}: {TAKES}"
        )));
    }
    if let Some(sparse) = crate::run::isolation::admit::sparse(path, size) {
        return Ok(Entry::Refused(format!("is {sparse}: {TAKES}")));
    }
    let mode = match meta.mode() & 0o100 {
        0 => "100644",
        _ => "100755",
    };
    Ok(Entry::Blob(mode, Content::File(path.to_path_buf())))
}

/// What an entry's overlay xattrs make of it.
enum Marked {
    Plain,
    Opaque,
    /// A marker troupe's mounts never write (redirect, metacopy, an xattr
    /// whiteout, another namespace's opaque): named.
    Foreign(String),
}

/// The overlay xattrs of the entry at `path`, read without following it.
fn marked(path: &Path, is_dir: bool, markers: Markers) -> std::io::Result<Marked> {
    let names = match xattr::list(path) {
        Ok(names) => names,
        Err(e) if e.kind() == std::io::ErrorKind::Unsupported => return Ok(Marked::Plain),
        Err(e) => return Err(e),
    };
    let mut found = Marked::Plain;
    for name in names {
        let text = name.to_string_lossy();
        let Some(what) = ["trusted.overlay.", "user.overlay."]
            .iter()
            .find_map(|prefix| text.strip_prefix(prefix))
        else {
            continue;
        };
        let own = text.starts_with(markers.prefix());
        match what {
            "opaque" if own && is_dir && xattr::get(path, &name)?.as_deref() == Some(b"y") => {
                found = Marked::Opaque;
            }
            "opaque" | "redirect" | "metacopy" | "whiteout" | "whiteouts" => {
                return Ok(Marked::Foreign(text.into_owned()));
            }
            _ => {}
        }
    }
    Ok(found)
}

#[cfg(test)]
pub(in crate::run::isolation) mod tests;
