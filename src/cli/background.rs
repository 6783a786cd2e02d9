//! A supervisor of one agent in a session of its own: what `troupe spawn
//! --background` starts, and what `troupe mcp serve` starts for every
//! agent a host creates (for a blocking call, with `--tied-to` the
//! server).
//!
//! The supervisor is this same binary, re-run with the spawn's arguments
//! and `--supervise TASK`, so it runs the agent exactly as a blocking
//! spawn would. Whoever starts it returns once the supervisor holds the
//! agent's directory (its pid is in the status file), or says why it
//! could not start.

use std::ffi::OsString;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::process::Spawn;
use crate::protocol::{AgentId, TaskFile};
use crate::supervisor::status::StatusFile;

/// How long the supervisor may take to take hold of its agent.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The seed's background-mode answer.
#[derive(Debug, Clone, Serialize)]
pub struct Started {
    pub success: bool,
    pub agent_id: AgentId,
    pub status: &'static str,
    pub summary: String,
    pub message: String,
    pub deliverables_dir: String,
    pub sub_conversation_id: String,
    pub background: bool,
    pub supervisor_pid: u32,
    pub log: String,
}

/// A supervisor that holds its agent.
pub struct Launched {
    pub started: Started,
    /// The supervisor, for a caller that waits for it; dropping it leaves
    /// it running.
    pub supervisor: tokio::process::Child,
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("cannot start the supervisor of agent {agent}: {source}")]
    Io {
        agent: AgentId,
        source: std::io::Error,
    },
    /// It ended before it held the agent; its log says why.
    #[error("the supervisor ended ({code}) before starting the agent: {log}")]
    Ended { code: i32, log: String },
    #[error(
        "the supervisor (pid {pid}) did not start agent {agent} within {} s; see {log}",
        START_TIMEOUT.as_secs()
    )]
    Slow {
        pid: u32,
        agent: AgentId,
        log: String,
    },
}

/// Starts `troupe <args> --supervise TASK`, detached, so that it
/// outlives whoever started it, and waits until it holds the agent.
pub async fn launch(task: &TaskFile, mut args: Vec<OsString>) -> Result<Launched, LaunchError> {
    let io = |source| LaunchError::Io {
        agent: task.agent_id.clone(),
        source,
    };
    let exe = std::env::current_exe().map_err(io)?;
    let task_path = task.subagent_dir().join("task.json");
    args.push("--supervise".into());
    args.push(task_path.into_os_string());
    let log_path = task.subagent_dir().join("supervisor.log");
    let log = crate::fsutil::create_file(&log_path).map_err(io)?;
    let mut command = Spawn::detached().command_for(exe);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(io)?)
        .stderr(log);
    let mut supervisor = command.spawn().map_err(io)?;
    let pid = supervisor.id().unwrap_or(0);
    let give_up = Instant::now() + START_TIMEOUT;
    loop {
        if StatusFile::load(&task.subagent_dir()).is_some_and(|status| status.supervisor_pid == pid)
        {
            break;
        }
        if let Some(exit) = supervisor.try_wait().map_err(io)? {
            let log = crate::fsutil::read_tail(&log_path, 64 * 1024).unwrap_or_default();
            return Err(LaunchError::Ended {
                code: exit.code().unwrap_or(1),
                log,
            });
        }
        if Instant::now() > give_up {
            return Err(LaunchError::Slow {
                pid,
                agent: task.agent_id.clone(),
                log: log_path.display().to_string(),
            });
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = Started {
        success: true,
        agent_id: task.agent_id.clone(),
        status: "running",
        summary: task.summary.clone(),
        message: format!(
            "Sub-agent {} started and runs in the background",
            task.agent_id
        ),
        deliverables_dir: task.agent_dir_display(),
        sub_conversation_id: task.conversation_id.clone(),
        background: true,
        supervisor_pid: pid,
        log: crate::protocol::display_in(&task.workspace, &log_path),
    };
    Ok(Launched {
        started,
        supervisor,
    })
}
