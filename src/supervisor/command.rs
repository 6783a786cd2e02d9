//! The one place a child's command line is built.
//!
//! A child needs nothing but its task file, its directory and the pipe, so
//! placing it elsewhere (a launcher prefix such as `srun --`) is a change
//! to this function alone.

use std::path::PathBuf;
use std::process::Stdio;

use tokio::process::Command;

use crate::process::Spawn;
use crate::protocol::PARENT_PID_ENV;

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
    /// The agent's span, which it (and a launcher's job step) is started
    /// in: `TRACEPARENT`.
    pub trace: Option<crate::protocol::TraceParent>,
}

/// What every child gets beyond its command line.
#[derive(Debug, Clone, Default)]
pub struct Hygiene {
    /// Variables passed on besides `process::KEPT_ENV` (`--pass-env`).
    pub pass_env: Vec<String>,
}

/// `troupe-agent --task PATH` with piped stdio, its stderr in its log, and
/// the rules of `process::Spawn::child`: a scrubbed environment, no core
/// dumps, and a session of its own, whose process group the commands it
/// starts in groups of their own still share, so the parent can find and
/// kill every one of them. It gets SIGTERM when the parent dies, and
/// cleans up.
///
/// With a launcher, the launcher is what troupe starts, with the child's
/// command line appended to its words, and it gets the `SLURM_*` variables
/// too, so that `srun` inside an allocation places job steps in it.
pub fn child_command(spec: &ChildSpec) -> std::io::Result<Command> {
    let stderr = crate::fsutil::create_file(&spec.stderr_log)?;
    // troupe-agent takes its own session, parent-death signal and core
    // limit first thing (see `agent::birth`), so nothing runs between fork
    // and exec here. A launcher, or a stand-in for troupe-agent, gets them
    // before exec.
    let policy = match spec.launcher.is_none() && spec.takes_session {
        true => Spawn::agent(&spec.hygiene.pass_env),
        false => Spawn::child(&spec.hygiene.pass_env),
    };
    let mut command = match spec.launcher.as_deref() {
        Some([launcher, words @ ..]) => {
            let mut command = policy.command_for(launcher);
            command.args(words).arg(&spec.program);
            command
        }
        _ => policy.command_for(&spec.program),
    };
    command
        .arg("--task")
        .arg(&spec.task_path)
        .current_dir(&spec.workdir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .env("TMPDIR", &spec.tmp_dir);
    if let Some(trace) = spec.trace {
        command.env(crate::protocol::TRACEPARENT_ENV, trace.to_string());
        if let Some(state) = crate::telemetry::incoming_tracestate() {
            command.env(crate::protocol::TRACESTATE_ENV, state);
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
    Ok(command)
}
