//! Root's agent runs as an unprivileged id, and still owns its files.
//!
//! When troupe runs as root, an agent that kept uid 0 would read every
//! root-owned file the read scope shows (`/etc/shadow`, private keys) and
//! open owner-only device nodes, capabilities or not. So it runs in a user
//! namespace of its own whose uid and gid 0 are `UNPRIVILEGED` on the host:
//! root's files close to it like any other user's. The directories it
//! works in (the workspace or its checkout, its own directory, the results
//! directory) are id-mapped mounts through the same maps: root's files
//! there show as the agent's own, and what it creates is root's on the
//! disk, as if root had written it.
//!
//! The namespace is made by a helper process (a user namespace needs a
//! process to be made by), whose maps root writes from outside; the
//! helper is gone before the agent starts, and its namespace lives on in
//! the descriptor kept here.

use super::SetupError;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use nix::sched::{CloneFlags, setns, unshare};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::waitpid;
use nix::unistd::{ForkResult, Gid, Uid, fork, read, write};

use super::mounts;

/// The host uid and gid of root's agents: one no account has, far above
/// the ranges systems hand out (users, systemd's dynamic users, the
/// subordinate ranges of rootless containers), so that the agent owns no
/// file on the host. `nobody` would not do: the agent would own every
/// file of `nobody`'s.
pub const UNPRIVILEGED: u32 = 2_000_000_000;

/// A user namespace whose 0 is `UNPRIVILEGED` on the host.
pub struct IdMap {
    userns: OwnedFd,
}

impl IdMap {
    pub fn new() -> Result<IdMap, SetupError> {
        let (ready_r, ready_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| format!("cannot make a pipe: {e}"))?;
        // SAFETY: the process has one thread; the child only unshares,
        // writes a byte and waits to be killed.
        match unsafe { fork() }.map_err(|e| format!("cannot fork: {e}"))? {
            ForkResult::Child => {
                drop(ready_r);
                let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
                let made = unshare(CloneFlags::CLONE_NEWUSER).is_ok();
                let _ = write(&ready_w, if made { b"y" } else { b"n" });
                loop {
                    nix::unistd::pause();
                }
            }
            ForkResult::Parent { child } => {
                drop(ready_w);
                let mut answer = [0u8; 1];
                let said = read(&ready_r, &mut answer);
                let opened = match said {
                    Ok(1) if answer[0] == b'y' => map(child),
                    _ => Err(SetupError::Refused(
                        "cannot make a user namespace for the agent's ids".to_string(),
                    )),
                };
                let _ = kill(child, Signal::SIGKILL);
                let _ = waitpid(child, None);
                opened.map(|userns| IdMap { userns })
            }
        }
    }

    /// Replaces the mounts at `path` with a copy whose owners show
    /// through the maps.
    pub fn remap(&self, path: &Path) -> Result<(), SetupError> {
        let source = mounts::open_path(path)?;
        let tree = mounts::clone_tree(source.as_fd(), path)?;
        mounts::set_idmap(tree.as_fd(), self.userns.as_fd(), path)?;
        mounts::attach(tree.as_fd(), path)
    }

    /// A detached copy of the mounts at `fd` (opened as `path`) whose
    /// owners show through the maps.
    pub fn mapped_copy(&self, fd: BorrowedFd<'_>, path: &Path) -> Result<OwnedFd, SetupError> {
        let tree = mounts::clone_tree(fd, path)?;
        mounts::set_idmap(tree.as_fd(), self.userns.as_fd(), path)?;
        Ok(tree)
    }

    /// Joins the namespace as its root, the host's `UNPRIVILEGED`: every
    /// process started from here on has that uid and gid, and no
    /// supplementary group.
    pub fn become_unprivileged(&self) -> Result<(), SetupError> {
        setns(self.userns.as_fd(), CloneFlags::CLONE_NEWUSER)
            .map_err(|e| format!("cannot join the agent's user namespace: {e}"))?;
        nix::unistd::setgroups(&[]).map_err(|e| format!("cannot drop the groups: {e}"))?;
        let (root_gid, root_uid) = (Gid::from_raw(0), Uid::from_raw(0));
        nix::unistd::setresgid(root_gid, root_gid, root_gid)
            .map_err(SetupError::call("cannot take the agent's gid"))?;
        nix::unistd::setresuid(root_uid, root_uid, root_uid)
            .map_err(SetupError::call("cannot take the agent's uid"))
    }
}

/// Writes the helper's maps and opens its namespace.
fn map(helper: nix::unistd::Pid) -> Result<OwnedFd, SetupError> {
    let proc = format!("/proc/{helper}");
    let line = format!("0 {UNPRIVILEGED} 1");
    std::fs::write(format!("{proc}/uid_map"), &line)
        .and_then(|()| std::fs::write(format!("{proc}/gid_map"), &line))
        .map_err(SetupError::io("cannot map the agent's ids"))?;
    std::fs::File::open(format!("{proc}/ns/user"))
        .map(OwnedFd::from)
        .map_err(SetupError::io("cannot open the agent's user namespace"))
}
