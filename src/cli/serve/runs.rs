//! `run_team` and `get_run_status`: a team run started as `troupe run`
//! would start it, and its record as `troupe show --json` gives it.
//!
//! The run is its own `troupe run --json` process, detached for a run in
//! the background, tied to the server for a blocking one (a cancel, the
//! host's leaving or the server's death interrupt it: `troupe run
//! --resume` continues it). Its first event names the run; everything
//! after that is in the run's own records.

use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::calls::{CallError, Isolation, RunStatusArgs, RunTeamArgs};
use super::ceiling::For;
use super::session::Session;
use super::tied::{StopOnDrop, Tied};
use super::{Server, path_flag, tie_to_server};
use crate::process::Spawn;

/// How long a run may take to say its id (it checks its flags, its plan
/// and the workspace first).
const START_TIMEOUT: Duration = Duration::from_secs(60);

pub async fn run_team(
    server: &Server,
    session: &Session,
    args: RunTeamArgs,
    cancel: CancellationToken,
) -> Result<Value, CallError> {
    let mut own: Vec<OsString> = vec!["--json".into(), path_flag("--workspace", &server.workspace)];
    match (&args.goal, &args.plan) {
        (Some(_), Some(_)) => {
            return Err(CallError::invalid(
                "give goal or plan, not both: a plan is run as it is, a goal is planned first",
            ));
        }
        (None, None) => {
            return Err(CallError::invalid(
                "give goal (words the Planner turns into steps) or plan (a plan object)",
            ));
        }
        (Some(goal), None) if goal.trim().is_empty() => {
            return Err(CallError::invalid(
                "goal is empty; say what the team should do",
            ));
        }
        (Some(goal), None) => {
            let file = server.write_scratch("goal", "md", goal.as_bytes())?;
            own.push(path_flag("--goal-file", &file));
        }
        (None, Some(plan)) => {
            let text = serde_json::to_string_pretty(plan).map_err(CallError::failed)?;
            crate::plan::parse_plan_file(&text)
                .map_err(|e| CallError::invalid(format!("plan is invalid: {e}")))?;
            let file = server.write_scratch("plan", "json", text.as_bytes())?;
            own.push(path_flag("--plan", &file));
        }
    }
    match (args.apply, server.bounds.no_apply) {
        (Some(true), true) => {
            return Err(CallError::invalid(
                "apply: true, but the server was started with --no-apply; leave apply out, or start the server without --no-apply",
            ));
        }
        (Some(false), false) => own.push("--no-apply".into()),
        _ => {}
    }
    if let Some(asked) = args.isolation {
        let floor = Isolation::of(server.bounds.isolation);
        if !asked.at_least(floor) {
            return Err(CallError::invalid(format!(
                "isolation \"{}\" keeps workers less apart than the server's --isolation {}; ask for {} or more (shared < auto < worktree), or leave isolation out",
                asked.as_str(),
                floor.as_str(),
                floor.as_str()
            )));
        }
        own.push(format!("--isolation={}", asked.as_str()).into());
    }
    let tie = (!args.run_in_background).then(tie_to_server);
    // What the call says in the server's place (a server's `--apply`
    // would clash with the call's `--no-apply`).
    let mut replaced = Vec::new();
    if args.isolation.is_some() {
        replaced.push("isolation");
    }
    if args.apply == Some(false) {
        replaced.push("apply");
    }
    let argv: Vec<OsString> = tie
        .into_iter()
        .chain(server.ceiling.command(For::Run, &replaced, own))
        .collect();
    let events = server.scratch_path("run", "jsonl");
    let log = server.scratch_path("run", "log");
    let open = |path: &Path| crate::fsutil::create_file(path).map_err(CallError::failed);
    let exe = std::env::current_exe().map_err(CallError::failed)?;
    let mut child = Spawn::detached()
        .command_for(exe)
        .args(&argv)
        .stdin(Stdio::null())
        .stdout(open(&events)?)
        .stderr(open(&log)?)
        .spawn()
        .map_err(|e| CallError::failed(format!("cannot start troupe run: {e}")))?;
    let pid = child.id().unwrap_or(0);
    let tied = Tied::new(pid);
    // Abandoned before it began (a cancel, a slow start): it is stopped.
    let _dropped = StopOnDrop(tied.clone());
    let give_up = Instant::now() + START_TIMEOUT;
    let run_id = loop {
        if let Some(run_id) = first_run_id(&events) {
            break run_id;
        }
        if let Ok(Some(exit)) = child.try_wait() {
            tied.exited();
            let said = crate::fsutil::read_tail(&log, 16 * 1024).unwrap_or_default();
            let error = format!(
                "troupe run ended ({exit}) before it began: {}",
                said.trim_end()
            );
            return Err(match exit.code() {
                Some(2) => CallError::invalid(error),
                _ => CallError::failed(error),
            });
        }
        if cancel.is_cancelled() || Instant::now() > give_up {
            return Err(CallError::failed(format!(
                "troupe run did not begin within {} s; see {}",
                START_TIMEOUT.as_secs(),
                log.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    if args.run_in_background {
        tied.let_go();
        session.watch_run(&run_id, pid);
        return Ok(json!({
            "success": true,
            "run_id": run_id,
            "status": "running",
            "background": true,
            "message": format!("Run {run_id} started and runs in the background; get_run_status follows it"),
        }));
    }
    session.tie(&run_id, tied.clone());
    let exit = tokio::select! {
        exit = child.wait() => exit,
        () = cancel.cancelled() => {
            tied.stop();
            child.wait().await
        }
    };
    tied.exited();
    session.untie(&run_id);
    let mut status = record_of(server, &run_id)?;
    if let Value::Object(map) = &mut status {
        map.insert(
            "exit_code".into(),
            exit.ok()
                .and_then(|e| e.code())
                .map_or(Value::Null, Value::from),
        );
    }
    Ok(status)
}

pub fn get_run_status(server: &Server, args: RunStatusArgs) -> Result<Value, CallError> {
    let run_id = crate::inspect::runs::expand_last(&server.results, args.run_id.trim())
        .map_err(|e| CallError::invalid(format!("run_id: {e}")))?;
    if run_id.contains('/') || !server.results.join(&run_id).join("run.json").is_file() {
        return Err(CallError::invalid(format!(
            "run_id: there is no run {run_id} in {}; give a run id from `troupe runs`, or \"last\"",
            server.results.display()
        )));
    }
    record_of(server, &run_id)
}

/// The run's record, as `troupe show RUN --json` prints it.
fn record_of(server: &Server, run_id: &str) -> Result<Value, CallError> {
    let dir = server.results.join(run_id);
    let seen = crate::inspect::seen::see(&dir)
        .map_err(|e| CallError::failed(format!("cannot read run {run_id}: {e}")))?;
    seen.to_json().map_err(CallError::failed)
}

/// The run id of the first event a run wrote, once it wrote it.
fn first_run_id(events: &Path) -> Option<String> {
    let text = std::fs::read_to_string(events).ok()?;
    let line = text.lines().next()?;
    let event: Value = serde_json::from_str(line).ok()?;
    event["run_id"].as_str().map(str::to_string)
}
