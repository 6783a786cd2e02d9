//! `create_sub_agent`, `get_sub_agent_status`, `wait_sub_agents` and
//! `terminate_sub_agent`: the seed's tools, each the same work as the
//! `troupe spawn`, `status`, `wait` and `terminate` a script would run.
//!
//! A created agent gets a supervisor of its own, `troupe spawn
//! --supervise`, launched as `spawn --background` launches it, in a
//! session of its own. A background agent's outlives the session; a
//! blocking one's is tied to the call and the server (`--tied-to`):
//! the host's cancel, the host's leaving and the server's death all stop
//! it, its partial results kept.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::calls::{CallError, CreateArgs, StatusArgs, TerminateArgs, WaitArgs, WaitMode};
use super::ceiling::For;
use super::progress::Progress;
use super::session::Session;
use super::tied::{StopOnDrop, Tied};
use super::{Server, path_flag, tie_to_server};
use crate::cli::agents::{agent_id_value, look, result_object, stop};
use crate::cli::background::{LaunchError, Launched, launch};
use crate::cli::spawn::{Refusal, admit};
use crate::supervisor::registry;

/// The seed's bounds of `timeout_seconds`.
const TIMEOUT_RANGE: std::ops::RangeInclusive<u64> = 60..=3600;

/// How often a waiting call looks at the agents again.
const POLL: Duration = Duration::from_millis(50);

/// Seconds `terminate_sub_agent` waits for an agent to stop before it
/// kills it outright, as `troupe terminate` does.
pub const PATIENCE: u64 = 30;

pub async fn create(
    server: &Server,
    session: &Session,
    args: CreateArgs,
    mut progress: Progress,
    cancel: CancellationToken,
) -> Result<Value, CallError> {
    let Checked {
        timeout,
        summary,
        deliverables,
    } = check(server, &args)?;
    let task_file = server.write_scratch("task", "md", args.task.as_bytes())?;
    // Numbered and admitted under one lock, so that two calls that leave
    // the id out do not take the same one.
    let numbering = server.numbering.lock().await;
    let id = match args.agent_id {
        Some(0) => return Err(CallError::invalid("agent_id 0: agents are numbered from 1")),
        Some(id) => id,
        None => next_free(&server.results),
    };
    let key = id.to_string();
    if !look(&server.results, &key).ended() {
        return Err(CallError::invalid(format!(
            "agent_id {id} is already running; wait for it (wait_sub_agents) or stop it (terminate_sub_agent), or leave agent_id out for the next free one"
        )));
    }
    let mut spawn_args: Vec<std::ffi::OsString> = vec![
        format!("--id={id}").into(),
        format!("--summary={summary}").into(),
        path_flag("--task-file", &task_file),
        path_flag("--workspace", &server.workspace),
        format!("--timeout={timeout}").into(),
        format!("--max-concurrent={}", server.bounds.max_concurrent).into(),
        // Counted against --max-concurrent, blocking or not: the server
        // runs every agent as a background spawn runs it.
        "--background".into(),
    ];
    if server.bounds.queue {
        spawn_args.push("--queue".into());
    }
    if let Some(dir) = &deliverables {
        spawn_args.push(path_flag("--deliverables-dir", dir));
    }
    let argv = server.ceiling.command(For::Spawn, &["timeout"], spawn_args);
    let spawn = server.parse_spawn(&argv)?;
    let admitted = admit(&spawn, &server.sources)
        .await
        .map_err(|refusal| match refusal {
            Refusal::Busy(e) => CallError::Busy(format!(
                "{e} (wait_sub_agents), or start the server with --queue to have creates wait for a slot"
            )),
            Refusal::Other(e) => usage_or_failure(e),
        })?;
    drop(numbering);
    let background = args.run_in_background;
    let tie = (!background).then(tie_to_server);
    let supervisor_argv = tie
        .into_iter()
        .chain(argv)
        .filter(|arg| arg != "--background" && arg != "--queue")
        .collect();
    let task = &admitted.task;
    let launched = launch(task, supervisor_argv).await.map_err(|e| match e {
        LaunchError::Ended { code, log } => CallError::Failed(format!(
            "the supervisor of agent {id} ended ({code}) before starting it: {}",
            log.trim_end()
        )),
        other => CallError::failed(other),
    })?;
    drop(admitted.counting);
    if background {
        session.watch_agent(&key);
        return serde_json::to_value(&launched.started).map_err(CallError::failed);
    }
    progress.follow(&key, task.subagent_dir().join("supervisor.log"));
    let tied = Tied::new(launched.started.supervisor_pid);
    session.tie(&key, tied.clone());
    follow(launched, tied, progress, cancel).await;
    session.untie(&key);
    let seen = look(&server.results, &key);
    session.returned(&key);
    Ok(result_object(&server.results, &key, &seen))
}

/// A create's arguments, checked against the seed's bounds and the
/// server's.
struct Checked {
    timeout: u64,
    summary: String,
    deliverables: Option<PathBuf>,
}

fn check(server: &Server, args: &CreateArgs) -> Result<Checked, CallError> {
    let timeout = args.timeout_seconds.unwrap_or(600);
    if !TIMEOUT_RANGE.contains(&timeout) {
        return Err(CallError::invalid(format!(
            "timeout_seconds {timeout} is outside 60..=3600; ask for a number of seconds in that range"
        )));
    }
    if timeout > server.bounds.timeout {
        return Err(CallError::invalid(format!(
            "timeout_seconds {timeout} is above the server's --timeout {}; ask for at most {}, or start the server with a larger --timeout",
            server.bounds.timeout, server.bounds.timeout
        )));
    }
    let summary = args.summary.trim();
    if summary.is_empty() || summary.contains(['\n', '\r']) || summary.chars().count() > 80 {
        return Err(CallError::invalid(
            "summary: give the task in a few words, one line of at most 80 characters (the task itself goes in task)",
        ));
    }
    if args.task.trim().is_empty() {
        return Err(CallError::invalid(
            "task is empty; say what the agent should do",
        ));
    }
    let deliverables = args
        .deliverables_dir
        .as_deref()
        .map(|dir| inside(&server.workspace, dir))
        .transpose()?;
    Ok(Checked {
        timeout,
        summary: summary.to_string(),
        deliverables,
    })
}

/// Follows a blocking call's supervisor to its end, passing its lines on
/// as progress; a cancel of the call stops it (it stops its agent and
/// keeps the records), and so does dropping this future.
async fn follow(
    launched: Launched,
    tied: Arc<Tied>,
    mut progress: Progress,
    cancel: CancellationToken,
) {
    let _dropped = StopOnDrop(tied.clone());
    let mut supervisor = launched.supervisor;
    let mut stopping = false;
    loop {
        tokio::select! {
            _ = supervisor.wait() => break,
            () = cancel.cancelled(), if !stopping => {
                stopping = true;
                tied.stop();
            }
            () = tokio::time::sleep(POLL) => progress.poll(),
        }
    }
    progress.poll();
    tied.exited();
}

pub fn status(server: &Server, args: StatusArgs) -> Value {
    let ids = match args.agent_ids.is_empty() {
        true => registry::known_ids(&server.results),
        false => args.agent_ids.iter().map(u32::to_string).collect(),
    };
    let agents: Vec<_> = ids.iter().map(|id| look(&server.results, id)).collect();
    let success = !agents.iter().any(|agent| agent.is_unknown());
    json!({ "success": success, "agents": agents })
}

pub async fn wait(
    server: &Server,
    session: &Session,
    args: WaitArgs,
    cancel: CancellationToken,
) -> Result<Value, CallError> {
    let ids: Vec<String> = match args.agent_ids.is_empty() {
        true => session.background_agents(),
        false => args.agent_ids.iter().map(u32::to_string).collect(),
    };
    if ids.is_empty() {
        return Err(CallError::invalid(
            "agent_ids is empty and this session started no agent in the background; name the agents to wait for",
        ));
    }
    if let Some(unknown) = ids
        .iter()
        .map(|id| look(&server.results, id))
        .find(|seen| seen.is_unknown())
    {
        return Err(CallError::invalid(format!(
            "agent_ids: {}",
            unknown.last_action()
        )));
    }
    let timeout = Duration::from_secs(args.timeout_seconds.unwrap_or(50));
    let give_up = crate::deadline::after(Instant::now(), timeout);
    loop {
        let seen: Vec<_> = ids.iter().map(|id| look(&server.results, id)).collect();
        let ended: Vec<&String> = ids
            .iter()
            .zip(&seen)
            .filter(|(_, agent)| agent.ended())
            .map(|(id, _)| id)
            .collect();
        let fresh: Vec<&String> = ended
            .iter()
            .copied()
            .filter(|id| !session.was_returned(id))
            .collect();
        let all_ended = ended.len() == ids.len();
        let done = match args.mode {
            WaitMode::Any => !fresh.is_empty() || all_ended,
            WaitMode::All => all_ended,
        };
        let out_of_time = Instant::now() >= give_up || cancel.is_cancelled();
        if done || out_of_time {
            let returning: Vec<&String> = match args.mode {
                WaitMode::Any => fresh,
                WaitMode::All if all_ended => ended,
                WaitMode::All => Vec::new(),
            };
            let results: Vec<Value> = returning
                .iter()
                .map(|id| {
                    session.returned(id);
                    let agent = look(&server.results, id);
                    result_object(&server.results, id, &agent)
                })
                .collect();
            let running: Vec<Value> = ids
                .iter()
                .zip(&seen)
                .filter(|(_, agent)| !agent.ended())
                .map(|(id, _)| agent_id_value(id))
                .collect();
            return Ok(json!({
                "success": true,
                "mode": match args.mode { WaitMode::Any => "any", WaitMode::All => "all" },
                "ended": results,
                "running": running,
                "timed_out": !done,
            }));
        }
        tokio::time::sleep(POLL).await;
    }
}

pub async fn terminate(
    server: &Server,
    session: &Session,
    args: TerminateArgs,
) -> Result<Value, CallError> {
    let id = args.agent_id.to_string();
    // A blocking call of this session may have asked its supervisor to
    // stop already (a cancel), or may ask later: one SIGTERM between them.
    let signal = session.tied_to(&id).is_none_or(|tied| tied.claim());
    let answer = stop(&server.results, &id, PATIENCE, signal)
        .await
        .map_err(|e| CallError::invalid(format!("agent_id: {e}")))?;
    serde_json::to_value(answer).map_err(CallError::failed)
}

/// The smallest agent number no agent of the workspace has used.
fn next_free(results: &Path) -> u32 {
    let known = registry::known_ids(results);
    (1..)
        .find(|n: &u32| {
            let id = n.to_string();
            !known.contains(&id) && !results.join(format!("agent_{id}")).exists()
        })
        .unwrap_or(u32::MAX)
}

/// `dir`, given by the host, as a directory inside `workspace`: relative,
/// no `..`, no link on the way, and not in `.git`.
fn inside(workspace: &Path, dir: &str) -> Result<PathBuf, CallError> {
    let refuse = |why: &str| {
        Err(CallError::invalid(format!(
            "deliverables_dir {dir:?}: {why}; give a path relative to the workspace, such as docs/api"
        )))
    };
    let path = Path::new(dir);
    if dir.trim().is_empty() {
        return refuse("it is empty");
    }
    if path.is_absolute() {
        return refuse("an absolute path is not taken");
    }
    let mut here = workspace.to_path_buf();
    for component in path.components() {
        match component {
            Component::Normal(name) if name == ".git" || name == crate::protocol::SUBAGENT_DIR => {
                return refuse("it goes into a directory troupe keeps to itself");
            }
            Component::Normal(name) => here.push(name),
            Component::CurDir => {}
            _ => return refuse("`..` is not taken"),
        }
        match std::fs::symlink_metadata(&here) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return refuse("a part of it is a symbolic link");
            }
            Ok(meta) if !meta.is_dir() => return refuse("a part of it is not a directory"),
            _ => {}
        }
    }
    if here == workspace {
        return refuse("it is the workspace itself");
    }
    Ok(here)
}

/// A usage error is the host's to fix; anything else is troupe's.
pub fn usage_or_failure(error: anyhow::Error) -> CallError {
    match error.downcast_ref::<crate::cli::UsageError>() {
        Some(usage) => CallError::invalid(usage.to_string()),
        None => CallError::failed(format!("{error:#}")),
    }
}
