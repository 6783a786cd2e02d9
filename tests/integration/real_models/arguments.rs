//! Tool arguments that are not JSON: a tool error the model can act on,
//! and a history no strict server refuses.

use super::{call, messages, texts_of};
use crate::common::Sandbox;
use crate::common::mock_model::{MockModel, MockResponse};
use crate::http_client::{finish_call, spawn_against};

#[test]
fn arguments_that_are_not_json_are_a_tool_error_and_go_back_as_json() {
    let sandbox = Sandbox::new();
    let broken = r#"{"path": "a.txt", "content": "unterminated"#;
    let mock = MockModel::start(vec![
        MockResponse::completion(call("c1", "write_file", broken)),
        MockResponse::completion(finish_call()),
    ]);
    let run = spawn_against(&sandbox, &mock, &[]);
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    let next = &mock.requests()[1].body;
    let result = &texts_of(next, "tool")[0];
    assert!(
        result.contains("not valid JSON") && result.contains("call write_file again"),
        "{result}"
    );
    let assistant = messages(next)
        .iter()
        .find(|m| m["role"] == "assistant")
        .unwrap();
    let sent = assistant["tool_calls"][0]["function"]["arguments"]
        .as_str()
        .expect("arguments are a string");
    let parsed: serde_json::Value = serde_json::from_str(sent)
        .unwrap_or_else(|e| panic!("the history carries JSON, not {sent}: {e}"));
    assert_eq!(parsed, broken, "the model's text, kept as a JSON string");
}
