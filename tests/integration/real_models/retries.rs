//! Failing requests: each retry is said as it happens, the final error
//! names every attempt, and a wait too long to honour is said as such.

use serde_json::json;

use super::{one_step_plan, run_with_planner_at};
use crate::common::Sandbox;
use crate::common::mock_model::{MockModel, MockResponse};
use crate::http_client::{finish_call, spawn_against, write_call};

fn failing(status: u16, message: &str) -> MockResponse {
    MockResponse::raw(status, json!({"error": {"message": message}}).to_string())
}

#[test]
fn each_retry_is_shown_and_the_error_lists_every_cause() {
    let sandbox = Sandbox::new();
    let mock = MockModel::start(vec![
        failing(503, "overloaded"),
        failing(502, "bad gateway"),
        failing(500, "on fire"),
    ]);
    let run = spawn_against(&sandbox, &mock, &["--http-retries", "2"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("model: 503, retrying in") && run.stderr.contains("(2 of 3)"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("model: 502, retrying in") && run.stderr.contains("(3 of 3)"));
    let error = run.json()["error"].as_str().unwrap().to_string();
    for cause in ["1. ", "overloaded", "2. ", "bad gateway", "3. ", "on fire"] {
        assert!(error.contains(cause), "{cause} in {error}");
    }
}

#[test]
fn a_retry_after_beyond_the_cap_is_said_and_not_waited_for() {
    let sandbox = Sandbox::new();
    let mock = MockModel::start(vec![
        failing(429, "quota").header("retry-after", "3600"),
        MockResponse::completion(finish_call()),
    ]);
    let run = spawn_against(&sandbox, &mock, &[]);
    assert_eq!(run.code, 1);
    assert_eq!(mock.requests().len(), 1);
    let error = run.json()["error"].as_str().unwrap().to_string();
    assert!(error.contains("asked to wait 3600 s"), "{error}");
}

#[test]
fn a_200_that_carries_a_server_error_is_retried() {
    let sandbox = Sandbox::new();
    let mock = MockModel::start(vec![
        MockResponse::raw(200, r#"{"error": {"code": 500, "message": "internal"}}"#),
        MockResponse::completion(write_call(json!({"path": "a.txt", "content": "hi"}))),
        MockResponse::completion(finish_call()),
    ]);
    let run = spawn_against(&sandbox, &mock, &[]);
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    assert_eq!(mock.requests().len(), 3);
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("a.txt")).unwrap(),
        "hi"
    );
}

#[test]
fn retries_are_llm_retry_events_of_a_run() {
    let sandbox = Sandbox::new();
    let mock = MockModel::start(vec![
        failing(503, "warming up"),
        MockResponse::text(&one_step_plan()),
    ]);
    let team = run_with_planner_at(&sandbox, &mock, &["--json"]);
    assert_eq!(team.run.code, 0, "stderr:\n{}", team.run.stderr);
    let retries = team.events_of("llm_retry");
    assert_eq!(retries.len(), 1, "{retries:?}");
    assert_eq!(retries[0]["agent"], "planner");
    assert_eq!(retries[0]["reason"], "503");
    assert_eq!(
        (retries[0]["attempt"].as_u64(), retries[0]["of"].as_u64()),
        (Some(2), Some(5))
    );
    assert!(
        team.run.stdout.contains("\"type\":\"llm_retry\""),
        "--json shows it"
    );
    assert!(
        team.run
            .stderr
            .contains("agent planner | model: 503, retrying in")
    );
}
