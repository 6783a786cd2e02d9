//! One pace for every agent of a run (issue 46, item 3): the endpoint's
//! `x-ratelimit-*` headers and `Retry-After` kept by all agents together,
//! and the user's own `--max-requests-per-minute`, against endpoints on
//! 127.0.0.1.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::mock_model::{MockModel, MockResponse};
use crate::common::rate_limited::RateLimited;
use crate::common::{Sandbox, run, spawn_command, troupe};
use crate::http_client::{finish_call, spawn_against, write_call};

/// A plan of `steps` independent steps.
pub fn fan_out(steps: usize) -> Value {
    let steps: Vec<Value> = (0..steps)
        .map(|n| json!({"id": format!("s{n}"), "description": format!("write the file of step s{n}"), "dependencies": []}))
        .collect();
    json!({"summary": "a fan-out", "steps": steps})
}

#[test]
fn fifty_agents_keep_to_ten_requests_a_second_together() {
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let plan = sandbox.root().join("plan.json");
    std::fs::write(&plan, fan_out(50).to_string()).unwrap();
    let endpoint = RateLimited::start(10, Duration::ZERO);
    let mut command = troupe();
    command
        .args(["run", "--json", "--plan"])
        .arg(&plan)
        .arg("--workspace")
        .arg(sandbox.ws())
        .args(["--model", "test-model", "--base-url", &endpoint.url])
        .args(["--api-key-env", "TEST_KEY_VAR", "--isolation", "shared"])
        .args(["--max-parallel", "50", "--http-retries", "8"])
        .env("TEST_KEY_VAR", "sk-test");
    let run = run(command);
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    let counts = endpoint.counts();
    assert!(
        counts.answered >= 150,
        "a worker's two turns and a review for each of 50 steps: {counts:?}"
    );
    assert!(
        counts.limited * 20 <= counts.answered,
        "at most 5% of the requests met a 429: {counts:?}"
    );
    let waits: Vec<Value> = run
        .stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["type"] == "llm_wait")
        .collect();
    assert!(
        waits
            .iter()
            .any(|w| w["reason"].as_str().unwrap_or("").contains("x-ratelimit")),
        "the waits for the endpoint's limit are events: {waits:?}"
    );
    let lines = run.stderr.lines().filter(|l| l.contains("model: waiting"));
    assert!(
        lines.count() <= 5,
        "a line a reason now and then, not one for each of 150 waits: {}",
        run.stderr
    );
    let written = std::fs::read_dir(sandbox.ws())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("out-"))
        .count();
    assert_eq!(written, 50, "every worker wrote its file");
}

#[test]
fn the_users_cap_spaces_requests_and_a_wait_is_not_idleness() {
    let sandbox = Sandbox::new();
    let mock = MockModel::start(vec![
        MockResponse::completion(write_call(json!({"path": "a.txt", "content": "hi"}))),
        MockResponse::completion(finish_call()),
    ]);
    let run = spawn_against(
        &sandbox,
        &mock,
        &["--max-requests-per-minute", "30", "--idle-timeout", "1"],
    );
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let gap = requests[1].at.duration_since(requests[0].at);
    assert!(
        gap >= Duration::from_millis(1900),
        "30 a minute is one every 2 s ({gap:?})"
    );
    assert!(
        run.stderr.contains("| model: waiting ")
            && run.stderr.contains(" s for --max-requests-per-minute"),
        "the wait is said: {}",
        run.stderr
    );
    assert_eq!(run.json()["status"], "completed", "not stopped as idle");
}

#[test]
fn a_cap_of_zero_is_refused_where_it_was_given() {
    let sandbox = Sandbox::new();
    let file = sandbox.root().join("troupe.toml");
    std::fs::write(&file, "max_tokens_per_minute = 0\n").unwrap();
    let mock = MockModel::start(Vec::new());
    let run = spawn_against(&sandbox, &mock, &["--config", &file.display().to_string()]);
    assert_eq!(run.code, 2, "stderr:\n{}", run.stderr);
    assert!(
        run.stderr.contains("max_tokens_per_minute in") && run.stderr.contains("at least 1"),
        "{}",
        run.stderr
    );
    assert!(mock.requests().is_empty());
}

#[test]
fn a_retry_after_pauses_the_other_troupe_processes_of_the_workspace() {
    let sandbox = Sandbox::new();
    let mock = MockModel::start(vec![
        MockResponse::raw(429, r#"{"error": {"message": "slow down"}}"#).header("retry-after", "3"),
        MockResponse::completion(write_call(json!({"path": "a.txt", "content": "a"}))),
        MockResponse::completion(write_call(json!({"path": "b.txt", "content": "b"}))),
        MockResponse::completion(finish_call()),
        MockResponse::completion(finish_call()),
    ]);
    let agent = |id: u32| {
        let mut command = spawn_command(&sandbox, id, "Write a file", "test-model");
        command
            .args(["--base-url", &mock.url, "--api-key-env", "TEST_KEY_VAR"])
            .env("TEST_KEY_VAR", "sk-test");
        command
    };
    let first = std::thread::spawn({
        let command = agent(1);
        move || run(command)
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while mock.requests().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    let second = run(agent(2));
    let first = first.join().unwrap();
    assert_eq!(first.code, 0, "the first agent:\n{}", first.stderr);
    assert_eq!(second.code, 0, "the second agent:\n{}", second.stderr);
    let requests = mock.requests();
    let limited = requests[0].at;
    assert!(
        requests[1..]
            .iter()
            .all(|r| r.at.duration_since(limited) >= Duration::from_millis(2500)),
        "no process asked before the Retry-After was over: {:?}",
        requests
            .iter()
            .map(|r| r.at.duration_since(limited))
            .collect::<Vec<_>>()
    );
    assert!(
        second.stderr.contains("waiting") && second.stderr.contains("Retry-After"),
        "the second agent says why it waits: {}",
        second.stderr
    );
}
