//! The guards of the worker loop: reminders, stagnation, the turn and
//! token limits, and model errors.

use serde_json::json;

use crate::common::{Sandbox, messages_with_role, spawn};

fn user_texts(transcript: &serde_json::Value) -> Vec<String> {
    messages_with_role(transcript, "user")
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_model_that_stops_without_finish_task_is_reminded_twice() {
    let sandbox = Sandbox::new();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"content": "I think I am done."}
    ]}]}));
    let run = spawn(&sandbox, 1, "forget to finish", &model, &[]);
    assert_eq!(run.code, 1);
    let result = run.json();
    assert_eq!(result["status"], "failed");
    assert_eq!(result["stop_reason"], "no_finish_task");
    assert_eq!(result["result_summary"], "I think I am done.");
    let transcript = sandbox.transcript(1);
    let reminders: Vec<String> = user_texts(&transcript)
        .into_iter()
        .filter(|t| t.contains("call the finish_task tool"))
        .collect();
    assert_eq!(reminders.len(), 2, "at most two reminders");
    assert_eq!(messages_with_role(&transcript, "assistant").len(), 3);
}

#[test]
fn a_reminder_brings_the_model_back() {
    let sandbox = Sandbox::new();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"content": "Done, I believe."},
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "reported after a reminder"}}]}
    ]}]}));
    let run = spawn(&sandbox, 1, "finish late", &model, &[]);
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    assert_eq!(run.json()["result_summary"], "reported after a reminder");
}

#[test]
fn three_identical_calls_are_stagnation() {
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    std::fs::write(sandbox.ws().join("a.txt"), "same").unwrap();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
        {"content": "I kept reading a.txt and produced nothing."}
    ]}]}));
    let run = spawn(&sandbox, 1, "loop", &model, &[]);
    assert_eq!(run.code, 1);
    let result = run.json();
    assert_eq!(result["status"], "failed");
    assert_eq!(result["stop_reason"], "stagnation");
    assert_eq!(
        result["result_summary"],
        "I kept reading a.txt and produced nothing."
    );
    let transcript = sandbox.transcript(1);
    assert_eq!(
        transcript["stats"]["files_read"], 3,
        "stopped right after the third call"
    );
    let last_user = user_texts(&transcript).pop().unwrap();
    assert!(last_user.contains("tools are switched off"), "{last_user}");
    assert!(
        last_user.contains("repeated the same tool call"),
        "{last_user}"
    );
}

#[test]
fn the_turn_limit_makes_the_agent_wrap_up() {
    let sandbox = Sandbox::new();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "list_dir", "arguments": {}}]},
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "nothing"}}]},
        {"content": "Out of turns; I listed the workspace."}
    ]}]}));
    let run = spawn(&sandbox, 1, "take turns", &model, &["--max-turns", "2"]);
    assert_eq!(run.code, 1);
    let result = run.json();
    assert_eq!(result["stop_reason"], "turn_limit");
    assert_eq!(
        result["result_summary"],
        "Out of turns; I listed the workspace."
    );
    assert!(result["message"].as_str().unwrap().contains("turn limit"));
}

#[test]
fn the_token_limit_makes_the_agent_wrap_up() {
    let sandbox = Sandbox::new();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "list_dir", "arguments": {}}], "usage": {"prompt": 900, "completion": 200}},
        {"content": "Spent my tokens."}
    ]}]}));
    let run = spawn(&sandbox, 1, "spend", &model, &["--max-tokens", "1000"]);
    assert_eq!(run.code, 1);
    assert_eq!(run.json()["stop_reason"], "token_limit");
}

#[test]
fn a_scripted_endpoint_error_fails_the_agent_with_its_message() {
    let sandbox = Sandbox::new();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"error": "model overloaded", "status": 503}
    ]}]}));
    let run = spawn(&sandbox, 1, "meet an error", &model, &[]);
    assert_eq!(run.code, 1);
    let result = run.json();
    assert_eq!(result["status"], "error");
    let error = result["error"].as_str().unwrap();
    assert!(
        error.contains("503") && error.contains("model overloaded"),
        "{error}"
    );
}

#[test]
fn no_matching_rule_names_the_agent() {
    let sandbox = Sandbox::new();
    let model = sandbox
        .script(json!({"rules": [{"role": "worker", "step": "99", "reply": [{"content": "x"}]}]}));
    let run = spawn(&sandbox, 1, "find no rule", &model, &[]);
    assert_eq!(run.code, 1);
    let error = run.json()["error"].as_str().unwrap().to_string();
    assert!(
        error.contains("no rule matches the worker of step 1"),
        "{error}"
    );
}

#[test]
fn rules_match_on_step_and_each_agent_has_its_own_cursor() {
    let sandbox = Sandbox::new();
    let finish = |summary: &str| json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": summary}}]});
    let model = sandbox.script(json!({"rules": [
        {"role": "worker", "step": 2, "reply": [finish("I am agent two")]},
        {"role": "worker", "attempt": 1, "reply": [finish("anyone else")]}
    ]}));
    let run = spawn(&sandbox, 2, "be two", &model, &[]);
    assert_eq!(run.json()["result_summary"], "I am agent two");
    let run = spawn(&sandbox, 3, "be three", &model, &[]);
    assert_eq!(run.json()["result_summary"], "anyone else");
}

#[test]
fn calls_after_finish_task_are_not_run() {
    let sandbox = Sandbox::new();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [
            {"name": "finish_task", "arguments": {"success": true, "summary": "done early"}},
            {"name": "write_file", "arguments": {"path": "late.txt", "content": "too late"}}
        ]}
    ]}]}));
    let run = spawn(&sandbox, 1, "finish first", &model, &[]);
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    assert!(!sandbox.ws().join("late.txt").exists());
    let results = crate::common::tool_results(&sandbox.transcript(1));
    assert_eq!(results.len(), 2, "every call is answered");
    assert!(results[1]["error"].as_str().unwrap().starts_with("not run"));
}
