//! The namespaces an agent has to itself, made by the agent's first
//! process while it still has one thread.
//!
//! Root (with `CAP_SYS_ADMIN`) makes them directly; an ordinary user first
//! makes a user namespace that maps its own uid and gid to themselves, so
//! files and ids look the same inside, and gets the powers to make the
//! rest in it. Then: a mount namespace (the agent's view of the files), a
//! PID namespace (for the processes it forks from here on: the first is
//! their init), an IPC namespace (SysV segments and queues that end with
//! it) and, unless the network is allowed, a network namespace that holds
//! nothing but its own loopback, which is brought up.

use super::SetupError;
use nix::sched::{CloneFlags, unshare};

/// What `enter` made.
#[derive(Debug, Clone, Copy, Default)]
pub struct Made {
    pub user: bool,
    pub mount: bool,
    pub pid: bool,
    pub network: bool,
    pub ipc: bool,
}

impl Made {
    /// Their names, for the report.
    pub fn names(&self) -> Vec<String> {
        [
            (self.user, "user"),
            (self.mount, "mount"),
            (self.pid, "pid"),
            (self.network, "network"),
            (self.ipc, "ipc"),
        ]
        .into_iter()
        .filter(|(made, _)| *made)
        .map(|(_, name)| name.to_string())
        .collect()
    }
}

/// Whether this process may make namespaces without a user namespace.
pub fn privileged() -> bool {
    caps::has_cap(
        None,
        caps::CapSet::Effective,
        caps::Capability::CAP_SYS_ADMIN,
    )
    .unwrap_or(false)
}

/// Makes the namespaces, with a network namespace unless `keep_network`.
/// `Err` says what could not be made; a user namespace made before the
/// failure stays (it cannot be left), which changes nothing an agent can
/// do.
pub fn enter(privileged: bool, keep_network: bool) -> Result<Made, SetupError> {
    let mut made = Made::default();
    if !privileged {
        own_user_namespace()?;
        made.user = true;
    }
    let mut flags = CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWPID | CloneFlags::CLONE_NEWIPC;
    if !keep_network {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    unshare(flags)
        .map_err(|e| format!("cannot make the mount, PID, IPC and network namespaces: {e}"))?;
    made.mount = true;
    made.pid = true;
    made.ipc = true;
    if !keep_network {
        super::loopback::bring_up()?;
        made.network = true;
    }
    Ok(made)
}

fn own_user_namespace() -> Result<(), SetupError> {
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    unshare(CloneFlags::CLONE_NEWUSER).map_err(|e| {
        format!("cannot make a user namespace (unprivileged user namespaces may be disabled): {e}")
    })?;
    // The id maps of a non-dumpable process belong to root, so the
    // process is dumpable for the three writes that map its own ids.
    let _ = nix::sys::prctl::set_dumpable(true);
    let mapped = std::fs::write("/proc/self/setgroups", "deny")
        .and_then(|()| std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1")))
        .and_then(|()| std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1")));
    let _ = nix::sys::prctl::set_dumpable(false);
    mapped.map_err(SetupError::io(
        "cannot map the user's ids in a user namespace",
    ))
}
