//! A worker that writes a file and finishes: the result object and the
//! transcript, field by field, in the seed's formats.

use serde_json::json;

use crate::common::{Run, Sandbox, read_json, spawn, tool_results};

fn hello_script(sandbox: &Sandbox) -> String {
    sandbox.script(json!({
        "rules": [{"role": "worker", "reply": [
            {"content": "Writing it.", "tool_calls": [
                {"name": "write_file", "arguments": {"path": "demo/test/1.txt", "content": "Smile"}}
            ], "usage": {"prompt": 100, "completion": 10}},
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "demo/test/1.txt"}}],
             "usage": {"prompt": 120, "completion": 5}},
            {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "wrote demo/test/1.txt"}}],
             "usage": {"prompt": 130, "completion": 7}}
        ]}]
    }))
}

/// Agent 1 on the hello script, which must succeed.
fn spawn_hello() -> (Sandbox, Run) {
    let sandbox = Sandbox::new();
    let model = hello_script(&sandbox);
    let run = spawn(
        &sandbox,
        1,
        "Create demo/test/1.txt containing Smile",
        &model,
        &[],
    );
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    (sandbox, run)
}

fn is_rfc3339_utc(text: &str) -> bool {
    chrono::DateTime::parse_from_rfc3339(text).is_ok() && text.ends_with('Z')
}

#[test]
fn result_object_has_the_seed_shape() {
    let (sandbox, run) = spawn_hello();
    let result = run.json();

    assert_eq!(result["success"], true);
    assert_eq!(result["agent_id"], 1);
    assert_eq!(result["status"], "completed");
    assert_eq!(result["summary"], "a test task");
    assert!(result["message"].as_str().unwrap().contains("Sub-agent 1"));
    assert_eq!(result["deliverables_dir"], "sub_agent_results/agent_1");
    assert_eq!(result["deliverables_files"], json!(["demo/test/1.txt"]));
    assert_eq!(result["result_summary"], "wrote demo/test/1.txt");
    assert!(
        result["sub_conversation_id"]
            .as_str()
            .unwrap()
            .starts_with("conv_")
    );
    let stats = &result["stats"];
    assert!(stats["runtime_seconds"].as_f64().unwrap() >= 0.0);
    assert_eq!(stats["files_read"], 1);
    assert_eq!(stats["searches"], 0);
    assert_eq!(stats["web_pages"], 0);
    assert_eq!(stats["commands"], 0);
    assert_eq!(
        stats["token_usage"],
        // The scripted model costs nothing.
        json!({"prompt": 350, "completion": 22, "total": 372, "cost": 0.0})
    );

    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("demo/test/1.txt")).unwrap(),
        "Smile"
    );
    let saved = read_json(&sandbox.agent_dir(1).join(".subagent/result.json"));
    assert_eq!(saved, result, "result.json keeps what stdout printed");
}

#[test]
fn transcript_has_the_seed_shape() {
    let (sandbox, _) = spawn_hello();
    let transcript = sandbox.transcript(1);

    assert_eq!(transcript["agent_id"], 1);
    assert_eq!(transcript["summary"], "a test task");
    assert_eq!(transcript["status"], "completed");
    assert!(is_rfc3339_utc(transcript["created_at"].as_str().unwrap()));
    assert!(is_rfc3339_utc(transcript["completed_at"].as_str().unwrap()));
    assert_eq!(transcript["stats"]["token_usage"]["total"], 372);
    assert_eq!(transcript["stats"]["files_read"], 1);

    let messages = transcript["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
            "tool"
        ]
    );
    let first_user = messages[1]["content"].as_str().unwrap();
    assert!(first_user.contains("sub-agent 1"), "{first_user}");
    assert!(first_user.contains("Create demo/test/1.txt containing Smile"));
    assert!(first_user.contains("sub_agent_results/agent_1"));
    assert!(first_user.contains("600 seconds"));
    let call = &messages[2]["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "write_file");
    assert_eq!(messages[3]["tool_call_id"], call["id"]);
    let results = tool_results(&transcript);
    assert_eq!(results[0]["success"], true);
    assert_eq!(results[1]["content"], "Smile");
}

#[test]
fn progress_goes_to_stderr_without_colour() {
    let (_sandbox, run) = spawn_hello();
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert!(
        lines.iter().any(|l| l.contains("turn 1: 1 tool call")),
        "{}",
        run.stderr
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("write_file") && l.contains("path=demo/test/1.txt"))
    );
    assert!(lines.iter().any(|l| l.contains("completed in")));
    assert!(
        !run.stderr.contains('\x1b'),
        "no colour codes when NO_COLOR is set"
    );
}

#[test]
fn a_second_spawn_keeps_the_first_transcript() {
    let sandbox = Sandbox::new();
    let model = hello_script(&sandbox);
    assert_eq!(spawn(&sandbox, 1, "first", &model, &[]).code, 0);
    let second = spawn(&sandbox, 1, "second", &model, &[]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert!(
        second.stderr.contains("previous run's records were moved"),
        "{}",
        second.stderr
    );
    let kept: Vec<_> = std::fs::read_dir(sandbox.agent_dir(1))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(".subagent-"))
        .collect();
    assert_eq!(kept.len(), 1, "the first run's .subagent was set aside");
    let old = read_json(
        &sandbox
            .agent_dir(1)
            .join(&kept[0])
            .join("conversations.json"),
    );
    assert!(
        old["messages"][1]["content"]
            .as_str()
            .unwrap()
            .contains("first")
    );
    assert!(
        sandbox.transcript(1)["messages"][1]["content"]
            .as_str()
            .unwrap()
            .contains("second")
    );
}
