//! Reading and writing troupe's own records (transcripts, task, result and
//! status files, run.json, logs) so that a reader never sees half of one, a
//! crash never loses the last complete copy, and nothing planted in the
//! results directory is followed, blocks or floods the reader.
//!
//! A record is replaced whole: written to a temporary file in the same
//! directory and renamed over the old one; at a commit point (see
//! `durability`) the file and then the directory are flushed too, so the
//! rename itself survives a power cut. A rename replaces a
//! name, so a hard link planted at a record's path is never written
//! through. Reads take regular files only, opened non-blocking (a FIFO
//! would wait for a writer forever) and bounded before anything is
//! allocated.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{OFlag, renameat};
use nix::sys::stat::Mode;
use nix::unistd::{UnlinkatFlags, fsync, unlinkat};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::durability::Durability;
use super::nofollow;

/// The most troupe reads of one record: far beyond any transcript a run
/// makes, and far below what would hurt the machine.
const RECORD_CAP: u64 = 256 * 1024 * 1024;

/// Replaces `path` with `bytes` in one rename, flushed to the disk as
/// `durability` says.
pub fn write_atomic(path: &Path, bytes: &[u8], durability: Durability) -> io::Result<()> {
    let (parent, name) = nofollow::split(path)?;
    let dir = nofollow::open_dir(parent)?;
    write_atomic_in(dir.as_fd(), name, bytes, durability)
}

/// Replaces `name` in the open directory `dir` with `bytes`, as
/// `write_atomic` does.
pub(super) fn write_atomic_in(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    bytes: &[u8],
    durability: Durability,
) -> io::Result<()> {
    let flush = durability.flushes();
    let (temp_name, temp) = create_temp(dir)?;
    let mut file = File::from(temp);
    let written = file
        .write_all(bytes)
        .and_then(|()| if flush { file.sync_data() } else { Ok(()) })
        .and_then(|()| renameat(dir, temp_name.as_str(), dir, name).map_err(io::Error::from));
    if let Err(e) = written {
        let _ = unlinkat(dir, temp_name.as_str(), UnlinkatFlags::NoRemoveDir);
        return Err(e);
    }
    match flush {
        true => fsync(dir).map_err(io::Error::from),
        false => Ok(()),
    }
}

/// `value` as pretty JSON with a final newline, written atomically.
pub fn write_json_atomic<T: Serialize>(
    path: &Path,
    value: &T,
    durability: Durability,
) -> io::Result<()> {
    write_atomic(path, &pretty_json(value)?, durability)
}

/// `value` as pretty JSON with a final newline.
pub(super) fn pretty_json<T: Serialize>(value: &T) -> io::Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec_pretty(value)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// A new, empty file at `path` (a log), replacing whatever name was there.
pub fn create_file(path: &Path) -> io::Result<File> {
    let (parent, name) = nofollow::split(path)?;
    let dir = nofollow::open_dir(parent)?;
    create_file_in(dir.as_fd(), name)
}

pub(super) fn create_file_in(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<File> {
    match unlinkat(dir, name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => {}
        Err(e) => return Err(e.into()),
    }
    let fd = nofollow::open_beneath(
        dir,
        Path::new(name),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
        Mode::from_bits_truncate(0o644),
    )?;
    Ok(File::from(fd))
}

/// `path` opened to append to, created if missing; it must be a regular
/// file with no other name.
pub fn open_append(path: &Path) -> io::Result<File> {
    let fd = nofollow::open(
        path,
        OFlag::O_WRONLY | OFlag::O_APPEND | OFlag::O_CREAT,
        Mode::from_bits_truncate(0o644),
    )?;
    nofollow::sole_regular_file(fd.as_fd())?;
    Ok(File::from(fd))
}

/// A record that could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot read {what} {}: {source}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("{what} {} is not valid: {source}", path.display())]
    Invalid {
        what: &'static str,
        path: PathBuf,
        source: serde_json::Error,
    },
}

impl RecordError {
    /// Whether the record is simply not there (yet).
    pub fn is_missing(&self) -> bool {
        matches!(self, RecordError::Read { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

/// The JSON record `path`, which a message calls `what` ("the task file").
pub fn read_json<T: DeserializeOwned>(path: &Path, what: &'static str) -> Result<T, RecordError> {
    let text = read_record(path).map_err(|source| RecordError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| RecordError::Invalid {
        what,
        path: path.to_path_buf(),
        source,
    })
}

/// A record's text.
pub fn read_record(path: &Path) -> io::Result<String> {
    let bytes = read_regular(path, RECORD_CAP)?;
    String::from_utf8(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8"))
}

/// The bytes of the regular file `path`, at most `cap` of them.
fn read_regular(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    read_bounded(open_for_reading(path)?, cap)
}

/// Everything an open regular file holds, refused when it is more than
/// `cap` bytes.
pub fn read_bounded(fd: OwnedFd, cap: u64) -> io::Result<Vec<u8>> {
    let size = file_size(fd.as_fd())?;
    if size > cap {
        return Err(too_large(size, cap));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    File::from(fd)
        .take(cap.saturating_add(1))
        .read_to_end(&mut bytes)?;
    let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if read > cap {
        return Err(too_large(read, cap));
    }
    Ok(bytes)
}

/// The last `max` bytes of the regular file `path` (a log), as text.
pub fn read_tail(path: &Path, max: u64) -> io::Result<String> {
    let fd = open_for_reading(path)?;
    let size = file_size(fd.as_fd())?;
    let mut file = File::from(fd);
    file.seek(SeekFrom::Start(size.saturating_sub(max)))?;
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The first `max` bytes of the regular file `path` (invalid UTF-8
/// replaced), and whether there is more.
pub fn read_head(path: &Path, max: u64) -> io::Result<(String, bool)> {
    let fd = open_for_reading(path)?;
    let size = file_size(fd.as_fd())?;
    let mut bytes = Vec::new();
    File::from(fd).take(max).read_to_end(&mut bytes)?;
    let more = size > u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    Ok((String::from_utf8_lossy(&bytes).into_owned(), more))
}

/// Whether `path` is a regular file, reached without a link.
pub fn is_regular(path: &Path) -> bool {
    nofollow::open(path, OFlag::O_PATH, Mode::empty())
        .is_ok_and(|fd| nofollow::regular_file(fd.as_fd()).is_ok())
}

fn open_for_reading(path: &Path) -> io::Result<OwnedFd> {
    nofollow::open(
        path,
        OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY,
        Mode::empty(),
    )
}

fn file_size(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let stat = nofollow::regular_file(fd)?;
    Ok(u64::try_from(stat.st_size).unwrap_or(0))
}

fn too_large(size: u64, cap: u64) -> io::Error {
    io::Error::other(format!(
        "it is {size} bytes, more than the {cap} troupe reads of one file"
    ))
}

/// How the temporary files of atomic writes begin.
pub const TEMP_PREFIX: &str = ".tmp-";

/// A fresh temporary file in `dir`, named so that it cannot clash with a
/// record or with another writer's temporary.
fn create_temp(dir: BorrowedFd<'_>) -> io::Result<(String, OwnedFd)> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("{TEMP_PREFIX}{}-{n}", std::process::id());
        match nofollow::open_beneath(
            dir,
            Path::new(&name),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
            Mode::from_bits_truncate(0o600),
        ) {
            Ok(fd) => return Ok((name, fd)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_replaced_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let outside = base.join("outside.txt");
        std::fs::write(&outside, "keep").unwrap();
        std::fs::hard_link(&outside, base.join("run.json")).unwrap();
        write_atomic(&base.join("run.json"), b"new", Durability::Commit).unwrap();
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep");
        assert_eq!(
            std::fs::read_to_string(base.join("run.json")).unwrap(),
            "new"
        );
        let left: Vec<_> = std::fs::read_dir(&base).unwrap().collect();
        assert_eq!(left.len(), 2, "no temporary file is left");

        std::fs::hard_link(&outside, base.join("events.jsonl")).unwrap();
        let error = open_append(&base.join("events.jsonl")).unwrap_err();
        assert!(error.to_string().contains("hard link"), "{error}");
    }

    #[test]
    fn reads_take_regular_files_within_their_bound() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let fifo = base.join("fifo");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        let error = read_record(&fifo).unwrap_err();
        assert!(error.to_string().contains("a FIFO"), "{error}");
        std::fs::write(base.join("big"), vec![b'x'; 100]).unwrap();
        assert!(read_regular(&base.join("big"), 99).is_err());
        assert_eq!(read_regular(&base.join("big"), 100).unwrap().len(), 100);
        assert_eq!(read_tail(&base.join("big"), 3).unwrap(), "xxx");
    }
}
