//! Timeouts and crashes: partial work and a valid transcript are kept, and
//! no process the agent started outlives it.

use std::time::Duration;

use serde_json::json;

use crate::common::{Sandbox, alive, read_pid, spawn};

#[test]
fn a_timeout_keeps_partial_work_and_kills_every_process() {
    let sandbox = Sandbox::new();
    // Inside the workspace: the sandbox lets a worker's commands write only there.
    let pids = sandbox.ws().join("pids");
    std::fs::create_dir_all(&pids).unwrap();
    let command = format!(
        "echo $$ > {p}/shell; sleep 300 & echo $! > {p}/background; sleep 300",
        p = pids.display()
    );
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

    for name in ["shell", "background"] {
        let pid = read_pid(&pids.join(name));
        assert!(
            !alive(pid),
            "the command's {name} process {pid} is still alive"
        );
    }
}

#[test]
fn a_child_killed_mid_run_is_an_error_with_a_valid_transcript() {
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let pid_file = sandbox.ws().join("orphan.pid");
    // The command's shell outlives the agent it kills; the parent must find it.
    let command = format!("echo $$ > {}; kill -9 $PPID; sleep 30", pid_file.display());
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
    assert!(
        !alive(read_pid(&pid_file)),
        "the orphaned command was killed with the session"
    );
}

#[test]
fn a_command_timeout_kills_its_group_and_the_agent_goes_on() {
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let pid_file = sandbox.ws().join("bg.pid");
    let command = format!("sleep 300 & echo $! > {}; wait", pid_file.display());
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "run_command", "arguments": {"command": command, "timeout_seconds": 1}}]},
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
        !alive(read_pid(&pid_file)),
        "the command's background process was killed"
    );
}
