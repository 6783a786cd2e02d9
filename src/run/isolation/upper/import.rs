//! An attempt's change written by one `git fast-import`: the commit on
//! its base, with the base's trees along the changed paths read and the
//! new ones written, and nothing else of the base touched. No index is
//! read or written (a repository's is most of a megabyte per 10,000
//! files, and reading it was most of a change's cost), and no reference
//! is moved: the stream names a branch only because a commit must have
//! one, and resets it to nothing before it ends.
//!
//! Small files go in the stream, read by troupe; larger ones are hashed
//! by git from the layer first (`hash-object --stdin-paths`), so troupe
//! never holds a large file.

use std::io::Read;
use std::os::unix::ffi::OsStrExt;

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use super::{Blob, Content};
use crate::run::isolation::git::{Git, GitError, Place};

/// The largest file troupe reads into the stream itself.
const INLINE_AT_MOST: u64 = 64 * 1024;

/// The branch the stream's commit is made on, which it never writes.
const SCRATCH: &str = "refs/troupe/change";

/// The commit an upper layer made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Made {
    pub commit: String,
    pub tree: String,
}

/// `blobs`, with each small file's bytes read: from a descriptor opened
/// without following a link and checked to be a regular file, so a file
/// swapped for a FIFO is never read by troupe. One that cannot be read
/// so is left for git to hash, as every file was before: the layer is
/// still once its worker's processes are gone.
pub(super) fn read_small(blobs: Vec<Blob>) -> Vec<Blob> {
    blobs
        .into_iter()
        .map(|mut blob| {
            if let Content::File(path) = &blob.content
                && let Some(bytes) = small_file(path)
            {
                blob.content = Content::Bytes(bytes);
            }
            blob
        })
        .collect()
}

fn small_file(path: &std::path::Path) -> Option<Vec<u8>> {
    let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK;
    let fd = crate::fsutil::nofollow::open(path, flags, Mode::empty()).ok()?;
    let stat = crate::fsutil::nofollow::regular_file(std::os::fd::AsFd::as_fd(&fd)).ok()?;
    if u64::try_from(stat.st_size).ok()? > INLINE_AT_MOST {
        return None;
    }
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(INLINE_AT_MOST + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    (bytes.len() as u64 <= INLINE_AT_MOST).then_some(bytes)
}

/// A blob as the stream names it.
pub(super) struct Ready {
    path: Vec<u8>,
    mode: &'static str,
    data: Data,
}

enum Data {
    /// In the stream.
    Inline(Vec<u8>),
    /// Already written: its id.
    Written(String),
}

/// `blobs` ready for the stream: the files troupe did not read written
/// by git, in one call.
pub(super) async fn write_large(git: &Git, blobs: Vec<Blob>) -> Result<Vec<Ready>, GitError> {
    let mut input = Vec::new();
    let mut files = 0;
    for blob in &blobs {
        if let Content::File(source) = &blob.content {
            quote(source.as_os_str().as_bytes(), &mut input);
            input.push(b'\n');
            files += 1;
        }
    }
    let mut ids = Vec::new();
    if files > 0 {
        let args = ["hash-object", "-w", "--no-filters", "--stdin-paths"];
        let out = git.run_bytes(&Place::default(), &args, Some(input)).await?;
        ids = String::from_utf8_lossy(&out)
            .lines()
            .map(str::to_string)
            .collect();
        if ids.len() != files {
            return Err(GitError::Failed {
                args: args.join(" "),
                status: "exit 0".to_string(),
                stderr: format!("{} ids for {files} files", ids.len()),
            });
        }
    }
    let mut ids = ids.into_iter();
    Ok(blobs
        .into_iter()
        .map(|blob| Ready {
            data: match blob.content {
                Content::Bytes(bytes) => Data::Inline(bytes),
                Content::File(_) => Data::Written(ids.next().unwrap_or_default()),
            },
            path: blob.path,
            mode: blob.mode,
        })
        .collect())
}

/// The stream: a commit on `base` that removes each of `removed` (and
/// all under it), then sets each blob, then asks for the commit and its
/// tree. Removals go first, so no blob meets a path it replaces.
pub(super) fn stream<'a>(
    base: &str,
    message: &str,
    removed: impl Iterator<Item = &'a Vec<u8>>,
    blobs: &[Ready],
) -> Vec<u8> {
    let now = chrono::Utc::now().timestamp();
    let mut out = Vec::new();
    out.extend(b"feature done\n");
    out.extend(format!("commit {SCRATCH}\nmark :1\n").as_bytes());
    out.extend(format!("committer troupe <troupe@localhost> {now} +0000\n").as_bytes());
    data(message.as_bytes(), &mut out);
    out.extend(format!("from {base}\n").as_bytes());
    for path in removed {
        out.extend(b"D ");
        quote(path, &mut out);
        out.push(b'\n');
    }
    for blob in blobs {
        let id = match &blob.data {
            Data::Written(id) => id.as_str(),
            Data::Inline(_) => "inline",
        };
        out.extend(format!("M {} {id} ", blob.mode).as_bytes());
        quote(&blob.path, &mut out);
        out.push(b'\n');
        if let Data::Inline(bytes) = &blob.data {
            data(bytes, &mut out);
        }
    }
    out.extend(b"\nget-mark :1\nls :1 \"\"\n");
    out.extend(format!("reset {SCRATCH}\ndone\n").as_bytes());
    out
}

/// A `data` command holding `bytes`, counted.
pub(in crate::run::isolation) fn data(bytes: &[u8], out: &mut Vec<u8>) {
    out.extend(format!("data {}\n", bytes.len()).as_bytes());
    out.extend(bytes);
    out.push(b'\n');
}

/// `path` C-quoted, as fast-import and `--stdin-paths` read a path that
/// starts with a quote: a name may hold a newline or a quote.
pub(in crate::run::isolation) fn quote(path: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &byte in path {
        match byte {
            b'"' | b'\\' => out.extend([b'\\', byte]),
            0..0x20 | 0x7f => out.extend(format!("\\{byte:03o}").as_bytes()),
            _ => out.push(byte),
        }
    }
    out.push(b'"');
}

/// Runs the stream; the commit and its tree.
pub(super) async fn run(git: &Git, stream: Vec<u8>) -> Result<Made, GitError> {
    let args = ["fast-import", "--quiet"];
    let out = git
        .run_bytes(&Place::default(), &args, Some(stream))
        .await?;
    let text = String::from_utf8_lossy(&out);
    let mut lines = text.lines();
    let commit = lines.next().unwrap_or_default().trim().to_string();
    // `040000 tree <id>\t`: the root, whose path is empty.
    let tree = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(2))
        .unwrap_or_default()
        .to_string();
    let hex = |id: &str| id.len() >= 40 && id.bytes().all(|b| b.is_ascii_hexdigit());
    match hex(&commit) && hex(&tree) {
        true => Ok(Made { commit, tree }),
        false => Err(GitError::Failed {
            args: args.join(" "),
            status: "exit 0".to_string(),
            stderr: format!("no commit and tree in its answer: {}", text.trim()),
        }),
    }
}
