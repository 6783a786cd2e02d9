//! Timeouts and crashes: partial work and a valid transcript are kept, and
//! no process the agent started outlives it.

use std::time::Duration;

use serde_json::json;

use crate::common::{Sandbox, processes_with, spawn};

#[test]
fn a_timeout_keeps_partial_work_and_kills_every_process() {
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let command = "sleep 301.1 & setsid sleep 301.2 & sleep 301.3";
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "partial.txt", "content": "half done"}}]},
        {"tool_calls": [{"name": "run_command", "arguments": {"command": command, "timeout_seconds": 600}}]}
    ]}]}));
    let run = spawn(
        &sandbox,
        1,
        "work slowly",
        &model,
        &["--timeout", "2", "--kill-grace", "2"],
    );

    assert_eq!(run.code, 1, "stderr:\n{}", run.stderr);
    assert!(
        run.elapsed < Duration::from_secs(30),
        "returned in {:?}",
        run.elapsed
    );
    let result = run.json();
    assert_eq!(result["status"], "timeout");
    assert_eq!(result["success"], false);
    assert!(result["message"].as_str().unwrap().contains("timed out"));
    assert_eq!(
        result["deliverables_files"],
        json!([]),
        "nothing in the agent's own directory"
    );
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("partial.txt")).unwrap(),
        "half done"
    );

    let transcript = sandbox.transcript(1);
    assert_eq!(transcript["status"], "timeout");
    assert!(transcript["completed_at"].is_string());
    let calls = crate::common::tool_call_names(&transcript);
    assert_eq!(
        calls,
        ["write_file", "run_command"],
        "the transcript reaches the last message"
    );

    for marker in ["sleep 301.1", "sleep 301.2", "sleep 301.3"] {
        assert_eq!(
            processes_with(marker),
            Vec::<i32>::new(),
            "`{marker}` is not alive, in its session or out of it"
        );
    }
}

#[test]
fn a_child_killed_mid_run_is_an_error_with_a_valid_transcript() {
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    // The command's shell outlives the agent it kills; it must die too.
    let command = "kill -9 $PPID; sleep 30.2";
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "before.txt", "content": "x"}}]},
        {"tool_calls": [{"name": "run_command", "arguments": {"command": command}}]}
    ]}]}));
    let run = spawn(&sandbox, 1, "get killed", &model, &[]);
    assert_eq!(run.code, 1, "stderr:\n{}", run.stderr);
    assert!(
        run.elapsed < Duration::from_secs(25),
        "the orphaned sleep did not hold troupe up"
    );
    let result = run.json();
    assert_eq!(result["status"], "error");
    let error = result["error"].as_str().unwrap();
    assert!(error.contains("SIGKILL"), "{error}");
    let transcript = sandbox.transcript(1);
    assert_eq!(transcript["status"], "error");
    assert!(
        transcript["messages"].as_array().unwrap().len() >= 4,
        "messages up to the kill are kept"
    );
    assert!(sandbox.ws().join("before.txt").exists());
    assert_eq!(
        processes_with("sleep 30.2"),
        Vec::<i32>::new(),
        "the orphaned command died with its agent"
    );
}

#[test]
fn a_command_timeout_kills_its_group_and_the_agent_goes_on() {
    let test = "a_command_timeout_kills_its_group_and_the_agent_goes_on";
    if !crate::common::present(test, "procps's pgrep", crate::common::on_path("pgrep")) {
        return;
    }
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let command = "sleep 302.1 & wait";
    // Asked while the agent lives: its PID namespace would kill the
    // process anyway when the agent ends.
    let look = "pgrep -f 'sleep 302[.]1' || echo none-left";
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "run_command", "arguments": {"command": command, "timeout_seconds": 1}}]},
        {"tool_calls": [{"name": "run_command", "arguments": {"command": look}}]},
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "survived"}}]}
    ]}]}));
    let run = spawn(&sandbox, 1, "time out a command", &model, &[]);
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    let results = crate::common::tool_results(&sandbox.transcript(1));
    assert_eq!(results[0]["success"], false);
    assert!(
        results[0]["error"]
            .as_str()
            .unwrap()
            .contains("timed out after 1 s")
    );
    assert!(
        results[1]["content"]
            .as_str()
            .unwrap()
            .contains("none-left"),
        "the command's background process was killed: {}",
        results[1]
    );
}

/// `troupe spawn` of agent 1 with `extra`, its stdout piped, stopped
/// (`-STOP`) for `stops` (wait before, stopped for), then left to end; the
/// result object it printed.
fn stalled_spawn(
    sandbox: &Sandbox,
    model: &str,
    extra: &[&str],
    stops: &[(Duration, Duration)],
) -> serde_json::Value {
    let mut spawn = crate::common::spawn_command(sandbox, 1, "work through a stall", model);
    spawn
        .args(extra)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut troupe = spawn.spawn().unwrap();
    let pid = troupe.id().to_string();
    let signal = |name: &str| {
        let sent = std::process::Command::new("kill")
            .args([name, &pid])
            .status()
            .unwrap();
        assert!(sent.success());
    };
    for (before, stopped) in stops {
        std::thread::sleep(*before);
        signal("-STOP");
        std::thread::sleep(*stopped);
        signal("-CONT");
    }
    let mut out = String::new();
    std::io::Read::read_to_string(&mut troupe.stdout.take().unwrap(), &mut out).unwrap();
    troupe.wait().unwrap();
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn a_stall_of_troupe_fails_no_agent_that_kept_working() {
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let sleeps = |secs: &str| json!({"tool_calls": [{"name": "run_command", "arguments": {"command": format!("sleep {secs}")}}]});
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        sleeps("1"),
        sleeps("1.1"),
        sleeps("1.2"),
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "slept"}}]}
    ]}]}));
    // Stopped before the agent says hello, and again while it works: each
    // time for longer than both watchdogs allow.
    let stops = [
        (Duration::ZERO, Duration::from_secs(3)),
        (Duration::from_millis(1500), Duration::from_secs(3)),
    ];
    let result = stalled_spawn(
        &sandbox,
        &model,
        &["--idle-timeout", "2", "--launch-timeout", "2"],
        &stops,
    );
    assert_eq!(result["status"], "completed", "{result}");
}

#[test]
fn a_timeout_that_a_stall_of_troupe_caused_says_so() {
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "run_command", "arguments": {"command": "sleep 30", "timeout_seconds": 60}}]}
    ]}]}));
    let stops = [(Duration::from_secs(1), Duration::from_secs(5))];
    let result = stalled_spawn(
        &sandbox,
        &model,
        &["--timeout", "3", "--kill-grace", "1"],
        &stops,
    );
    assert_eq!(result["status"], "timeout", "{result}");
    let error = result["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("troupe itself was stalled for"),
        "the reason names the stall: {result}"
    );
}
