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

use super::admit::named;
use super::git::{Git, GitError, Place};
use super::{IsolationError, io, off_runtime};

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
    /// The base's tree.
    pub tree: &'a str,
    /// The base on disk, whose ignore rules say which new paths to leave
    /// out.
    pub rules: &'a Path,
    /// An index of the tree (the base's, which git wrote), copied to begin
    /// the scratch index rather than read from the tree again.
    pub index: Option<&'a Path>,
}

/// What the upper layer of an attempt holds, as a tree on its base.
#[derive(Debug)]
pub struct UpperTree {
    /// `None` when anything was refused: a change is taken whole or not
    /// at all.
    pub tree: Option<String>,
    /// What troupe will not take, each a sentence naming its path.
    pub refused: Vec<String>,
}

/// The tree of `base_tree` with the overlay upper directory `upper` laid
/// over it, its blobs written into `git`'s repository. `index` is a
/// scratch index troupe owns (a link's target is kept beside it, in
/// `<index>.links`, while git hashes it); both are removed afterwards.
/// The upper directory must be still: read while a worker writes to it,
/// the tree may hold half of a change. A path the base does not have that
/// the ignore rules in `rules` (the base's tree on disk) match is left
/// out, as `add -A` leaves it out of a full checkout's change: a build's
/// output is not a change.
pub async fn tree_from_upper(
    git: &Git,
    base: Over<'_>,
    upper: &Path,
    markers: Markers,
    index: &Path,
    max_file_size: Option<u64>,
) -> Result<UpperTree, IsolationError> {
    let owned = upper.to_path_buf();
    let layer = off_runtime(move || read_layer(&owned, markers, max_file_size)).await?;
    if !layer.refused.is_empty() {
        return Ok(UpperTree {
            tree: None,
            refused: named(layer.refused),
        });
    }
    let scratch = Scratch::beside(index);
    let cleared = scratch.clone();
    off_runtime(move || cleared.clear()).await?;
    let built = build(git, base, layer, &scratch).await;
    let cleared = scratch.clone();
    let removed = off_runtime(move || cleared.clear()).await;
    let tree = built?;
    removed?;
    Ok(UpperTree {
        tree: Some(tree),
        refused: Vec::new(),
    })
}

/// What a walk of an upper directory found, each path relative to it.
#[derive(Default)]
struct Layer {
    /// Files and links, new or changed.
    blobs: Vec<Blob>,
    /// The base's entry at each goes, and all under it.
    whiteouts: Vec<Vec<u8>>,
    /// A base file or link at one goes.
    dirs: Vec<Vec<u8>>,
    /// Every base entry under one goes, but what the upper holds.
    opaque: Vec<Vec<u8>>,
    refused: Vec<String>,
}

struct Blob {
    path: Vec<u8>,
    mode: &'static str,
    content: Content,
}

enum Content {
    /// A file of the upper directory, which git reads itself.
    File(PathBuf),
    /// A link's target: git would follow the link, so troupe hands it
    /// the target's bytes in a file of its own.
    Link(Vec<u8>),
}

/// What one entry of the upper directory is.
enum Entry {
    Blob(&'static str, Content),
    Dir { opaque: bool },
    Whiteout,
    Refused(String),
}

/// The scratch index and the link targets beside it.
#[derive(Clone)]
struct Scratch {
    index: PathBuf,
    lock: PathBuf,
    links: PathBuf,
}

impl Scratch {
    fn beside(index: &Path) -> Scratch {
        let with = |tail: &str| {
            let mut path = index.as_os_str().to_owned();
            path.push(tail);
            PathBuf::from(path)
        };
        Scratch {
            index: index.to_path_buf(),
            lock: with(".lock"),
            links: with(".links"),
        }
    }

    /// Removes what an earlier call, cut short, or this one left.
    fn clear(&self) -> Result<(), IsolationError> {
        let gone = |result: std::io::Result<()>, path: &Path| match result {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(path)(e)),
            _ => Ok(()),
        };
        gone(std::fs::remove_file(&self.index), &self.index)?;
        gone(std::fs::remove_file(&self.lock), &self.lock)?;
        gone(std::fs::remove_dir_all(&self.links), &self.links)
    }
}

/// Writes the blobs of `layer` and the tree of `base_tree` with them.
async fn build(
    git: &Git,
    over: Over<'_>,
    mut layer: Layer,
    scratch: &Scratch,
) -> Result<String, IsolationError> {
    let base_tree = over.tree;
    let base = base_entries(git, base_tree, &layer).await?;
    let ignored = ignored_new(git, &layer, &base, over.rules).await?;
    layer.blobs.retain(|blob| !ignored.contains(&blob.path));
    let (layer, sources) = {
        let links = scratch.links.clone();
        off_runtime(move || {
            let sources = sources(&layer.blobs, &links)?;
            Ok((layer, sources))
        })
        .await?
    };
    let ids = hash(git, &sources).await?;
    let info = index_info(&layer, &ids, &base, &"0".repeat(base_tree.len()));
    let place = Place {
        work_tree: None,
        index: Some(&scratch.index),
    };
    let copied = over
        .index
        .is_some_and(|start| std::fs::copy(start, &scratch.index).is_ok());
    if !copied {
        git.run(&place, ["read-tree", base_tree]).await?;
    }
    git.run_bytes(&place, &["update-index", "-z", "--index-info"], Some(info))
        .await?;
    Ok(git.run(&place, ["write-tree"]).await?.trim().to_string())
}

/// Past this many paths in a layer, the base is listed whole rather than
/// by the layer's paths (which go on git's command line).
const LISTED_BY_PATH: usize = 1000;

/// The files of the base (`ls-tree -r --name-only`, NUL-separated) that
/// the layer's paths can touch: each at a path of the layer, and each
/// under one that deletes or replaces a directory of the base. Listed by
/// those paths, a change costs what it holds, not the base's size.
async fn base_entries(git: &Git, base_tree: &str, layer: &Layer) -> Result<Vec<u8>, GitError> {
    let here = Place::default();
    let whole = [
        "ls-tree",
        "-r",
        "-z",
        "--full-tree",
        "--name-only",
        base_tree,
    ];
    let blobs = layer.blobs.iter().map(|b| &b.path);
    let paths: Vec<&Vec<u8>> = blobs
        .chain(&layer.whiteouts)
        .chain(&layer.dirs)
        .chain(&layer.opaque)
        .collect();
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    if paths.len() > LISTED_BY_PATH {
        return git.run_bytes(&here, &whole, None).await;
    }
    let pathspecs = |paths: &mut dyn Iterator<Item = &Vec<u8>>| -> Vec<std::ffi::OsString> {
        paths
            .map(|p| std::ffi::OsStr::from_bytes(p).to_os_string())
            .collect()
    };
    let mut args: Vec<std::ffi::OsString> = [
        "--literal-pathspecs",
        "ls-tree",
        "-t",
        "-z",
        "--full-tree",
        base_tree,
        "--",
    ]
    .iter()
    .map(Into::into)
    .collect();
    args.extend(pathspecs(&mut paths.iter().copied()));
    let listed = git.run_bytes(&here, &args, None).await?;
    let asked: HashSet<&[u8]> = paths.iter().map(|p| p.as_slice()).collect();
    let replacing: HashSet<&[u8]> = layer
        .blobs
        .iter()
        .map(|b| b.path.as_slice())
        .chain(layer.whiteouts.iter().map(Vec::as_slice))
        .chain(layer.opaque.iter().map(Vec::as_slice))
        .collect();
    let mut files = Vec::new();
    let mut trees = Vec::new();
    for entry in listed.split(|b| *b == 0).filter(|e| !e.is_empty()) {
        let Some(tab) = entry.iter().position(|b| *b == b'\t') else {
            continue;
        };
        let (meta, path) = (&entry[..tab], &entry[tab + 1..]);
        if !asked.contains(path) {
            continue;
        }
        match meta.split(|b| *b == b' ').nth(1) == Some(b"tree") {
            true if replacing.contains(path) => trees.push(path.to_vec()),
            true => {}
            false => {
                files.extend_from_slice(path);
                files.push(0);
            }
        }
    }
    if !trees.is_empty() {
        let mut args: Vec<std::ffi::OsString> = [
            "--literal-pathspecs",
            "ls-tree",
            "-r",
            "-z",
            "--full-tree",
            "--name-only",
            base_tree,
            "--",
        ]
        .iter()
        .map(Into::into)
        .collect();
        args.extend(pathspecs(&mut trees.iter()));
        files.extend(git.run_bytes(&here, &args, None).await?);
    }
    Ok(files)
}

/// The new paths of `layer` (those `base`, NUL-separated, does not hold)
/// that the ignore rules of the tree at `rules` match.
async fn ignored_new(
    git: &Git,
    layer: &Layer,
    base: &[u8],
    rules: &Path,
) -> Result<HashSet<Vec<u8>>, IsolationError> {
    let known: HashSet<&[u8]> = base.split(|b| *b == 0).collect();
    let mut input = Vec::new();
    for blob in layer
        .blobs
        .iter()
        .filter(|b| !known.contains(b.path.as_slice()))
    {
        input.extend_from_slice(&blob.path);
        input.push(0);
    }
    if input.is_empty() {
        return Ok(HashSet::new());
    }
    let place = Place {
        work_tree: Some(rules),
        index: None,
    };
    let args = ["check-ignore", "--no-index", "--stdin", "-z"];
    let (code, out) = git.output_bytes(&place, &args, Some(input)).await?;
    // Exit 1: none of them is ignored.
    if !matches!(code, Some(0 | 1)) {
        return Err(GitError::Failed {
            args: args.join(" "),
            status: format!("{code:?}"),
            stderr: String::new(),
        }
        .into());
    }
    Ok(out
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(<[u8]>::to_vec)
        .collect())
}

/// Where git reads each blob's bytes: a file itself, or for a link a file
/// in `links` holding its target.
fn sources(blobs: &[Blob], links: &Path) -> Result<Vec<PathBuf>, IsolationError> {
    let mut made = false;
    let mut sources = Vec::with_capacity(blobs.len());
    for (n, blob) in blobs.iter().enumerate() {
        match &blob.content {
            Content::File(path) => sources.push(path.clone()),
            Content::Link(target) => {
                if !made {
                    std::fs::create_dir(links).map_err(io(links))?;
                    made = true;
                }
                let file = links.join(n.to_string());
                std::fs::write(&file, target).map_err(io(&file))?;
                sources.push(file);
            }
        }
    }
    Ok(sources)
}

/// The blob ids of `sources`, written into the repository, in one call.
async fn hash(git: &Git, sources: &[PathBuf]) -> Result<Vec<String>, GitError> {
    if sources.is_empty() {
        return Ok(Vec::new());
    }
    let mut input = Vec::new();
    for source in sources {
        quote_line(source.as_os_str().as_bytes(), &mut input);
    }
    let args = ["hash-object", "-w", "--no-filters", "--stdin-paths"];
    let out = git.run_bytes(&Place::default(), &args, Some(input)).await?;
    let ids: Vec<String> = String::from_utf8_lossy(&out)
        .lines()
        .map(str::to_string)
        .collect();
    match ids.len() == sources.len() {
        true => Ok(ids),
        false => Err(GitError::Failed {
            args: args.join(" "),
            status: "exit 0".to_string(),
            stderr: format!("{} ids for {} files", ids.len(), sources.len()),
        }),
    }
}

/// `path` as one line of `--stdin-paths`, which git reads C-quoted when
/// it starts with a quote: a name may hold a newline.
fn quote_line(path: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &byte in path {
        match byte {
            b'"' | b'\\' => out.extend([b'\\', byte]),
            0..0x20 | 0x7f => out.extend(format!("\\{byte:03o}").as_bytes()),
            _ => out.push(byte),
        }
    }
    out.extend(b"\"\n");
}

/// `update-index -z --index-info` input: every base path the layer
/// deletes or replaces with a directory, removed, then every blob added.
/// Removals go first, so no addition meets a path it conflicts with.
fn index_info(layer: &Layer, ids: &[String], base: &[u8], zero: &str) -> Vec<u8> {
    let added: HashSet<&[u8]> = layer.blobs.iter().map(|b| b.path.as_slice()).collect();
    let at: HashSet<&[u8]> = layer
        .whiteouts
        .iter()
        .chain(&layer.dirs)
        .map(Vec::as_slice)
        .collect();
    let under: HashSet<&[u8]> = layer
        .whiteouts
        .iter()
        .chain(&layer.opaque)
        .map(Vec::as_slice)
        .chain(added.iter().copied())
        .collect();
    let mut info = Vec::new();
    let mut line = |mode: &str, id: &str, path: &[u8]| {
        info.extend(format!("{mode} {id}\t").as_bytes());
        info.extend(path);
        info.push(0);
    };
    for path in base.split(|b| *b == 0).filter(|p| !p.is_empty()) {
        let gone = at.contains(path) || parents(path).any(|p| under.contains(p));
        if gone && !added.contains(path) {
            line("0", zero, path);
        }
    }
    for (blob, id) in layer.blobs.iter().zip(ids) {
        line(blob.mode, id, &blob.path);
    }
    info
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
        return Ok(Entry::Blob("120000", Content::Link(target)));
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
mod tests;
