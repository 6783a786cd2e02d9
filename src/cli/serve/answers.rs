//! What a tool call answers: its object as `structuredContent`, the
//! session's pending notices added, and a short text for hosts that show
//! only text.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;

use super::calls::CallError;
use super::notices;
use super::session::Notice;

/// A tool's result: its object as `structuredContent` with the pending
/// notices added, and a short text (the first line of which says what
/// happened) for hosts that show only text.
pub fn answer(
    tool: &str,
    outcome: Result<Value, CallError>,
    notices: Vec<Notice>,
) -> CallToolResult {
    let (mut value, text, failed) = match outcome {
        Ok(value) => {
            let text = brief(tool, &value);
            (value, text, false)
        }
        Err(error) => {
            let kind = match &error {
                CallError::Invalid(_) => "invalid",
                CallError::Busy(_) => "busy",
                CallError::Failed(_) => "failed",
            };
            let text = format!("{tool}: {error}");
            let value =
                serde_json::json!({ "success": false, "error": error.to_string(), "kind": kind });
            (value, text, true)
        }
    };
    let mut lines = vec![text];
    if !notices.is_empty() {
        lines.extend(notices.iter().map(|n| n.text.clone()));
        if let Value::Object(map) = &mut value {
            map.insert(
                "notices".into(),
                serde_json::to_value(&notices).unwrap_or_default(),
            );
        }
    }
    let mut result = CallToolResult::structured(value);
    result.content = vec![ContentBlock::text(lines.join("\n\n"))];
    result.is_error = Some(failed);
    result
}

/// The first line of a tool's text.
fn brief(tool: &str, value: &Value) -> String {
    let text = |key: &str| value[key].as_str().unwrap_or_default().to_string();
    match tool {
        "create_sub_agent" if value["background"] == Value::Bool(true) => text("message"),
        "create_sub_agent" => {
            let id = value["agent_id"].to_string();
            notices::agent_text(id.trim_matches('"'), value)
        }
        "get_sub_agent_status" => {
            let agents = value["agents"].as_array().cloned().unwrap_or_default();
            let lines: Vec<String> = agents
                .iter()
                .map(|a| {
                    format!(
                        "agent {}: {} ({} s) {}",
                        a["agent_id"],
                        a["status"].as_str().unwrap_or_default(),
                        a["runtime_seconds"],
                        a["last_action"].as_str().unwrap_or_default()
                    )
                })
                .collect();
            match lines.is_empty() {
                true => "no agents".to_string(),
                false => lines.join("\n"),
            }
        }
        "wait_sub_agents" => {
            let ended = value["ended"].as_array().cloned().unwrap_or_default();
            let mut lines: Vec<String> = ended
                .iter()
                .map(|r| {
                    let id = r["agent_id"].to_string();
                    notices::agent_text(id.trim_matches('"'), r)
                })
                .collect();
            lines.push(format!(
                "still running: {}",
                match value["running"].as_array() {
                    Some(ids) if !ids.is_empty() => ids
                        .iter()
                        .map(Value::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                    _ => "none".to_string(),
                }
            ));
            lines.join("\n\n")
        }
        "terminate_sub_agent" => text("message"),
        "run_team" if value["background"] == Value::Bool(true) => text("message"),
        _ => {
            let steps = value["steps"].as_array().cloned().unwrap_or_default();
            let done = steps.iter().filter(|s| s["status"] == "completed").count();
            format!(
                "Run {}: {}; {done} of {} steps completed",
                text("run_id"),
                text("status"),
                steps.len()
            )
        }
    }
}
