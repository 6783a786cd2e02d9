//! What real models do to troupe, played by a strict mock endpoint on
//! 127.0.0.1: answers cut at the output limit, conversations too long for
//! the context, arguments that are not JSON, failing requests, a model
//! per role, and records that have no gaps whatever the model did.

mod answers;
mod arguments;
mod context;
mod records;
mod retries;
mod roles;

use serde_json::{Value, json};

/// An assistant message that calls `name` with `arguments` (JSON text).
pub fn call(id: &str, name: &str, arguments: &str) -> Value {
    json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}
    ]})
}

/// The messages of a recorded request body.
pub fn messages(body: &Value) -> &Vec<Value> {
    body["messages"].as_array().expect("messages")
}

/// The text of the messages of `role` in a request body.
pub fn texts_of(body: &Value, role: &str) -> Vec<String> {
    messages(body)
        .iter()
        .filter(|m| m["role"] == role)
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}
