//! The one place a child's command line is built.
//!
//! A child needs nothing but its task file, its directory and the pipe, so
//! placing it elsewhere (a launcher prefix such as `srun --`) is a change
//! to this function alone.

use std::path::PathBuf;
use std::process::Stdio;

use nix::sys::resource::{Resource, setrlimit};
use nix::sys::signal::Signal;
use tokio::process::Command;

use crate::protocol::PARENT_PID_ENV;

/// The environment a child keeps; everything else, API keys first, is
/// scrubbed.
pub const KEPT_ENV: &[&str] = &["PATH", "HOME", "LANG", "TERM", "TZ"];

#[derive(Debug, Clone)]
pub struct ChildSpec {
    /// The `troupe-agent` binary (or a stand-in that speaks the protocol).
    pub program: PathBuf,
    pub task_path: PathBuf,
    /// The child's working directory: the workspace.
    pub workdir: PathBuf,
    /// Where the child's stderr goes.
    pub stderr_log: PathBuf,
    /// The child's private temporary directory (its TMPDIR).
    pub tmp_dir: PathBuf,
    pub hygiene: Hygiene,
    /// The program is troupe's own agent, which takes its session, its
    /// parent-death signal and its core limit itself.
    pub takes_session: bool,
    /// The launcher's words, placeholders filled in, when the child is
    /// placed elsewhere (`--launcher`).
    pub launcher: Option<Vec<String>>,
}

/// What every child gets beyond its command line.
#[derive(Debug, Clone, Default)]
pub struct Hygiene {
    /// Variables passed on besides `KEPT_ENV` (`--pass-env`).
    pub pass_env: Vec<String>,
}

/// `troupe-agent --task PATH` with piped stdio, its stderr in its log, a
/// scrubbed environment, no core dumps, and a session
/// of its own: its own process group, which the commands it starts in
/// groups of their own still share, so the parent can find and kill every
/// one of them. It gets SIGTERM when the parent dies, and cleans up.
///
/// With a launcher, the launcher is what troupe starts, with the child's
/// command line appended to its words, and it gets the `SLURM_*` variables
/// too, so that `srun` inside an allocation places job steps in it.
pub fn child_command(spec: &ChildSpec) -> std::io::Result<Command> {
    let stderr = crate::fsutil::create_file(&spec.stderr_log)?;
    let mut command = match spec.launcher.as_deref() {
        Some([launcher, words @ ..]) => {
            let mut command = Command::new(launcher);
            command.args(words).arg(&spec.program);
            command
        }
        _ => Command::new(&spec.program),
    };
    command
        .arg("--task")
        .arg(&spec.task_path)
        .current_dir(&spec.workdir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .env_clear()
        .env("TMPDIR", &spec.tmp_dir)
        .kill_on_drop(true);
    let names = KEPT_ENV
        .iter()
        .copied()
        .chain(spec.hygiene.pass_env.iter().map(String::as_str));
    for name in names {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    if spec.launcher.is_some() {
        for (name, value) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("SLURM_") {
                command.env(name, value);
            }
        }
    }
    // Under a launcher the agent's parent is the launcher's step daemon,
    // not troupe: the launcher gets the parent-death signal instead.
    if spec.launcher.is_none() {
        command.env(PARENT_PID_ENV, std::process::id().to_string());
    }
    match spec.launcher.is_none() && spec.takes_session {
        // troupe-agent takes its own session, parent-death signal and core
        // limit first thing (see `agent::birth`), so nothing runs between
        // fork and exec here and the standard library can spawn it with
        // posix_spawn (vfork) instead of copying the parent.
        true => {}
        // A launcher, or a stand-in for troupe-agent, gets them before exec.
        // SAFETY: between fork and exec this calls only setsid, prctl and
        // setrlimit, which are async-signal-safe and touch no memory of
        // the parent. The parent forks every child from its one runtime
        // thread, which lives as long as the parent, so PR_SET_PDEATHSIG
        // fires exactly when the parent is gone.
        false => unsafe {
            command.pre_exec(move || {
                nix::unistd::setsid().map_err(std::io::Error::from)?;
                nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).map_err(std::io::Error::from)?;
                setrlimit(Resource::RLIMIT_CORE, 0, 0).map_err(std::io::Error::from)?;
                Ok(())
            });
        },
    }
    Ok(command)
}
