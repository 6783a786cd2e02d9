//! The OpenAI-compatible client, through `troupe spawn`, against a real
//! HTTP server on 127.0.0.1 that records what troupe sent.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::mock_model::{MockModel, MockResponse};
use crate::common::{Run, Sandbox, run, troupe};

pub fn spawn_against(sandbox: &Sandbox, mock: &MockModel, extra: &[&str]) -> Run {
    let mut command = troupe();
    command
        .args([
            "spawn",
            "--id",
            "7",
            "--summary",
            "http test",
            "--task",
            "Write a.txt",
        ])
        .arg("--workspace")
        .arg(sandbox.ws())
        .args(["--model", "test-model", "--base-url", &mock.url])
        .args(["--api-key-env", "TEST_KEY_VAR"])
        .env("TEST_KEY_VAR", "sk-test-123")
        .args(extra);
    run(command)
}

pub fn write_call(arguments: Value) -> Value {
    json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "write_file", "arguments": arguments}}
    ]})
}

pub fn finish_call() -> Value {
    json!({"role": "assistant", "tool_calls": [
        {"id": "c2", "type": "function", "function": {"name": "finish_task",
         "arguments": {"success": true, "summary": "done"}}}
    ]})
}

pub fn assistant_messages(body: &Value) -> Vec<&Value> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .collect()
}

#[test]
fn a_tool_call_turn_round_trips() {
    let sandbox = Sandbox::new();
    let mock = MockModel::start(vec![
        // arguments as a JSON string (OpenAI) in the first turn, as an object (llama.cpp) in the second
        MockResponse::completion(write_call(json!(
            "{\"path\": \"a.txt\", \"content\": \"hi\"}"
        ))),
        MockResponse::completion(finish_call()),
    ]);
    let run = spawn_against(&sandbox, &mock, &[]);
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("a.txt")).unwrap(),
        "hi"
    );

    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let first = &requests[0];
    assert_eq!(first.path, "/v1/chat/completions");
    assert_eq!(first.header("authorization"), Some("Bearer sk-test-123"));
    assert_eq!(first.body["model"], "test-model");
    let tools: Vec<&str> = first.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        tools.contains(&"write_file") && tools.contains(&"finish_task"),
        "{tools:?}"
    );
    let second = &requests[1].body;
    let messages = second["messages"].as_array().unwrap();
    let tool_message = messages
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("tool result sent back");
    assert_eq!(tool_message["tool_call_id"], "c1");
    let call = &assistant_messages(second)[0]["tool_calls"][0];
    assert!(
        call["function"]["arguments"].is_string(),
        "arguments go back as a JSON string"
    );

    let result = run.json();
    assert_eq!(
        result["stats"]["token_usage"],
        // An endpoint whose model has no price costs what no one knows.
        json!({"prompt": 200, "completion": 40, "total": 240, "cost": null})
    );
}

#[test]
fn reasoning_content_is_echoed_back() {
    let sandbox = Sandbox::new();
    let mut thinking = write_call(json!("{\"path\": \"a.txt\", \"content\": \"hi\"}"));
    thinking["reasoning_content"] = json!("I should write a.txt first.");
    thinking["provider_note"] = json!({"kept": true});
    let mock = MockModel::start(vec![
        MockResponse::completion(thinking),
        MockResponse::completion(finish_call()),
    ]);
    let run = spawn_against(&sandbox, &mock, &[]);
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    let requests = mock.requests();
    let echoed = assistant_messages(&requests[1].body)[0];
    assert_eq!(echoed["reasoning_content"], "I should write a.txt first.");
    assert_eq!(
        echoed["provider_note"],
        json!({"kept": true}),
        "unknown fields survive the round trip"
    );
    let transcript = sandbox.transcript(7);
    let kept = &transcript["messages"][2];
    assert_eq!(kept["reasoning_content"], "I should write a.txt first.");
}

#[test]
fn ollama_reasoning_and_the_echo_modes() {
    // Ollama names the field `reasoning`; `always` sends "" where there was none (DeepSeek).
    let sandbox = Sandbox::new();
    let mut first = json!({"role": "assistant", "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "list_dir", "arguments": "{}"}}
    ]});
    first["reasoning"] = json!("look around");
    let mock = MockModel::start(vec![
        MockResponse::completion(first),
        MockResponse::completion(write_call(json!({"path": "a.txt", "content": "hi"}))),
        MockResponse::completion(finish_call()),
    ]);
    let run = spawn_against(&sandbox, &mock, &["--reasoning-echo", "always"]);
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    let last = &mock.requests()[2].body;
    let assistants = assistant_messages(last);
    assert_eq!(assistants[0]["reasoning_content"], "look around");
    assert_eq!(
        assistants[1]["reasoning_content"], "",
        "always: empty where there was none"
    );

    let sandbox = Sandbox::new();
    let mut first = write_call(json!({"path": "a.txt", "content": "hi"}));
    first["reasoning_content"] = json!("secret");
    let mock = MockModel::start(vec![
        MockResponse::completion(first),
        MockResponse::completion(finish_call()),
    ]);
    let run = spawn_against(&sandbox, &mock, &["--reasoning-echo", "never"]);
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    let echoed = assistant_messages(&mock.requests()[1].body)[0].clone();
    assert!(
        echoed.get("reasoning_content").is_none(),
        "never: not sent ({echoed})"
    );
}

#[test]
fn a_429_with_retry_after_is_retried() {
    let sandbox = Sandbox::new();
    let mock = MockModel::start(vec![
        MockResponse::raw(429, r#"{"error": {"message": "slow down"}}"#).header("retry-after", "1"),
        MockResponse::completion(write_call(json!({"path": "a.txt", "content": "hi"}))),
        MockResponse::completion(finish_call()),
    ]);
    let run = spawn_against(&sandbox, &mock, &[]);
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    let waited = requests[1].at.duration_since(requests[0].at);
    assert!(
        waited >= Duration::from_millis(900),
        "Retry-After: 1 was honoured ({waited:?})"
    );
    assert_eq!(
        requests[0].body, requests[1].body,
        "the same request is sent again"
    );
}

#[test]
fn a_500_that_persists_exhausts_the_retries() {
    let sandbox = Sandbox::new();
    let failing = || MockResponse::raw(500, r#"{"error": {"message": "the backend is on fire"}}"#);
    let mock = MockModel::start(vec![failing(), failing(), failing()]);
    let run = spawn_against(&sandbox, &mock, &["--http-retries", "2"]);
    assert_eq!(run.code, 1);
    assert_eq!(mock.requests().len(), 3, "one attempt and two retries");
    let result = run.json();
    assert_eq!(result["status"], "error");
    let error = result["error"].as_str().unwrap();
    assert!(
        error.contains(&format!("{}/chat/completions", mock.url)),
        "names the URL: {error}"
    );
    assert!(error.contains("500"), "names the status: {error}");
    assert!(
        error.contains("the backend is on fire"),
        "shows the body's message: {error}"
    );
    assert!(error.contains("3 attempts"), "{error}");
    assert_eq!(sandbox.transcript(7)["status"], "error");
}

#[test]
fn a_malformed_body_is_a_clear_error() {
    let sandbox = Sandbox::new();
    let mock = MockModel::start(vec![MockResponse::raw(200, "<html>gateway says hi</html>")]);
    let run = spawn_against(&sandbox, &mock, &[]);
    assert_eq!(run.code, 1);
    assert_eq!(
        mock.requests().len(),
        1,
        "a malformed answer is not retried"
    );
    let error = run.json()["error"].as_str().unwrap().to_string();
    assert!(error.contains("not a chat completion"), "{error}");
    assert!(
        error.contains("gateway says hi"),
        "quotes the body: {error}"
    );
}

#[test]
fn a_bad_key_says_where_the_key_comes_from() {
    let sandbox = Sandbox::new();
    let mock = MockModel::start(vec![MockResponse::raw(
        401,
        r#"{"error": {"message": "Incorrect API key"}}"#,
    )]);
    let run = spawn_against(&sandbox, &mock, &[]);
    assert_eq!(run.code, 1);
    let error = run.json()["error"].as_str().unwrap().to_string();
    assert!(
        error.contains("401") && error.contains("Incorrect API key"),
        "{error}"
    );
    assert!(error.contains("--api-key-env"), "{error}");
}

#[test]
fn a_slow_endpoint_hits_the_request_timeout() {
    let sandbox = Sandbox::new();
    let slow = MockResponse::completion(finish_call()).after(Duration::from_secs(5));
    let mock = MockModel::start(vec![slow]);
    let run = spawn_against(
        &sandbox,
        &mock,
        &["--request-timeout", "1", "--http-retries", "0"],
    );
    assert_eq!(run.code, 1);
    assert!(run.elapsed < Duration::from_secs(30), "{:?}", run.elapsed);
    let error = run.json()["error"].as_str().unwrap().to_string();
    assert!(error.contains("no answer within 1 s"), "{error}");
}

#[test]
fn a_timed_out_request_is_tried_once_more_and_no_more() {
    let sandbox = Sandbox::new();
    let slow = || MockResponse::completion(finish_call()).after(Duration::from_secs(4));
    let mock = MockModel::start(vec![slow(), slow(), slow(), slow()]);
    let run = spawn_against(
        &sandbox,
        &mock,
        &["--request-timeout", "1", "--http-retries", "4"],
    );
    assert_eq!(run.code, 1);
    assert_eq!(mock.requests().len(), 2, "the first try and one more");
    let error = run.json()["error"].as_str().unwrap().to_string();
    assert!(
        error.contains("gave up after 2 attempts")
            && error.contains("1. ")
            && error.contains("2. "),
        "each attempt's cause: {error}"
    );
}
