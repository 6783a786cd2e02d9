//! The Landlock domain of a program troupe itself runs on what agents
//! made or chose: its git calls on a worker's checkout (a planted config
//! or attribute could name a program), and the MCP servers it reaches for
//! the agents, which take arguments a model chose. Such a program reads
//! what the user can, writes only where it is given, and opens no TCP
//! connection unless it is given the network.
//!
//! The ruleset is made in troupe, before the fork; the child only enters
//! it between fork and exec, with two system calls.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;

use landlock::{
    ABI, Access, AccessFs, AccessNet, Ruleset, RulesetAttr, RulesetCreatedAttr, path_beneath_rules,
};
use nix::libc;

/// Rights beyond reading, for the paths given: every file right but
/// making devices.
fn write_rights() -> landlock::BitFlags<AccessFs> {
    AccessFs::from_all(ABI::V5) & !(AccessFs::MakeChar | AccessFs::MakeBlock)
}

/// A ruleset to enter, ready before the fork.
pub struct Narrow {
    ruleset: OwnedFd,
}

impl Narrow {
    /// Read anything, write `writable` (and `/dev/null`), TCP only with
    /// `network`. `None` where the kernel has no Landlock: the program then
    /// runs as troupe does.
    pub fn new(writable: &[PathBuf], network: bool) -> Option<Narrow> {
        let mut ruleset = Ruleset::default()
            .handle_access(AccessFs::from_all(ABI::V5))
            .ok()?;
        if !network {
            ruleset = ruleset.handle_access(AccessNet::from_all(ABI::V5)).ok()?;
        }
        let mut writable: Vec<PathBuf> = writable.iter().filter(|p| p.exists()).cloned().collect();
        writable.push(PathBuf::from("/dev/null"));
        let created = ruleset
            .create()
            .ok()?
            .add_rules(path_beneath_rules(["/"], AccessFs::from_read(ABI::V5)))
            .ok()?
            .add_rules(path_beneath_rules(writable, write_rights()))
            .ok()?;
        let fd: Option<OwnedFd> = created.into();
        fd.map(|ruleset| Narrow { ruleset })
    }

    /// Makes `command`'s process enter the domain before it execs.
    pub fn confine(&self, command: &mut tokio::process::Command) -> std::io::Result<()> {
        let fd = self.ruleset.try_clone()?;
        // SAFETY: between fork and exec the closure makes two system calls
        // and touches no memory but the descriptor it owns, which lives in
        // the closure as long as the command.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let done = libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0);
                match done {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                }
            });
        }
        Ok(())
    }
}
