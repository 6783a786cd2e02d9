//! Errors that say what happened: an endpoint nobody listens on, plan
//! files written by hand, a mistyped spawn, numbers out of range.

use std::time::Duration;

use serde_json::json;

use crate::common::{Sandbox, cli, run, spawn, troupe};
use crate::team::{run_dir, validate};

/// A port on 127.0.0.1 that was bound and closed: nothing listens there.
fn closed_port() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/v1")
}

#[test]
fn a_refused_connection_is_said_as_such_and_fails_fast() {
    let sandbox = Sandbox::new();
    let url = closed_port();
    let mut command = troupe();
    command
        .args(["run", "a goal", "--model", "m", "--base-url", &url])
        .arg("--workspace")
        .arg(sandbox.ws());
    let out = run(command);
    assert_eq!(out.code, 1, "not an invalid plan: {}", out.stderr);
    assert!(
        out.elapsed < Duration::from_secs(5),
        "no retries: {:?}",
        out.elapsed
    );
    let said = format!(
        "cannot reach the model at {url}: connection refused; is the server running? check --base-url"
    );
    assert!(out.stderr.contains(&said), "{}", out.stderr);
    assert!(!out.stderr.contains("invalid"), "{}", out.stderr);
    let dir = run_dir(&sandbox);
    assert!(
        !dir.join("planner/invalid-plan.txt").exists(),
        "no empty answer saved"
    );
    let events = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    assert!(events.contains("\"type\":\"planner_failed\""), "{events}");

    let spawned = spawn(&sandbox, 1, "t", "m", &["--base-url", &url]);
    assert_eq!(spawned.code, 1);
    assert!(
        spawned.elapsed < Duration::from_secs(5),
        "{:?}",
        spawned.elapsed
    );
    assert!(spawned.json()["error"].as_str().unwrap().contains(&said));
}

#[test]
fn plan_files_are_read_strictly_and_say_where() {
    let sandbox = Sandbox::new();
    let cases = [
        (
            r#"{"steps": [{"id": "a", "description": "x"},]}"#,
            "trailing comma at line 1 column",
        ),
        (
            r#"{"steps": [{"id": "a", "description": "x"}"#,
            "EOF while parsing",
        ),
        (
            r#"{"steps": [{"id": "a", "description": "x", "depends_on": []}]}"#,
            "step 1 (`a`) has the field `depends_on`",
        ),
        (
            r#"{"steps": [{"id": "a", "description": "x"}]} and more"#,
            "trailing characters at line 1 column",
        ),
        ("Here is the plan: {\"steps\": []}", "is not valid JSON"),
    ];
    for (text, said) in cases {
        let out = validate(&sandbox, text);
        assert_eq!(out.code, 2, "{text}");
        assert!(out.stderr.contains(said), "{text}: {}", out.stderr);
        assert!(!out.stderr.contains("planner's answer"), "{}", out.stderr);
    }
    let path = sandbox.root().join("plan.json");
    std::fs::write(&path, r#"{"steps": [{"id": "a", "description": "x"}, {"id": "b", "description": "y", "dependencies": ["a"]}]}"#).unwrap();
    let mut command = troupe();
    command.arg("validate").arg(&path).arg("--json");
    let out = run(command);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.json(),
        json!({"valid": true, "summary": "", "steps": 2, "levels": [["a"], ["b"]],
               "worst_case": {"agents": 18, "cost": null}})
    );
}

#[test]
fn a_mistyped_spawn_leaves_the_good_record_alone() {
    let sandbox = Sandbox::new();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "done"}}]}
    ]}]}));
    assert_eq!(spawn(&sandbox, 1, "t", &model, &[]).code, 0);
    let bad = spawn(&sandbox, 1, "t", "scripted:nope.json", &[]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    let status = cli(&sandbox, &["status", "1", "--json"]);
    assert_eq!(
        status.json()["agents"][0]["status"],
        "completed",
        "{}",
        status.stdout
    );
    assert_eq!(cli(&sandbox, &["show", "1"]).code, 0);
}

#[test]
fn every_number_is_checked_the_same_way() {
    for (flag, value) in [
        ("--timeout", "-5"),
        ("--timeout", "0"),
        ("--timeout", "1.5"),
        ("--deadline", "0"),
    ] {
        let mut command = troupe();
        command.args(["run", "goal", "--model", "scripted:x.json", flag, value]);
        let out = run(command);
        assert_eq!(out.code, 2, "{flag} {value}");
        assert!(
            out.stderr.contains(&format!("invalid value '{value}' for '{flag} <SECS>': must be a positive whole number of seconds")),
            "{flag} {value}: {}",
            out.stderr
        );
    }
}

#[test]
fn a_mistyped_workspace_is_refused_and_only_a_last_level_is_made() {
    let sandbox = Sandbox::new();
    let script = sandbox.script(json!({"rules": [
        crate::team::planner(json!([crate::team::step("a", &[])])),
        crate::team::worker_rule("a", crate::team::worker_writes("a", 0)),
        crate::team::approving_reviewer(),
    ]}));
    let typo = sandbox.root().join("nope/ws");
    for command in ["run", "spawn"] {
        let mut mistyped = troupe();
        match command {
            "run" => mistyped.args(["run", "a goal", "--model", &script]),
            _ => mistyped.args([
                "spawn",
                "--id",
                "1",
                "--summary",
                "check the workspace",
                "--task",
                "t",
                "--model",
                &script,
            ]),
        };
        mistyped.arg("--workspace").arg(&typo);
        let out = run(mistyped);
        assert_eq!(out.code, 2, "{command}: {}", out.stderr);
        assert!(
            out.stderr.contains(&format!(
                "--workspace {}: {} does not exist; troupe makes only the workspace's last level",
                typo.display(),
                typo.parent().unwrap().display()
            )),
            "{command}: {}",
            out.stderr
        );
        assert!(
            !sandbox.root().join("nope").exists(),
            "{command} made nothing"
        );
    }
    let fresh = sandbox.root().join("fresh");
    let mut command = troupe();
    command
        .args(["run", "a goal", "--model", &script, "--workspace"])
        .arg(&fresh);
    let out = run(command);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr
            .contains(&format!("troupe: made the workspace {}", fresh.display())),
        "{}",
        out.stderr
    );
    assert_eq!(std::fs::read_to_string(fresh.join("a.txt")).unwrap(), "a");
}
