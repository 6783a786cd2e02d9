//! A conversation too long for the model's context: compacted, step by
//! step, in what the model is sent, never in the transcript.

use serde_json::{Value, json};

use super::{call, messages, texts_of};
use crate::common::Sandbox;
use crate::common::mock_model::{MockModel, MockResponse};
use crate::http_client::{finish_call, spawn_against};

/// A file of about 30 KB in the workspace, and its last line.
fn big_file(sandbox: &Sandbox, name: &str) -> String {
    let text: String = (0..1500)
        .map(|i| format!("line {i:04} of the log\n"))
        .collect();
    write_in(sandbox, name, &text);
    "line 1499 of the log".to_string()
}

/// Writes a file into the workspace, which the run would create.
fn write_in(sandbox: &Sandbox, name: &str, text: &str) {
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    std::fs::write(sandbox.ws().join(name), text).unwrap();
}

fn read(id: &str, path: &str) -> Value {
    call(id, "read_file", &json!({"path": path}).to_string())
}

fn longest_tool_result(body: &Value) -> usize {
    texts_of(body, "tool")
        .iter()
        .map(String::len)
        .max()
        .unwrap_or(0)
}

#[test]
fn a_refused_request_is_compacted_and_the_transcript_keeps_everything() {
    let sandbox = Sandbox::new();
    big_file(&sandbox, "big.log");
    let mock = MockModel::start(vec![
        MockResponse::completion(read("c1", "big.log")),
        MockResponse::too_long(),
        MockResponse::completion(finish_call()),
    ]);
    let run = spawn_against(&sandbox, &mock, &[]);
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    assert!(longest_tool_result(&requests[1].body) > 10_000);
    let shortened = longest_tool_result(&requests[2].body);
    assert!(
        shortened < 2_000,
        "sent as head and tail: {shortened} bytes"
    );
    assert!(texts_of(&requests[2].body, "tool")[0].contains("left out to fit the model's context"));
    assert!(
        run.stderr
            .contains("context: sending a long tool result as its head and tail"),
        "{}",
        run.stderr
    );

    let transcript = sandbox.transcript(7);
    let kept = crate::common::messages_with_role(&transcript, "tool");
    assert!(
        kept[0]["content"].as_str().unwrap().len() > 10_000,
        "the transcript keeps it whole"
    );
    let compactions = transcript["compactions"].as_array().unwrap();
    assert_eq!(compactions.len(), 1, "{compactions:?}");
    assert_eq!(compactions[0]["step"], "shortened");
    assert_eq!(compactions[0]["reason"], "context_exceeded");
    assert_eq!(compactions[0]["results"], 1);
}

#[test]
fn old_turns_are_summarised_when_shortening_is_not_enough() {
    let sandbox = Sandbox::new();
    let last_line = big_file(&sandbox, "big.log");
    write_in(&sandbox, "small.txt", "small and plain");
    let mock = MockModel::start(vec![
        MockResponse::completion(read("c1", "big.log")),
        MockResponse::completion(read("c2", "small.txt")),
        MockResponse::too_long(),
        MockResponse::too_long(),
        MockResponse::text("SUMMARY: read big.log, which is a log of 1500 lines"),
        MockResponse::completion(finish_call()),
    ]);
    let run = spawn_against(&sandbox, &mock, &[]);
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    let requests = mock.requests();
    assert_eq!(requests.len(), 6);

    let summary_call = &requests[4].body;
    assert!(
        summary_call.get("tools").is_none(),
        "no tools: {summary_call}"
    );
    assert!(texts_of(summary_call, "system")[0].contains("condense"));
    assert!(texts_of(summary_call, "user")[0].contains("read_file"));

    let after = &requests[5].body;
    let task = &texts_of(after, "user")[0];
    assert!(task.contains("SUMMARY: read big.log"), "{task}");
    assert!(
        !after.to_string().contains(&last_line),
        "the big result is gone"
    );
    assert!(
        after.to_string().contains("small and plain"),
        "the last turn stays"
    );
    assert_eq!(
        messages(after).len(),
        4,
        "system, task with summary, last turn"
    );

    let transcript = sandbox.transcript(7);
    let steps: Vec<&str> = transcript["compactions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["step"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["shortened", "summarized"]);
    let summarized = &transcript["compactions"][1];
    assert_eq!(
        (summarized["from"].as_u64(), summarized["to"].as_u64()),
        (Some(2), Some(4))
    );
    assert!(
        summarized["summary"]
            .as_str()
            .unwrap()
            .starts_with("SUMMARY")
    );
    assert_eq!(
        transcript["stats"]["token_usage"]["total"], 480,
        "four answers, the summary's included"
    );
}

#[test]
fn a_conversation_that_cannot_fit_ends_context_exhausted() {
    let sandbox = Sandbox::new();
    let mock = MockModel::start(vec![MockResponse::too_long()]);
    let run = spawn_against(&sandbox, &mock, &[]);
    assert_eq!(run.code, 1);
    assert_eq!(mock.requests().len(), 1, "nothing to compact, not retried");
    let result = run.json();
    assert_eq!(result["status"], "context_exhausted", "{result}");
    let error = result["error"].as_str().unwrap();
    assert!(
        error.contains("no longer fits the model's context"),
        "{error}"
    );
    assert!(
        error.contains("exceeds the available context size"),
        "the endpoint's words: {error}"
    );
    assert_eq!(sandbox.transcript(7)["status"], "context_exhausted");
}

#[test]
fn a_context_window_compacts_before_the_endpoint_refuses() {
    let sandbox = Sandbox::new();
    big_file(&sandbox, "big.log");
    let mock = MockModel::start(vec![
        MockResponse::completion(read("c1", "big.log")),
        MockResponse::completion(finish_call()),
    ]);
    let run = spawn_against(&sandbox, &mock, &["--context-window", "3000"]);
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    let requests = mock.requests();
    assert_eq!(requests.len(), 2, "no refusal needed");
    assert!(longest_tool_result(&requests[1].body) < 2_000);
    let transcript = sandbox.transcript(7);
    assert_eq!(transcript["compactions"][0]["reason"], "context_window");
}
