//! `--tied-to PID`: a troupe that `troupe mcp serve` started for a
//! blocking call (an agent's supervisor, a run) stops when the server is
//! gone, however it went, as it stops on one SIGTERM: its agents
//! cancelled, their records kept.
//!
//! Not PR_SET_PDEATHSIG: the kernel sends that signal once for every
//! thread of the child that holds it, and a second SIGTERM kills a
//! troupe's agents at once, records unwritten.

use std::time::Duration;

use nix::sys::signal::{Signal, raise};
use nix::unistd::getppid;

/// How often the parent is looked for.
const LOOK: Duration = Duration::from_millis(200);

/// Raises SIGTERM, once, when this process's parent is no longer `pid`.
pub async fn watch(pid: u32) {
    loop {
        if u32::try_from(getppid().as_raw()).ok() != Some(pid) {
            crate::tell!("troupe: the MCP server that started this troupe (pid {pid}) is gone");
            let _ = raise(Signal::SIGTERM);
            return;
        }
        tokio::time::sleep(LOOK).await;
    }
}
