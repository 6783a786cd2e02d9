//! Bounded answers: every request says how long the answer may be, an
//! answer cut at that limit is asked again, and the agent's own timeout
//! wins over a model that takes its time.

use std::time::Duration;

use serde_json::json;

use super::{call, messages, texts_of};
use crate::common::Sandbox;
use crate::common::mock_model::{MockModel, MockResponse};
use crate::http_client::{finish_call, spawn_against};

#[test]
fn every_request_bounds_the_answer() {
    let sandbox = Sandbox::new();
    let mock = MockModel::start(vec![MockResponse::completion(finish_call())]);
    let run = spawn_against(&sandbox, &mock, &[]);
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    let body = &mock.requests()[0].body;
    assert_eq!(body["max_tokens"], 4096, "a worker's default: {body}");
    assert!(body.get("temperature").is_none(), "the endpoint's own");

    let sandbox = Sandbox::new();
    let mock = MockModel::start(vec![MockResponse::completion(finish_call())]);
    let flags = ["--max-output-tokens", "300", "--temperature", "0.25"];
    let run = spawn_against(&sandbox, &mock, &flags);
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    let body = &mock.requests()[0].body;
    assert_eq!(body["max_tokens"], 300);
    assert_eq!(body["temperature"], 0.25);
}

#[test]
fn a_cut_answer_is_asked_again_and_its_calls_are_not_run() {
    let sandbox = Sandbox::new();
    let cut = call(
        "c1",
        "write_file",
        r#"{"path": "a.txt", "content": "the begin"#,
    );
    let mock = MockModel::start(vec![
        MockResponse::answer(cut, "length", Some((100, 300))),
        MockResponse::completion(finish_call()),
    ]);
    let run = spawn_against(&sandbox, &mock, &["--max-output-tokens", "300"]);
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    assert!(
        !sandbox.ws().join("a.txt").exists(),
        "the cut call did not run"
    );
    let again = &mock.requests()[1].body;
    let results = texts_of(again, "tool");
    assert_eq!(results.len(), 1, "the cut call has its result: {again}");
    assert!(results[0].contains("not run"), "{}", results[0]);
    let last = messages(again).last().unwrap();
    assert_eq!(last["role"], "user");
    let note = last["content"].as_str().unwrap();
    assert!(
        note.contains("cut off") && note.contains("300 tokens"),
        "{note}"
    );
}

#[test]
fn three_cut_answers_in_a_row_fail_the_task_with_a_reason() {
    let sandbox = Sandbox::new();
    let cut = || {
        MockResponse::answer(
            json!({"role": "assistant", "content": "I will now write a very"}),
            "length",
            Some((100, 50)),
        )
    };
    let mock = MockModel::start(vec![cut(), cut(), cut(), cut()]);
    let run = spawn_against(&sandbox, &mock, &["--max-output-tokens", "50"]);
    assert_eq!(run.code, 1);
    assert_eq!(mock.requests().len(), 3, "asked again twice, no more");
    let result = run.json();
    assert_eq!(
        result["status"], "failed",
        "the model's doing, not troupe's"
    );
    assert_eq!(result["stop_reason"], "output_limit");
    let said = result["result_summary"].as_str().unwrap();
    assert!(
        said.contains("cut at the output limit (50 tokens) 3 times")
            && said.contains("--max-output-tokens"),
        "{said}"
    );
    assert_eq!(result["stats"]["token_usage"]["total"], 450);
}

#[test]
fn the_agent_timeout_wins_and_keeps_the_tokens_spent() {
    let sandbox = Sandbox::new();
    let mock = MockModel::start(vec![
        MockResponse::completion(call("c1", "list_dir", "{}")),
        MockResponse::completion(finish_call()).after(Duration::from_secs(30)),
    ]);
    let run = spawn_against(&sandbox, &mock, &["--timeout", "3"]);
    assert_eq!(run.code, 1);
    assert!(run.elapsed < Duration::from_secs(25), "{:?}", run.elapsed);
    let result = run.json();
    assert_eq!(result["status"], "timeout");
    assert_eq!(
        result["stats"]["token_usage"]["total"], 120,
        "the answered turn counts"
    );
}
