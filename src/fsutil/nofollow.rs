//! Opening files and directories without following a symbolic link
//! anywhere on the path, and without a window between a check and the open.
//!
//! An agent's commands can write the workspace, so they can plant a link
//! where troupe is about to make a directory or write a record
//! (`sub_agent_results/<run>/<step>/worker-1 -> /etc`), or swap one in while
//! a tool opens a file. Every path opened here is real (canonical) when it
//! is built, so a link found on it was planted: the kernel refuses it,
//! through `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, or on kernels
//! without openat2 through a walk that opens one component at a time with
//! `O_NOFOLLOW`.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path};
use std::sync::atomic::{AtomicBool, Ordering};

use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, AtFlags, OFlag, OpenHow, ResolveFlag, openat, openat2};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat, mkdirat};

/// Set once the kernel answered that it has no openat2 (before 5.6, or a
/// seccomp filter that hides it); the walk is used from then on.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// Opens `rel`, a relative path of plain names, beneath the directory
/// `root`. A symbolic link on any component, the last one included, is
/// refused.
pub fn open_beneath(
    root: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlag,
    mode: Mode,
) -> io::Result<OwnedFd> {
    let names = plain_names(rel)?;
    let Some((last, dirs)) = names.split_last() else {
        return openat(root, ".", flags | OFlag::O_CLOEXEC, mode).map_err(io::Error::from);
    };
    // openat2 refuses a mode where nothing is created.
    let creates = flags.intersects(OFlag::O_CREAT | OFlag::O_TMPFILE);
    let mode = if creates { mode } else { Mode::empty() };
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        let how = OpenHow::new()
            .flags(flags | OFlag::O_CLOEXEC)
            .mode(mode)
            .resolve(
                ResolveFlag::RESOLVE_BENEATH
                    | ResolveFlag::RESOLVE_NO_SYMLINKS
                    | ResolveFlag::RESOLVE_NO_MAGICLINKS,
            );
        match openat2(root, rel, how) {
            Ok(fd) => return Ok(fd),
            Err(Errno::ENOSYS) => NO_OPENAT2.store(true, Ordering::Relaxed),
            Err(Errno::ELOOP) => return Err(link_refused()),
            Err(e) => return Err(e.into()),
        }
    }
    let parent = walk(root, dirs)?;
    let dir = parent.as_ref().map_or(root, |fd| fd.as_fd());
    openat(
        dir,
        *last,
        flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        mode,
    )
    .map_err(|e| explain(dir, last, e))
}

/// Opens the absolute path `path` without following any link on it.
pub fn open(path: &Path, flags: OFlag, mode: Mode) -> io::Result<OwnedFd> {
    let root = root()?;
    open_beneath(root.as_fd(), beneath_root(path)?, flags, mode)
}

/// The directory `path`, made with every missing parent, each component
/// checked to be a real directory. Returns it open.
pub fn create_dir_all(path: &Path) -> io::Result<OwnedFd> {
    let root = root()?;
    create_dirs_beneath(root.as_fd(), beneath_root(path)?)
}

/// The directory `rel` beneath `root`, made as `create_dir_all` makes it.
pub fn create_dirs_beneath(root: BorrowedFd<'_>, rel: &Path) -> io::Result<OwnedFd> {
    let mut dir = open_dir_at(root, OsStr::new(".")).map_err(io::Error::from)?;
    for name in plain_names(rel)? {
        dir = match open_dir_at(dir.as_fd(), name) {
            Ok(next) => next,
            Err(Errno::ENOENT) => {
                match mkdirat(dir.as_fd(), name, Mode::from_bits_truncate(0o777)) {
                    Ok(()) => made_in(dir.as_fd())?,
                    Err(Errno::EEXIST) => {}
                    Err(e) => return Err(e.into()),
                }
                open_dir_at(dir.as_fd(), name).map_err(|e| explain(dir.as_fd(), name, e))?
            }
            Err(e) => return Err(explain(dir.as_fd(), name, e)),
        };
    }
    Ok(dir)
}

/// Makes the directory `path`, which must not exist yet; its parents are
/// made as `create_dir_all` makes them. Something already there, even an
/// empty directory, is refused: troupe did not make it.
pub fn create_new_dir(path: &Path) -> io::Result<OwnedFd> {
    let (parent, name) = split(path)?;
    let dir = create_dir_all(parent)?;
    mkdirat(dir.as_fd(), name, Mode::from_bits_truncate(0o777)).map_err(|e| match e {
        Errno::EEXIST => {
            let found = fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)
                .map_or("something", |stat| kind(&stat));
            io::Error::new(
                io::ErrorKind::AlreadyExists,
                Refused(format!(
                    "{found} is already there, and troupe did not put it there"
                )),
            )
        }
        e => e.into(),
    })?;
    made_in(dir.as_fd())?;
    open_dir_at(dir.as_fd(), name).map_err(|e| explain(dir.as_fd(), name, e))
}

/// `create_new_dir`, once what a killed troupe left at `path` (troupe's
/// own, half written) is removed.
pub fn remake_dir(path: &Path) -> io::Result<OwnedFd> {
    super::remove_dir_if_there(path)?;
    create_new_dir(path)
}

/// A directory was made in `parent`: its entry is flushed, so that a
/// power cut cannot lose a directory a record already names (a run's, an
/// agent's, a checkout's). Directories are made a few per agent, so this
/// costs little.
fn made_in(parent: BorrowedFd<'_>) -> io::Result<()> {
    // The parent is held as a path descriptor, which cannot be flushed: it
    // is opened for reading, as itself.
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let readable = openat(parent, ".", flags, Mode::empty())?;
    match nix::unistd::fsync(readable) {
        // A file system that cannot flush a directory (some network and
        // FUSE ones) has nothing better to offer: the directory stands.
        Ok(()) | Err(Errno::EINVAL | Errno::ENOTSUP) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The open directory `path`.
pub fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    open(path, OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty())
}

/// `path` split into its parent and its last name.
pub fn split(path: &Path) -> io::Result<(&Path, &OsStr)> {
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => Ok((parent, name)),
        _ => Err(invalid("the path has no file name")),
    }
}

/// The metadata of an open file, which must be a regular file with no
/// other name: a FIFO would block, a device would not end, and a second
/// hard link may be a file outside the directory that only looks inside.
pub fn sole_regular_file(fd: BorrowedFd<'_>) -> io::Result<FileStat> {
    let stat = regular_file(fd)?;
    if stat.st_nlink > 1 {
        return Err(io::Error::other(format!(
            "it has {} hard links, and troupe does not write through a hard link (another name of it may be outside)",
            stat.st_nlink
        )));
    }
    Ok(stat)
}

/// The metadata of an open file, which must be a regular file.
pub fn regular_file(fd: BorrowedFd<'_>) -> io::Result<FileStat> {
    let stat = fstat(fd)?;
    match kind(&stat) {
        "a regular file" => Ok(stat),
        other => Err(io::Error::other(format!(
            "it is {other}, not a regular file"
        ))),
    }
}

/// What a file is, in words.
pub fn kind(stat: &FileStat) -> &'static str {
    match SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT {
        SFlag::S_IFREG => "a regular file",
        SFlag::S_IFDIR => "a directory",
        SFlag::S_IFLNK => "a symbolic link",
        SFlag::S_IFIFO => "a FIFO",
        SFlag::S_IFCHR => "a character device",
        SFlag::S_IFBLK => "a block device",
        SFlag::S_IFSOCK => "a socket",
        _ => "of an unknown kind",
    }
}

fn root() -> io::Result<OwnedFd> {
    openat(
        AT_FDCWD,
        "/",
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(io::Error::from)
}

fn beneath_root(path: &Path) -> io::Result<&Path> {
    path.strip_prefix("/")
        .map_err(|_| invalid("troupe opens its records by absolute paths only"))
}

/// Opens each of `dirs` in turn from `root`, refusing links; `None` when
/// there are none.
fn walk(root: BorrowedFd<'_>, dirs: &[&OsStr]) -> io::Result<Option<OwnedFd>> {
    let mut dir: Option<OwnedFd> = None;
    for name in dirs {
        let at = dir.as_ref().map_or(root, |fd| fd.as_fd());
        let next = open_dir_at(at, name).map_err(|e| explain(at, name, e))?;
        dir = Some(next);
    }
    Ok(dir)
}

fn open_dir_at(dir: BorrowedFd<'_>, name: &OsStr) -> Result<OwnedFd, Errno> {
    openat(
        dir,
        name,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// The components of `rel`, which must all be plain names: no root, no
/// `..`. (`.` is dropped.)
fn plain_names(rel: &Path) -> io::Result<Vec<&OsStr>> {
    rel.components()
        .filter(|c| *c != Component::CurDir)
        .map(|c| match c {
            Component::Normal(name) => Ok(name),
            _ => Err(invalid("the path must be relative and hold no `..`")),
        })
        .collect()
}

/// An error at `name` in `dir`, saying so when a link stood there.
fn explain(dir: BorrowedFd<'_>, name: &OsStr, error: Errno) -> io::Error {
    let link = matches!(error, Errno::ELOOP | Errno::ENOTDIR)
        && fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .is_ok_and(|stat| kind(&stat) == "a symbolic link");
    if link { link_refused() } else { error.into() }
}

/// Why a path was refused: something that troupe did not make stands
/// where troupe makes its own files.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(String);

/// Whether `error` is a refusal of something planted on the path, rather
/// than a failure of the file system.
pub fn is_refusal(error: &io::Error) -> bool {
    error.get_ref().is_some_and(|inner| inner.is::<Refused>())
}

fn link_refused() -> io::Error {
    io::Error::other(Refused(
        "a symbolic link stands on the path, and troupe follows none there".to_string(),
    ))
}

fn invalid(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, why.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn links_anywhere_on_the_path_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let outside = base.join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("f"), "secret").unwrap();
        symlink(&outside, base.join("link")).unwrap();
        symlink(outside.join("f"), base.join("file-link")).unwrap();

        let flags = OFlag::O_RDONLY;
        assert!(open(&outside.join("f"), flags, Mode::empty()).is_ok());
        for planted in ["link/f", "file-link"] {
            let error = open(&base.join(planted), flags, Mode::empty()).unwrap_err();
            assert!(error.to_string().contains("symbolic link"), "{error}");
        }
        let error = create_dir_all(&base.join("link/new")).unwrap_err();
        assert!(is_refusal(&error), "{error}");
        assert!(!outside.join("new").exists());

        assert!(create_new_dir(&base.join("a/b")).is_ok());
        let again = create_new_dir(&base.join("a/b")).unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::AlreadyExists);
        assert!(is_refusal(&again));
        assert!(create_new_dir(&base.join("link")).is_err());
    }

    #[test]
    fn the_walk_refuses_what_openat2_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        std::fs::create_dir(base.join("real")).unwrap();
        std::fs::write(base.join("real/f"), "x").unwrap();
        symlink(base.join("real"), base.join("link")).unwrap();
        let root = open_dir(&base).unwrap();
        let names = [OsStr::new("link")];
        let error = walk(root.as_fd(), &names).unwrap_err();
        assert!(error.to_string().contains("symbolic link"), "{error}");
        let names = [OsStr::new("real")];
        assert!(walk(root.as_fd(), &names).unwrap().is_some());
    }
}
