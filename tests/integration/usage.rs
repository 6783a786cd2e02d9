//! Bad usage and configuration end with exit code 2 and a message that
//! says what to do; the documented entry points work.

use serde_json::json;

use crate::common::{Sandbox, run, spawn, troupe, troupe_agent};

#[test]
fn no_model_is_a_usage_error() {
    let sandbox = Sandbox::new();
    let mut command = troupe();
    command
        .args(["spawn", "--id", "1", "--summary", "s", "--task", "t"])
        .arg("--workspace")
        .arg(sandbox.ws());
    let run = run(command);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("no model given") && run.stderr.contains("scripted:PATH"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_missing_or_invalid_script_is_a_usage_error() {
    let sandbox = Sandbox::new();
    let run1 = spawn(&sandbox, 1, "t", "scripted:/nonexistent/script.json", &[]);
    assert_eq!(run1.code, 2);
    assert!(
        run1.stderr
            .contains("cannot read the model script /nonexistent/script.json"),
        "{}",
        run1.stderr
    );
    let model = sandbox.script(json!({"rules": [{"role": "worker", "replies": []}]}));
    let run2 = spawn(&sandbox, 1, "t", &model, &[]);
    assert_eq!(run2.code, 2);
    assert!(
        run2.stderr.contains("unknown field `replies`"),
        "{}",
        run2.stderr
    );
}

#[test]
fn bad_flags_are_usage_errors() {
    let sandbox = Sandbox::new();
    let model = sandbox.script(json!({"rules": []}));
    let missing = sandbox.root().join("nope.md");
    let run1 = {
        let mut command = troupe();
        command
            .args(["spawn", "--id", "1", "--summary", "s", "--task-file"])
            .arg(&missing)
            .arg("--workspace")
            .arg(sandbox.ws())
            .args(["--model", &model]);
        run(command)
    };
    assert_eq!(run1.code, 2);
    assert!(
        run1.stderr.contains("cannot read the task file"),
        "{}",
        run1.stderr
    );
    let run2 = spawn(
        &sandbox,
        1,
        "t",
        &model,
        &["--agent-bin", "/nonexistent/troupe-agent"],
    );
    assert_eq!(run2.code, 2);
    assert!(run2.stderr.contains("--agent-bin"), "{}", run2.stderr);
    let run3 = spawn(&sandbox, 0, "t", &model, &[]);
    assert_eq!(run3.code, 2, "id 0 is refused by the parser");
}

#[test]
fn help_explains_the_flags() {
    let mut command = troupe();
    command.args(["spawn", "--help"]);
    let run = run(command);
    assert_eq!(run.code, 0);
    for flag in [
        "--timeout",
        "--idle-timeout",
        "--base-url",
        "--api-key-env",
        "scripted:PATH",
    ] {
        assert!(run.stdout.contains(flag), "spawn --help mentions {flag}");
    }
}

#[test]
fn troupe_agent_runs_stand_alone_with_a_model() {
    let sandbox = Sandbox::new();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "solo.txt", "content": "alone"}}]},
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "ran alone"}}]}
    ]}]}));
    // A normal spawn leaves a task file to re-run.
    assert_eq!(spawn(&sandbox, 1, "solo", &model, &[]).code, 0);
    std::fs::remove_file(sandbox.ws().join("solo.txt")).unwrap();
    let task = sandbox.agent_dir(1).join(".subagent/task.json");
    let mut command = troupe_agent();
    command.arg("--task").arg(&task).args(["--model", &model]);
    let run = run(command);
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    let lines: Vec<serde_json::Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["type"], "hello");
    assert_eq!(lines.last().unwrap()["type"], "finished");
    assert!(
        lines.iter().all(|l| l["type"] != "llm_request"),
        "the model is in-process"
    );
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("solo.txt")).unwrap(),
        "alone"
    );
}

#[test]
fn prompts_can_be_overridden_one_file_at_a_time() {
    let sandbox = Sandbox::new();
    let prompts = sandbox.root().join("prompts");
    std::fs::create_dir_all(&prompts).unwrap();
    std::fs::write(
        prompts.join("worker-task.md"),
        "Agent {agent_id}, do this: {task} {unknown}",
    )
    .unwrap();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "ok"}}]}
    ]}]}));
    let flags = ["--prompts-dir", prompts.to_str().unwrap()];
    // A placeholder troupe does not fill is a typo, said before any agent
    // starts (it reached the model as it was).
    let refused = spawn(&sandbox, 4, "sweep {the} floor", &model, &flags);
    assert_eq!(refused.code, 2, "stderr:\n{}", refused.stderr);
    assert!(
        refused
            .stderr
            .contains("worker-task.md has {unknown}, which troupe does not fill there; it fills {agent_id}, {summary}, {task}"),
        "{}",
        refused.stderr
    );
    std::fs::write(
        prompts.join("worker-task.md"),
        "Agent {agent_id}, do this: {task}",
    )
    .unwrap();
    let run = spawn(&sandbox, 4, "sweep {the} floor", &model, &flags);
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    let transcript = sandbox.transcript(4);
    assert_eq!(
        transcript["messages"][1]["content"],
        "Agent 4, do this: sweep {the} floor"
    );
    let system = transcript["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.starts_with("You are a focused sub-agent"),
        "the built-in system prompt stays"
    );
}

#[test]
fn a_config_file_stands_for_flags_and_flags_win() {
    let sandbox = Sandbox::new();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "configured"}}]}
    ]}]}));
    let config = sandbox.root().join("troupe.toml");
    std::fs::write(&config, format!("model = \"{model}\"\nsandbox = \"off\"\n")).unwrap();
    let mut command = troupe();
    command
        .args([
            "spawn",
            "--id",
            "1",
            "--summary",
            "s",
            "--task",
            "t",
            "--config",
        ])
        .arg(&config)
        .arg("--workspace")
        .arg(sandbox.ws());
    let out = run(command);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.json()["stats"]["sandbox"]["status"],
        "off",
        "the file set --sandbox"
    );

    let mut command = troupe();
    command
        .args([
            "spawn",
            "--id",
            "2",
            "--summary",
            "s",
            "--task",
            "t",
            "--sandbox",
            "auto",
            "--config",
        ])
        .arg(&config)
        .arg("--workspace")
        .arg(sandbox.ws());
    let out = run(command);
    assert_ne!(
        out.json()["stats"]["sandbox"]["status"],
        "off",
        "the flag beats the file"
    );

    // Regression: the file's settings went into the process environment,
    // and from there into --on-finish commands.
    let seen = sandbox.root().join("on-finish-env.txt");
    let mut command = troupe();
    command
        .args(["spawn", "--id", "3", "--summary", "s", "--task", "t"])
        .args(["--on-finish", &format!("env > {}", seen.display())])
        .arg("--config")
        .arg(&config)
        .arg("--workspace")
        .arg(sandbox.ws())
        .env("TROUPE_SANDBOX", "required");
    let out = run(command);
    assert_ne!(
        out.json()["stats"]["sandbox"]["status"],
        "off",
        "the environment beats the file"
    );
    let env = std::fs::read_to_string(&seen).unwrap();
    assert!(!env.contains("TROUPE_MODEL"), "{env}");

    std::fs::write(&config, "sandbox = \"maybe\"\n").unwrap();
    let mut command = troupe();
    command
        .args(["spawn", "--id", "4", "--summary", "s", "--task", "t"])
        .args(["--model", &model, "--config"])
        .arg(&config)
        .arg("--workspace")
        .arg(sandbox.ws());
    let out = run(command);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("sandbox in") && out.stderr.contains("`maybe` is not a sandbox mode"),
        "{}",
        out.stderr
    );

    std::fs::write(&config, "modle = \"typo\"\n").unwrap();
    let mut command = troupe();
    command.args(["status", "--config"]).arg(&config);
    let out = run(command);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("is not valid") && out.stderr.contains("modle"),
        "{}",
        out.stderr
    );
}
