//! The mount operations an agent's view of the file system is built from,
//! each failing with a sentence that names the path.
//!
//! Binds are made two ways: from a path (`mount(2)` with `MS_BIND`), and
//! from a descriptor held since before a mount covered the path
//! (`open_tree` and `move_mount`), which is how a directory under a masked
//! `/tmp` is put back, and how an id-mapped copy of a directory is
//! attached.

use super::SetupError;
use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;
use nix::libc;
use nix::mount::{MsFlags, mount};
use nix::sys::statvfs::{FsFlags, statvfs};

fn failed(what: &str, path: &Path, errno: Errno) -> SetupError {
    SetupError::Call {
        what: format!("{what} {}", path.display()),
        errno,
    }
}

fn c_path(path: &Path) -> Result<CString, SetupError> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| SetupError::Refused(format!("{} holds a NUL byte", path.display())))
}

/// Keeps the mounts made from here on out of every other namespace.
pub fn make_private() -> Result<(), SetupError> {
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| failed("cannot make the mounts private", Path::new("/"), e))
}

/// `from` (and what is mounted below it) at `to`.
pub fn bind(from: &Path, to: &Path) -> Result<(), SetupError> {
    mount(
        Some(from),
        to,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| failed("cannot bind", to, e))
}

/// A fresh tmpfs at `path`, owned by the caller, with `mode` and at most
/// `size` bytes.
pub fn tmpfs(path: &Path, mode: u32, size: Option<u64>) -> Result<(), SetupError> {
    let mut options = format!("mode={mode:o}");
    if let Some(size) = size {
        options.push_str(&format!(",size={size}"));
    }
    mount(
        Some("tmpfs"),
        path,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(options.as_str()),
    )
    .map_err(|e| failed("cannot mount a tmpfs on", path, e))
}

/// A file system of `kind` (proc, devpts) at `path`.
pub fn special(
    kind: &str,
    path: &Path,
    flags: MsFlags,
    options: Option<&str>,
) -> Result<(), SetupError> {
    mount(Some(kind), path, Some(kind), flags, options)
        .map_err(|e| failed(&format!("cannot mount {kind} on"), path, e))
}

/// Remounts the bind mount at `path` read-only, keeping the flags it has:
/// a user namespace may add restrictions to a mount but not lift them.
pub fn read_only(path: &Path) -> Result<(), SetupError> {
    let kept = statvfs(path)
        .map(|stat| {
            let flags = stat.flags();
            [
                (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
                (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
                (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
                (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
                (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
                (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
            ]
            .into_iter()
            .filter(|(st, _)| flags.contains(*st))
            .fold(MsFlags::empty(), |all, (_, ms)| all | ms)
        })
        .map_err(|e| failed("cannot read the mount flags of", path, e))?;
    mount(
        None::<&str>,
        path,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | kept,
        None::<&str>,
    )
    .map_err(|e| failed("cannot make read-only", path, e))
}

/// Takes away what is mounted at `path` (with what is below it), undoing
/// a mount that could not be finished.
pub fn unmount(path: &Path) {
    let _ = nix::mount::umount2(path, nix::mount::MntFlags::MNT_DETACH);
}

/// `path` bound onto itself, read-only.
pub fn freeze(path: &Path) -> Result<(), SetupError> {
    bind(path, path)?;
    read_only(path)
}

/// A detached copy of the mount tree at `fd` (a directory or file opened
/// with `O_PATH`), to attach elsewhere or change first.
pub fn clone_tree(fd: BorrowedFd<'_>, path: &Path) -> Result<OwnedFd, SetupError> {
    let empty = c"";
    let flags = libc::OPEN_TREE_CLONE
        | libc::OPEN_TREE_CLOEXEC as libc::c_uint
        | libc::AT_RECURSIVE as libc::c_uint
        | libc::AT_EMPTY_PATH as libc::c_uint;
    // SAFETY: open_tree reads a NUL-terminated path and returns a new
    // descriptor or -1; it touches no memory of ours beyond the path.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, fd.as_raw_fd(), empty.as_ptr(), flags) };
    if fd < 0 {
        return Err(failed("cannot copy the mounts of", path, Errno::last()));
    }
    let fd =
        i32::try_from(fd).map_err(|_| SetupError::Refused(format!("open_tree returned {fd}")))?;
    // SAFETY: the kernel just returned this descriptor, which nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Makes the detached tree `tree` show the files' owners through the id
/// maps of the user namespace `userns`.
pub fn set_idmap(
    tree: BorrowedFd<'_>,
    userns: BorrowedFd<'_>,
    path: &Path,
) -> Result<(), SetupError> {
    let mut attr: libc::mount_attr = unsafe { std::mem::zeroed() };
    attr.attr_set = libc::MOUNT_ATTR_IDMAP;
    attr.userns_fd = u64::try_from(userns.as_raw_fd()).unwrap_or(0);
    let empty = c"";
    let flags = libc::AT_EMPTY_PATH as libc::c_uint | libc::AT_RECURSIVE as libc::c_uint;
    // SAFETY: mount_setattr reads `attr`, which lives across the call, and
    // the NUL-terminated empty path.
    let done = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            empty.as_ptr(),
            flags,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    match done {
        0 => Ok(()),
        _ => Err(failed("cannot map the owners of", path, Errno::last())),
    }
}

/// Attaches the detached tree `tree` at `to`.
pub fn attach(tree: BorrowedFd<'_>, to: &Path) -> Result<(), SetupError> {
    let target = c_path(to)?;
    let empty = c"";
    // SAFETY: move_mount reads two NUL-terminated paths that outlive the
    // call.
    let done = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    match done {
        0 => Ok(()),
        _ => Err(failed("cannot attach the mounts at", to, Errno::last())),
    }
}

/// What `fd` (opened before a mount covered it) names, bound at `to`.
pub fn bind_fd(fd: BorrowedFd<'_>, to: &Path) -> Result<(), SetupError> {
    let tree = clone_tree(fd, to)?;
    attach(std::os::fd::AsFd::as_fd(&tree), to)
}

/// `path` opened to name it, not to read it, for `bind_fd` and
/// `clone_tree`.
pub fn open_path(path: &Path) -> Result<OwnedFd, SetupError> {
    nix::fcntl::open(
        path,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NOFOLLOW,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| failed("cannot open", path, e))
}
