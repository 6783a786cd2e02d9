//! `--on-finish CMD`: tell a script that an agent or a run has ended.

use std::path::Path;
use std::process::Stdio;

use crate::process::Spawn;

/// Runs `command` through `sh -c` with `result` as its `$1` (nothing is
/// appended to the command) and in `$TROUPE_RESULT`, and waits for it; a
/// failure is reported, not fatal.
pub async fn on_finish(command: &str, result: &Path) {
    let status = Spawn::hook()
        .command_for("sh")
        .arg("-c")
        .arg(command)
        .arg("troupe-on-finish")
        .arg(result)
        .env("TROUPE_RESULT", result)
        .stdin(Stdio::null())
        .status()
        .await;
    match status {
        Ok(status) if status.success() => {}
        Ok(status) => crate::tell!("troupe: --on-finish `{command}` ended with {status}"),
        Err(e) => crate::tell!("troupe: cannot run --on-finish `{command}`: {e}"),
    }
}
