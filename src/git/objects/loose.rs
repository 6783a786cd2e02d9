//! Loose objects written by troupe: git's own format (a zlib stream of
//! `<kind> <size>\0` and the body, named by the hash of both), made as
//! a temporary file in the objects directory and renamed to its name, so
//! a reader never meets half of one. No path is followed through a link:
//! the directory is opened once, and every name is resolved beneath it.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use flate2::Compression;
use flate2::write::ZlibEncoder;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, RenameFlags, openat, renameat2};
use nix::sys::stat::{Mode, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, linkat, unlinkat};
use sha1::Digest;

use super::Format;

/// Temporary names made by this process, told apart.
static MADE: AtomicU64 = AtomicU64::new(0);

/// The hash of an object as git names it.
pub(super) enum Hasher {
    Sha1(sha1::Sha1),
    Sha256(sha2::Sha256),
}

impl Hasher {
    pub(super) fn new(format: Format) -> Hasher {
        match format {
            Format::Sha1 => Hasher::Sha1(sha1::Sha1::new()),
            Format::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
        }
    }

    pub(super) fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Sha1(h) => h.update(bytes),
            Hasher::Sha256(h) => h.update(bytes),
        }
    }

    pub(super) fn hex(self) -> String {
        let digest: Vec<u8> = match self {
            Hasher::Sha1(h) => h.finalize().to_vec(),
            Hasher::Sha256(h) => h.finalize().to_vec(),
        };
        super::hex(&digest)
    }
}

fn header(kind: &str, size: u64) -> Vec<u8> {
    format!("{kind} {size}\0").into_bytes()
}

/// The id `body` has as an object of `kind`.
pub(super) fn id_of(format: Format, kind: &str, body: &[u8]) -> String {
    let mut hasher = Hasher::new(format);
    hasher.update(&header(kind, body.len() as u64));
    hasher.update(body);
    hasher.hex()
}

/// Whether the object `id` is loose in `objects` already: a tree or a
/// commit written twice (the same change seen again) is written once.
pub(super) fn has(objects: BorrowedFd<'_>, id: &str) -> bool {
    let name = Path::new(&id[..2]).join(&id[2..]);
    fstatat(objects, &name, AtFlags::AT_SYMLINK_NOFOLLOW).is_ok()
}

/// Writes `size` bytes read from `body` as an object of `kind` into
/// `objects`; its id. The body must hold exactly `size` bytes: a file
/// that grew or shrank while it was read is refused, not half-taken.
/// Flushed first when `flush` (`--durability strict`).
pub(super) fn write(
    objects: BorrowedFd<'_>,
    format: Format,
    kind: &str,
    size: u64,
    body: &mut dyn Read,
    flush: bool,
) -> io::Result<String> {
    let temp = format!(
        "tmp_obj_troupe_{}_{}",
        std::process::id(),
        MADE.fetch_add(1, Ordering::Relaxed)
    );
    let flags = OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW;
    let file = openat(
        objects,
        temp.as_str(),
        flags | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o444),
    )?;
    let written = fill(file, format, kind, size, body, flush).and_then(|id| {
        place(objects, &temp, &id, flush)?;
        Ok(id)
    });
    if written.is_err() {
        let _ = unlinkat(objects, temp.as_str(), UnlinkatFlags::NoRemoveDir);
    }
    written
}

/// The temporary file `file` filled with the object, hashed as it goes.
fn fill(
    file: OwnedFd,
    format: Format,
    kind: &str,
    size: u64,
    body: &mut dyn Read,
    flush: bool,
) -> io::Result<String> {
    let mut hasher = Hasher::new(format);
    let head = header(kind, size);
    hasher.update(&head);
    let out = io::BufWriter::with_capacity(64 * 1024, std::fs::File::from(file));
    // Git's own level for loose objects (`core.looseCompression`): they
    // are packed later.
    let mut zlib = ZlibEncoder::new(out, Compression::fast());
    zlib.write_all(&head)?;
    let mut buffer = vec![0; 64 * 1024];
    let mut left = size;
    loop {
        let read = body.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        let read_u64 = read as u64;
        if read_u64 > left {
            return Err(changed(size));
        }
        left -= read_u64;
        hasher.update(&buffer[..read]);
        zlib.write_all(&buffer[..read])?;
    }
    if left > 0 {
        return Err(changed(size));
    }
    let file = zlib
        .finish()?
        .into_inner()
        .map_err(io::IntoInnerError::into_error)?;
    if flush {
        file.sync_all()?;
    }
    Ok(hasher.hex())
}

/// The fan-out directory `name` of `objects`, made if missing: flushed
/// into its parent only when `flush`, since a landing flushes the file
/// system before anything names what is in it (and git does not flush
/// it either).
fn fan_out(objects: BorrowedFd<'_>, name: &str, flush: bool) -> io::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    match openat(objects, name, flags, Mode::empty()) {
        Err(Errno::ENOENT) => {}
        opened => return opened.map_err(io::Error::from),
    }
    match mkdirat(objects, name, Mode::from_bits_truncate(0o777)) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(e) => return Err(e.into()),
    }
    if flush {
        nix::unistd::fsync(objects)?;
    }
    Ok(openat(objects, name, flags, Mode::empty())?)
}

fn changed(size: u64) -> io::Error {
    io::Error::other(format!(
        "the file was not {size} bytes when read: it changed while troupe read it"
    ))
}

/// The temporary `temp` renamed to `id`'s name, in its fan-out directory.
/// One there already is the same object: the temporary goes.
fn place(objects: BorrowedFd<'_>, temp: &str, id: &str, flush: bool) -> io::Result<()> {
    let fan = fan_out(objects, &id[..2], flush)?;
    let name = &id[2..];
    match renameat2(
        objects,
        temp,
        fan.as_fd(),
        name,
        RenameFlags::RENAME_NOREPLACE,
    ) {
        Ok(()) => {}
        Err(Errno::EEXIST) => unlinkat(objects, temp, UnlinkatFlags::NoRemoveDir)?,
        // A file system without `RENAME_NOREPLACE`: a link, as git makes
        // it, then the temporary goes.
        Err(Errno::EINVAL) => {
            match linkat(objects, temp, fan.as_fd(), name, AtFlags::empty()) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(e) => return Err(e.into()),
            }
            unlinkat(objects, temp, UnlinkatFlags::NoRemoveDir)?;
        }
        Err(e) => return Err(e.into()),
    }
    if flush {
        nix::unistd::fsync(fan.as_fd())?;
    }
    Ok(())
}
