//! troupe against a real llama.cpp `llama-server` serving
//! SmolLM2-135M-Instruct (see `.ci/llama-up`). A model that small cannot
//! call tools, so where a test needs a tool call, a proxy on 127.0.0.1
//! makes that turn and hands every other request to the server as it came.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::llama::{LlamaServer, shared};
use crate::common::mock_model::{MockModel, MockResponse};
use crate::common::{Run, Sandbox, run, spawn_command};

/// `troupe spawn` of agent 7 with `task`, against `url`.
fn spawn_at(sandbox: &Sandbox, url: &str, task: &str, extra: &[&str]) -> Run {
    let mut command = spawn_command(sandbox, 7, task, "smollm2");
    command
        .args(["--base-url", url, "--max-turns", "3"])
        .args(extra);
    run(command)
}

fn write_call() -> MockResponse {
    MockResponse::completion(json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "write_file",
         "arguments": "{\"path\": \"hello.txt\", \"content\": \"hello\"}"}}
    ]}))
}

#[test]
fn the_servers_counts_are_troupes_and_max_tokens_bounds_each_turn() {
    let Some(url) = shared("real_endpoint counts") else {
        return;
    };
    let sandbox = Sandbox::new();
    let proxy = MockModel::proxy(Vec::new(), &url);
    let run = spawn_at(
        &sandbox,
        &proxy.url,
        "Say hello.",
        &["--max-output-tokens", "16"],
    );
    let result = run.json();
    let answers = proxy.forwarded();
    assert!(!answers.is_empty(), "stderr:\n{}", run.stderr);
    let mut total = 0;
    for answer in &answers {
        assert_eq!(answer.status, 200, "{:?}", answer.body);
        let usage = &answer.body["usage"];
        assert!(
            usage["completion_tokens"].as_u64().unwrap() <= 16,
            "{usage}"
        );
        total += usage["total_tokens"].as_u64().unwrap();
    }
    for request in proxy.requests() {
        assert_eq!(request.body["max_tokens"], 16);
    }
    let counted = &result["stats"]["token_usage"];
    assert_eq!(counted["total"].as_u64(), Some(total), "{counted}");
    assert!(
        counted.get("estimated").is_none(),
        "the server's count: {counted}"
    );
}

#[test]
fn a_tool_call_history_is_accepted() {
    let Some(url) = shared("real_endpoint tool history") else {
        return;
    };
    let sandbox = Sandbox::new();
    let proxy = MockModel::proxy(vec![write_call()], &url);
    let run = spawn_at(
        &sandbox,
        &proxy.url,
        "Write hello.txt.",
        &["--max-output-tokens", "32"],
    );
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("hello.txt")).unwrap(),
        "hello"
    );
    let answers = proxy.forwarded();
    assert!(!answers.is_empty(), "stderr:\n{}", run.stderr);
    let history = &proxy.requests()[1].body;
    assert!(history.to_string().contains("tool_calls"), "{history}");
    for answer in &answers {
        assert_eq!(
            answer.status, 200,
            "the server took the history: {:?}",
            answer.body
        );
    }
    assert_ne!(run.json()["status"], "error", "{}", run.stdout);
}

#[test]
fn a_small_context_gives_a_clear_error() {
    let Some(server) = LlamaServer::start("real_endpoint small context", &["-c", "512"]) else {
        return;
    };
    let sandbox = Sandbox::new();
    let run = spawn_at(&sandbox, &server.url, "Say hello.", &[]);
    assert_eq!(run.code, 1);
    let result = run.json();
    assert_eq!(result["status"], "context_exhausted", "{result}");
    let error = result["error"].as_str().unwrap();
    assert!(
        error.contains("exceeds the available context size (512 tokens)"),
        "{error}"
    );
}

#[test]
fn a_medium_context_is_compacted_and_the_agent_ends_cleanly() {
    let Some(server) = LlamaServer::start("real_endpoint compaction", &["-c", "2048"]) else {
        return;
    };
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let text: String = (0..1500)
        .map(|i| format!("line {i:04} of the log\n"))
        .collect();
    std::fs::write(sandbox.ws().join("big.log"), text).unwrap();
    let read =
        MockResponse::completion(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read_file",
             "arguments": "{\"path\": \"big.log\"}"}}
        ]}));
    let proxy = MockModel::proxy(vec![read], &server.url);
    let run = spawn_at(
        &sandbox,
        &proxy.url,
        "Summarise big.log.",
        &["--max-output-tokens", "48"],
    );
    let statuses: Vec<u16> = proxy.forwarded().iter().map(|f| f.status).collect();
    assert_eq!(
        statuses.first(),
        Some(&400),
        "the server refused first: {statuses:?}"
    );
    assert_eq!(
        statuses.last(),
        Some(&200),
        "and took it in the end: {statuses:?}\n{}",
        run.stderr
    );
    let result = run.json();
    assert!(
        ["completed", "failed"].contains(&result["status"].as_str().unwrap()),
        "ends cleanly: {result}"
    );
    let transcript = sandbox.transcript(7);
    let compactions = transcript["compactions"].as_array().unwrap();
    assert!(!compactions.is_empty());
    assert!(
        compactions
            .iter()
            .all(|c| c["reason"] == "context_exceeded"),
        "{compactions:?}"
    );
}

#[test]
fn an_agent_timeout_cancels_the_request_on_the_server() {
    let Some(server) = LlamaServer::start("real_endpoint cancel", &["-c", "8192", "-b", "256"])
    else {
        return;
    };
    let sandbox = Sandbox::new();
    let task = "word ".repeat(6_000);
    let run = spawn_at(&sandbox, &server.url, &task, &["--timeout", "3"]);
    assert_eq!(run.json()["status"], "timeout", "{}", run.stdout);
    let waited = Instant::now();
    while !server.log_text().contains("cancel task") {
        assert!(
            waited.elapsed() < Duration::from_secs(90),
            "the server never cancelled:\n{}",
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_server_api_key_gives_a_clear_401() {
    let Some(server) = LlamaServer::start("real_endpoint api key", &["--api-key", "sekrit"]) else {
        return;
    };
    let sandbox = Sandbox::new();
    let run = spawn_at(
        &sandbox,
        &server.url,
        "Say hello.",
        &["--api-key-env", "TROUPE_TEST_NO_KEY"],
    );
    assert_eq!(run.code, 1);
    let error = run.json()["error"].as_str().unwrap().to_string();
    assert!(
        error.contains("401") && error.contains("Invalid API Key"),
        "{error}"
    );
    assert!(error.contains("--api-key-env"), "{error}");
}
