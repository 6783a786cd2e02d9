//! What troupe-agent does before anything else: the things a parent
//! would otherwise do between fork and exec, which would keep the parent
//! from spawning it the cheap way (posix_spawn, vfork).
//!
//! - A session of its own, so that every process it starts, in whatever
//!   process group, can be found and killed by the session id.
//! - SIGTERM when its parent dies. The parent may die before the request
//!   is made, so the parent it was started by (its pid in the
//!   environment) is checked after: gone, the agent ends at once.
//! - No core dumps: a core would hold its memory, the parent's answers
//!   included.

use nix::sys::resource::{Resource, setrlimit};
use nix::sys::signal::Signal;

use crate::protocol::PARENT_PID_ENV;

/// `Err` when the agent must not go on: its parent is already gone, or
/// the kernel refused.
pub fn take_over() -> Result<(), String> {
    match nix::unistd::setsid() {
        // Already a leader: a launcher, or a test, made the session.
        Ok(_) | Err(nix::errno::Errno::EPERM) => {}
        Err(e) => return Err(format!("cannot start a session of its own (setsid): {e}")),
    }
    setrlimit(Resource::RLIMIT_CORE, 0, 0)
        .map_err(|e| format!("cannot turn core dumps off: {e}"))?;
    let Some(parent) = std::env::var(PARENT_PID_ENV)
        .ok()
        .and_then(|p| p.parse::<i32>().ok())
    else {
        return Ok(());
    };
    match crate::process::die_with_parent(Signal::SIGTERM, parent) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ESRCH as i32) => {
            Err("troupe, which started this agent, is gone".to_string())
        }
        Err(e) => Err(format!(
            "cannot ask for SIGTERM when troupe dies (PR_SET_PDEATHSIG): {e}"
        )),
    }
}
