//! The one place a child's command line is built.
//!
//! A child needs nothing but its task file, its directory and the pipe, so
//! placing it elsewhere (a launcher prefix such as `srun --`) is a change
//! to this function alone.

use std::path::PathBuf;
use std::process::Stdio;

use tokio::process::Command;

/// The environment a child keeps; everything else, API keys first, is
/// scrubbed.
const KEPT_ENV: &[&str] = &["PATH", "HOME", "LANG", "TERM", "TZ"];

#[derive(Debug, Clone)]
pub struct ChildSpec {
    /// The `troupe-agent` binary (or a stand-in that speaks the protocol).
    pub program: PathBuf,
    pub task_path: PathBuf,
    /// The child's working directory: the workspace.
    pub workdir: PathBuf,
    /// Where the child's stderr goes.
    pub stderr_log: PathBuf,
}

/// `troupe-agent --task PATH` with piped stdio, its stderr in its log, a
/// scrubbed environment, and a session of its own: its own process group,
/// which the commands it starts in groups of their own still share, so the
/// parent can find and kill every one of them.
pub fn child_command(spec: &ChildSpec) -> std::io::Result<Command> {
    let stderr = std::fs::File::create(&spec.stderr_log)?;
    let mut command = Command::new(&spec.program);
    command
        .arg("--task")
        .arg(&spec.task_path)
        .current_dir(&spec.workdir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .env_clear()
        .kill_on_drop(true);
    for name in KEPT_ENV {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    // SAFETY: setsid is async-signal-safe and touches no memory of the
    // parent; it is the only call made between fork and exec.
    unsafe {
        command.pre_exec(|| {
            nix::unistd::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)
        });
    }
    Ok(command)
}
