//! `troupe spawn --background`: a detached supervisor for one agent, and an
//! answer at once.
//!
//! The supervisor is this same binary, re-run with the same arguments and
//! `--supervise TASK` in a session of its own, so it survives the shell
//! that started it and runs the agent exactly as a blocking spawn would.
//! This process returns once the supervisor holds the agent's directory
//! (its pid is in the status file), or reports why it could not start.

use std::ffi::OsString;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

use crate::process::Spawn;
use crate::protocol::{AgentId, TaskFile};
use crate::supervisor::status::StatusFile;

/// How long the supervisor may take to take hold of its agent.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The seed's background-mode answer.
#[derive(Serialize)]
struct Started {
    success: bool,
    agent_id: AgentId,
    status: &'static str,
    summary: String,
    message: String,
    deliverables_dir: String,
    sub_conversation_id: String,
    background: bool,
    supervisor_pid: u32,
    log: String,
}

pub async fn launch(task: &TaskFile) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("cannot locate the troupe binary")?;
    let task_path = task.subagent_dir().join("task.json");
    // The supervisor runs the agent itself: it neither detaches again nor
    // waits for a slot, which this spawn took.
    let mut args: Vec<OsString> = std::env::args_os()
        .skip(1)
        .filter(|arg| arg != "--background" && arg != "--queue")
        .collect();
    args.push("--supervise".into());
    args.push(task_path.into_os_string());
    let log_path = task.subagent_dir().join("supervisor.log");
    let log = crate::fsutil::create_file(&log_path)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    let mut command = Spawn::detached().std_command_for(exe);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    let mut supervisor = command
        .spawn()
        .context("cannot start the background supervisor")?;
    let pid = supervisor.id();
    let give_up = Instant::now() + START_TIMEOUT;
    loop {
        if StatusFile::load(&task.subagent_dir()).is_some_and(|status| status.supervisor_pid == pid)
        {
            break;
        }
        if let Some(exit) = supervisor.try_wait()? {
            let log = crate::fsutil::read_tail(&log_path, 64 * 1024).unwrap_or_default();
            crate::tell!(
                "troupe: the background supervisor ended ({exit}) before starting agent {}:\n{}",
                task.agent_id,
                log.trim_end()
            );
            return Ok(ExitCode::from(
                exit.code().and_then(|c| u8::try_from(c).ok()).unwrap_or(1),
            ));
        }
        if Instant::now() > give_up {
            anyhow::bail!(
                "the background supervisor (pid {pid}) did not start agent {} within {} s; see {}",
                task.agent_id,
                START_TIMEOUT.as_secs(),
                log_path.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let dir = task.agent_dir_display();
    let started = Started {
        success: true,
        agent_id: task.agent_id.clone(),
        status: "running",
        summary: task.summary.clone(),
        message: format!(
            "Sub-agent {} started and runs in the background",
            task.agent_id
        ),
        deliverables_dir: dir,
        sub_conversation_id: task.conversation_id.clone(),
        background: true,
        supervisor_pid: pid,
        log: crate::protocol::display_in(&task.workspace, &log_path),
    };
    crate::say!("{}", serde_json::to_string_pretty(&started)?);
    Ok(ExitCode::SUCCESS)
}
