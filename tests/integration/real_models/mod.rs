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

use crate::common::Sandbox;
use crate::common::mock_model::MockModel;
use crate::team::{
    TeamRun, approving_reviewer, finish_team_run, team_command, worker_rule, worker_writes,
};

/// A plan of one step, `a`, as a Planner writes it.
pub fn one_step_plan() -> String {
    json!({"summary": "s", "steps": [
        {"id": "a", "description": "do a", "type": "FILE_WRITE", "dependencies": []}
    ]})
    .to_string()
}

/// `troupe run` of one step `a` on the scripted model, whose Planner is
/// the model `planner-x` at `mock`.
pub fn run_with_planner_at(sandbox: &Sandbox, mock: &MockModel, extra: &[&str]) -> TeamRun {
    let rules = vec![
        worker_rule("a", worker_writes("a", 0)),
        approving_reviewer(),
    ];
    let mut command = team_command(sandbox, rules, extra);
    command.args([
        "--planner-model",
        "planner-x",
        "--planner-base-url",
        &mock.url,
    ]);
    finish_team_run(sandbox, command)
}

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
