//! A worker's view of the results directory: read-only, but for its own
//! directory.
//!
//! Landlock grants by path beneath, so a worker that may write the
//! workspace may write everything in it, `sub_agent_results/` included:
//! other agents' directories, the run's records, where the next agent's
//! directory will be. So a worker gets a mount namespace of its own in
//! which the results directory is a read-only bind mount with the worker's
//! own directory bound read-write on top, as bubblewrap builds a sandbox's
//! view of the file system. Root needs only `unshare(CLONE_NEWNS)`; an
//! ordinary user first makes a user namespace that maps its own uid and
//! gid to themselves, so files and ids look the same inside. The mounts
//! exist only in the worker's namespace and end with it.
//!
//! This runs while the agent still has one thread, as `unshare` of a user
//! namespace requires.

use std::path::Path;

use nix::errno::Errno;
use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use nix::sys::statvfs::{FsFlags, statvfs};

/// Makes `results` read-only to this process and all it starts, except
/// each of `own` that lies inside (the agent's directory, its checkout)
/// and what is below it.
pub fn protect(results: &Path, own: &[&Path]) -> Result<(), String> {
    enter_namespace()?;
    private("/")?;
    bind(results, results)?;
    for dir in own {
        if dir.starts_with(results) && *dir != results {
            bind(dir, dir)?;
        }
    }
    read_only(results)
}

/// Whether this process could make a namespace of its own, for
/// `--probe-sandbox` (which exits right after).
pub fn can_protect() -> Result<(), String> {
    enter_namespace()?;
    private("/")
}

fn enter_namespace() -> Result<(), String> {
    let admin = caps::has_cap(
        None,
        caps::CapSet::Effective,
        caps::Capability::CAP_SYS_ADMIN,
    )
    .unwrap_or(false);
    if admin {
        return unshare(CloneFlags::CLONE_NEWNS)
            .map_err(|e| format!("cannot make a mount namespace: {e}"));
    }
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS).map_err(|e| {
        format!("cannot make a user and mount namespace (unprivileged user namespaces may be disabled): {e}")
    })?;
    // The id maps of a non-dumpable process belong to root, so the
    // process is dumpable for the three writes that map its own ids.
    let _ = nix::sys::prctl::set_dumpable(true);
    let mapped = std::fs::write("/proc/self/setgroups", "deny")
        .and_then(|()| std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1")))
        .and_then(|()| std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1")));
    let _ = nix::sys::prctl::set_dumpable(false);
    mapped.map_err(|e| format!("cannot map the user's ids in a user namespace: {e}"))
}

/// Keeps the mounts made from here on out of every other namespace.
fn private(path: &str) -> Result<(), String> {
    mount(
        None::<&str>,
        path,
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| mount_error("cannot make the mounts private", Path::new(path), e))
}

fn bind(from: &Path, to: &Path) -> Result<(), String> {
    mount(
        Some(from),
        to,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| mount_error("cannot bind", to, e))
}

/// Remounts the bind mount at `path` read-only, keeping the flags it has:
/// a user namespace may add restrictions to a mount but not lift them.
fn read_only(path: &Path) -> Result<(), String> {
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
        .map_err(|e| mount_error("cannot read the mount flags of", path, e))?;
    mount(
        None::<&str>,
        path,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | kept,
        None::<&str>,
    )
    .map_err(|e| mount_error("cannot make read-only", path, e))
}

fn mount_error(what: &str, path: &Path, error: Errno) -> String {
    format!("{what} {}: {error}", path.display())
}
