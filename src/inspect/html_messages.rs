//! An agent's messages as a person reads them in `troupe report`: the
//! system prompt folded away, each tool call under its tool's name with
//! its arguments decoded (real line breaks, no escaped quotes), and each
//! result under the name of the call it answers, its JSON unwrapped.

use std::collections::HashMap;

use serde_json::Value;

use super::graph::xml;
use crate::chat::{Message, Role};

pub fn messages(messages: &[Message]) -> String {
    let names: HashMap<&str, &str> = messages
        .iter()
        .flat_map(|m| &m.tool_calls)
        .map(|call| (call.id.as_str(), call.name()))
        .collect();
    messages
        .iter()
        .map(|message| match message.role {
            Role::System => format!(
                "<details class=\"system\"><summary>system prompt ({} bytes)</summary><pre>{}</pre></details>\n",
                message.text().len(),
                xml(message.text())
            ),
            Role::User => said("user", message.text()),
            Role::Assistant => assistant(message),
            Role::Tool => {
                let call = message.tool_call_id.as_deref().unwrap_or("");
                result(names.get(call).copied().unwrap_or("a tool"), message.text())
            }
        })
        .collect()
}

fn said(who: &str, text: &str) -> String {
    format!(
        "<div class=\"msg\"><div class=\"who\">{}</div><pre>{}</pre></div>\n",
        xml(who),
        xml(text)
    )
}

fn assistant(message: &Message) -> String {
    let mut out = String::from("<div class=\"msg\"><div class=\"who\">assistant</div>");
    if !message.text().trim().is_empty() {
        out.push_str(&format!("<pre>{}</pre>", xml(message.text())));
    }
    for call in &message.tool_calls {
        out.push_str(&format!(
            "<div class=\"call\" data-tool=\"{name}\"><div class=\"who\">calls {name}</div>{args}</div>",
            name = xml(call.name()),
            args = arguments(&call.function.arguments)
        ));
    }
    out.push_str("</div>\n");
    out
}

/// A call's arguments as a list of names and values, strings shown as
/// the text they hold; arguments that are not a JSON object as they came.
fn arguments(text: &str) -> String {
    let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(text) else {
        return format!("<pre>{}</pre>", xml(text));
    };
    let rows: String = fields
        .iter()
        .map(|(name, value)| {
            format!(
                "<dt>{}</dt><dd><pre>{}</pre></dd>",
                xml(name),
                xml(&plain(value))
            )
        })
        .collect();
    format!("<dl class=\"args\">{rows}</dl>")
}

/// A tool's result: its `content` (and `error`) unwrapped from the JSON
/// the model was sent.
fn result(tool: &str, text: &str) -> String {
    let parsed: Option<serde_json::Map<String, Value>> = serde_json::from_str(text).ok();
    let (success, body) = match &parsed {
        Some(fields) => {
            let success = fields
                .get("success")
                .and_then(Value::as_bool)
                .unwrap_or(true);
            let mut body = fields.get("content").map(plain).unwrap_or_default();
            if let Some(error) = fields.get("error").map(plain) {
                if !body.is_empty() {
                    body.push('\n');
                }
                body.push_str(&error);
            }
            (success, body)
        }
        None => (true, text.to_string()),
    };
    let class = if success { "result" } else { "result error" };
    let verdict = if success { "" } else { " (failed)" };
    format!(
        "<div class=\"msg {class}\"><div class=\"who\">result of {}{verdict}</div><pre>{}</pre></div>\n",
        xml(tool),
        xml(&body)
    )
}

/// A JSON value as a person reads it: a string as its text, anything
/// else as compact JSON.
fn plain(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::messages;
    use crate::chat::{Message, ToolCall};

    #[test]
    fn calls_and_results_read_as_text() {
        let mut call = Message::assistant("");
        call.tool_calls = vec![ToolCall::new(
            "c1",
            "write_file",
            r#"{"path": "a.txt", "content": "line one\nline \"two\""}"#,
        )];
        let page = messages(&[
            Message::system("you are an agent"),
            call,
            Message::tool_result(
                "c1",
                r#"{"success":false,"content":"","error":"disk full"}"#,
            ),
        ]);
        assert!(
            page.contains("<summary>system prompt (16 bytes)</summary>"),
            "{page}"
        );
        assert!(page.contains("calls write_file"));
        assert!(
            page.contains("line one\nline &quot;two&quot;"),
            "decoded: {page}"
        );
        assert!(page.contains("result of write_file (failed)") && page.contains("disk full"));
        assert!(!page.contains("\\n"), "no escaped newlines: {page}");
    }
}
