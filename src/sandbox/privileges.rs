//! What troupe's processes give up at start.
//!
//! Both binaries mark themselves non-dumpable first thing: the kernel then
//! closes `/proc/PID/fd`, `environ` and `mem` of the process to every
//! process of the same user that lacks CAP_SYS_PTRACE, so a tool command
//! can neither write forged protocol lines into an agent's pipe nor read
//! the API key from the parent's environment.
//!
//! An agent then drops every capability it has (effective, permitted,
//! inheritable, ambient and the bounding set) and sets `no_new_privs`, so
//! its commands run without any, even as root: no devices, no `chown`, no
//! reading other users' files, no gaining privileges through a setuid or
//! file-capability binary. What root keeps is its uid: it owns root's
//! files.

use super::SetupError;
use nix::errno::Errno;

/// What to do with the descriptors above 2 that a process's caller left
/// open (a shell's `7<secret`, an editor's socket).
#[derive(Debug, Clone, Copy)]
pub enum Inherited {
    /// Closed now: an agent needs its stdio and nothing else.
    Close,
    /// Kept, but closed on exec: troupe passes none of them on.
    CloseOnExec,
}

/// Keeps the descriptors troupe's caller left open from every command an
/// agent runs (`close_range`, Linux 5.9; earlier kernels keep them).
pub fn shut_inherited(how: Inherited) {
    let flags = match how {
        Inherited::Close => 0,
        Inherited::CloseOnExec => nix::libc::CLOSE_RANGE_CLOEXEC,
    };
    // SAFETY: close_range takes plain numbers; the process has one thread
    // and holds nothing above 2 it means to keep.
    unsafe {
        nix::libc::syscall(nix::libc::SYS_close_range, 3u32, u32::MAX, flags);
    }
}

/// Closes this process's `/proc` entries to other processes of its user.
pub fn make_undumpable() -> Result<(), Errno> {
    nix::sys::prctl::set_dumpable(false)
}

/// Drops every capability and sets `no_new_privs`. `Err` says what could
/// not be dropped.
pub fn drop_all() -> Result<(), SetupError> {
    use caps::CapSet;
    nix::sys::prctl::set_no_new_privs().map_err(|e| format!("cannot set no_new_privs: {e}"))?;
    // Dropping from the bounding set takes CAP_SETPCAP. Without it an
    // ordinary user's bounding set stays full, which gives nothing:
    // no_new_privs keeps setuid and file capabilities from taking effect,
    // and an exec grants a uid other than 0 no capability.
    if caps::has_cap(None, CapSet::Effective, caps::Capability::CAP_SETPCAP).unwrap_or(false) {
        caps::clear(None, CapSet::Bounding)
            .map_err(|e| format!("cannot empty the capability bounding set: {e}"))?;
    }
    for set in [
        CapSet::Ambient,
        CapSet::Inheritable,
        CapSet::Effective,
        CapSet::Permitted,
    ] {
        caps::clear(None, set).map_err(|e| format!("cannot drop the {set:?} capabilities: {e}"))?;
    }
    let root = nix::unistd::geteuid().is_root();
    let bounding = caps::read(None, CapSet::Bounding).unwrap_or_default();
    if root && !bounding.is_empty() {
        return Err(SetupError::Refused(format!(
            "running as root without CAP_SETPCAP, the bounding set keeps {} capabilities, which a command regains by running any program",
            bounding.len()
        )));
    }
    Ok(())
}
