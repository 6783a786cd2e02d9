//! The tools, as a model sees them: structured results, errors it can act
//! on, output that is capped but never lost.

use serde_json::{Value, json};

use crate::common::{Sandbox, spawn, tool_results};

/// Runs one turn of `calls`, then finish_task, and returns the tool
/// results of the first turn.
fn one_turn(sandbox: &Sandbox, calls: Value) -> Vec<Value> {
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": calls},
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "done"}}]}
    ]}]}));
    let run = spawn(sandbox, 1, "use the tools", &model, &[]);
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    let mut results = tool_results(&sandbox.transcript(1));
    results.pop();
    results
}

fn seed(sandbox: &Sandbox, path: &str, content: &str) {
    let path = sandbox.ws().join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

#[test]
fn edit_file_needs_exactly_one_match() {
    let sandbox = Sandbox::new();
    seed(&sandbox, "notes.txt", "alpha\nbeta\nbeta\n");
    let results = one_turn(
        &sandbox,
        json!([
            {"name": "edit_file", "arguments": {"path": "notes.txt", "old_text": "gamma", "new_text": "x"}},
            {"name": "edit_file", "arguments": {"path": "notes.txt", "old_text": "beta", "new_text": "x"}},
            {"name": "edit_file", "arguments": {"path": "notes.txt", "old_text": "alpha", "new_text": "omega"}}
        ]),
    );
    assert_eq!(results[0]["success"], false);
    assert!(
        results[0]["error"].as_str().unwrap().contains("not found"),
        "{}",
        results[0]
    );
    assert_eq!(results[1]["success"], false);
    assert!(
        results[1]["error"]
            .as_str()
            .unwrap()
            .contains("occurs 2 times"),
        "{}",
        results[1]
    );
    assert_eq!(results[2]["success"], true);
    let text = std::fs::read_to_string(sandbox.ws().join("notes.txt")).unwrap();
    assert_eq!(text, "omega\nbeta\nbeta\n", "only the unique edit landed");
}

#[test]
fn unknown_tools_and_bad_arguments_come_back_as_tool_errors() {
    let sandbox = Sandbox::new();
    let results = one_turn(
        &sandbox,
        json!([
            {"name": "fly_to_the_moon", "arguments": {}},
            {"name": "write_file", "arguments": {"path": "a.txt"}},
            {"name": "finish_task", "arguments": {"success": "yes", "summary": "typed wrong"}}
        ]),
    );
    assert!(
        results[0]["error"]
            .as_str()
            .unwrap()
            .contains("unknown tool `fly_to_the_moon`")
    );
    assert!(
        results[0]["error"].as_str().unwrap().contains("write_file"),
        "lists the real tools"
    );
    assert!(
        results[1]["error"]
            .as_str()
            .unwrap()
            .contains("missing field `content`"),
        "{}",
        results[1]
    );
    assert!(
        results[2]["error"]
            .as_str()
            .unwrap()
            .contains("invalid arguments for finish_task")
    );
}

#[test]
fn reading_listing_and_searching() {
    let sandbox = Sandbox::new();
    let long: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    seed(&sandbox, "src/long.txt", &long);
    seed(&sandbox, "src/lib.rs", "fn needle() {}\n");
    seed(&sandbox, ".git/config", "needle in git\n");
    seed(&sandbox, "target/debug/x", "needle in target\n");
    let results = one_turn(
        &sandbox,
        json!([
            {"name": "read_file", "arguments": {"path": "src/long.txt", "offset": 3, "limit": 2}},
            {"name": "list_dir", "arguments": {"path": "src"}},
            {"name": "search_workspace", "arguments": {"pattern": "needle"}},
            {"name": "search_workspace", "arguments": {"pattern": "("}}
        ]),
    );
    let window = results[0]["content"].as_str().unwrap();
    assert!(window.starts_with("line 3\nline 4\n"), "{window}");
    assert!(window.contains("read on with offset=5"), "{window}");
    let listing = results[1]["content"].as_str().unwrap();
    assert_eq!(listing, "lib.rs  (15 bytes)\nlong.txt  (71 bytes)");
    let hits = results[2]["content"].as_str().unwrap();
    assert_eq!(
        hits, "src/lib.rs:1: fn needle() {}",
        "skips .git and target"
    );
    assert!(
        results[3]["error"]
            .as_str()
            .unwrap()
            .contains("invalid regular expression")
    );

    let stats = &sandbox.transcript(1)["stats"];
    assert_eq!(stats["files_read"], 1);
    assert_eq!(stats["searches"], 2);
}

#[test]
fn run_command_reports_exit_codes_and_output() {
    let sandbox = Sandbox::new();
    let results = one_turn(
        &sandbox,
        json!([
            {"name": "run_command", "arguments": {"command": "echo out; echo err >&2; exit 3"}},
            {"name": "run_command", "arguments": {"command": "pwd; read x || echo stdin-is-empty"}}
        ]),
    );
    assert_eq!(results[0]["success"], false);
    assert_eq!(results[0]["error"], "the command exited with code 3");
    let text = results[0]["content"].as_str().unwrap();
    assert!(
        text.contains("exit code: 3") && text.contains("out") && text.contains("err"),
        "{text}"
    );
    let text = results[1]["content"].as_str().unwrap();
    assert!(
        text.contains(&sandbox.ws().canonicalize().unwrap().display().to_string()),
        "runs in the workspace: {text}"
    );
    assert!(text.contains("stdin-is-empty"), "{text}");
    assert_eq!(sandbox.transcript(1)["stats"]["commands"], 2);
}

#[test]
fn large_output_is_capped_and_spilled_to_a_file() {
    let sandbox = Sandbox::new();
    let results = one_turn(
        &sandbox,
        json!([
            {"name": "run_command", "arguments": {"command": "seq 1 20000"}}
        ]),
    );
    let content = results[0]["content"].as_str().unwrap();
    assert!(
        content.len() < 21_000,
        "capped in the conversation ({} bytes)",
        content.len()
    );
    assert!(
        content.contains("output cut at 20000"),
        "{}",
        &content[content.len() - 300..]
    );
    let spilled = sandbox.agent_dir(1).join(".subagent/outputs/call_1.txt");
    let whole = std::fs::read_to_string(&spilled).expect("the whole output is kept");
    assert!(whole.contains("\n20000"), "nothing was lost");
    assert!(content.contains("sub_agent_results/agent_1/.subagent/outputs/call_1.txt"));
}

#[test]
fn parallel_reads_keep_the_order_of_the_calls() {
    let sandbox = Sandbox::new();
    for i in 0..5 {
        seed(&sandbox, &format!("f{i}.txt"), &format!("content {i}"));
    }
    let calls: Vec<Value> = (0..5)
        .map(|i| json!({"name": "read_file", "arguments": {"path": format!("f{i}.txt")}}))
        .chain(std::iter::once(
            json!({"name": "write_file", "arguments": {"path": "f0.txt", "content": "changed"}}),
        ))
        .chain(std::iter::once(
            json!({"name": "read_file", "arguments": {"path": "f0.txt"}}),
        ))
        .collect();
    let results = one_turn(&sandbox, Value::Array(calls));
    for (i, result) in results.iter().take(5).enumerate() {
        assert_eq!(result["content"], format!("content {i}"));
    }
    assert_eq!(
        results[6]["content"], "changed",
        "a read after a write sees the write"
    );
    let transcript = sandbox.transcript(1);
    let ids: Vec<&str> = crate::common::messages_with_role(&transcript, "tool")
        .iter()
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        &ids[..7],
        [
            "call_1", "call_2", "call_3", "call_4", "call_5", "call_6", "call_7"
        ]
    );
}
