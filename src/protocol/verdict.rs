//! A reviewer's answer, read strictly: only the JSON boolean `true` in
//! `approved` approves. An answer that is not a JSON object, an `approved`
//! that is missing or written as the string "true", and prose saying it
//! all looks fine are rejections that say why, so the worker is told
//! what the reviewer failed to say.
//!
//! It is part of the contract between the binaries: the reviewer reads its
//! model's last answer this way and reports the verdict, and the parent,
//! which delivered that answer, reads it the same way and holds the
//! reviewer's report to it.

use serde_json::{Map, Value};

use super::VerdictReport;
use crate::text::{excerpt, first_json_object};

pub fn parse_verdict(text: &str) -> VerdictReport {
    let Some(object) = first_json_object(text) else {
        return invalid(format!(
            "the review is not a JSON verdict; the reviewer answered: {}",
            excerpt(text, 300)
        ));
    };
    let Ok(fields) = serde_json::from_str::<Map<String, Value>>(object) else {
        return invalid("the review is not a JSON verdict".to_string());
    };
    let mut issues = strings(fields.get("issues"));
    let approved = match fields.get("approved") {
        Some(Value::Bool(approved)) => *approved,
        Some(other) => {
            issues.insert(
                0,
                format!(
                    "the verdict's `approved` must be the JSON boolean true or false, not {other}"
                ),
            );
            false
        }
        None => {
            issues.insert(0, "the verdict has no `approved` field".to_string());
            false
        }
    };
    VerdictReport {
        approved,
        summary: fields
            .get("summary")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        issues,
        suggestions: strings(fields.get("suggestions")),
        retry: !matches!(fields.get("retry"), Some(Value::Bool(false))),
    }
}

/// The JSON Schema of a verdict, for endpoints that hold answers to one
/// (`response_format`); `parse_verdict` stays the judge either way.
pub fn verdict_schema() -> Value {
    let strings = serde_json::json!({"type": "array", "items": {"type": "string"}});
    serde_json::json!({
        "type": "object",
        "properties": {
            "approved": {"type": "boolean"},
            "summary": {"type": "string"},
            "issues": strings,
            "suggestions": strings,
            "retry": {"type": "boolean"}
        },
        "required": ["approved", "summary", "issues", "suggestions", "retry"],
        "additionalProperties": false
    })
}

fn invalid(issue: String) -> VerdictReport {
    VerdictReport {
        approved: false,
        summary: "The reviewer gave no valid verdict.".to_string(),
        issues: vec![issue],
        suggestions: Vec::new(),
        retry: true,
    }
}

/// A list of strings, with other items written as JSON; anything but a
/// list is taken as one item.
fn strings(value: Option<&Value>) -> Vec<String> {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match value {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.iter().map(text).collect(),
        Some(other) => vec![text(other)],
    }
}

#[cfg(test)]
mod tests {
    use super::parse_verdict;

    #[test]
    fn only_the_boolean_true_approves() {
        assert!(parse_verdict(r#"{"approved": true, "summary": "ok"}"#).approved);
        assert!(parse_verdict("```json\n{\"approved\": true}\n```").approved);
        assert!(!parse_verdict(r#"{"approved": "true"}"#).approved);
        assert!(!parse_verdict(r#"{"approved": 1}"#).approved);
        assert!(!parse_verdict("Everything passes, approved!").approved);
        assert!(!parse_verdict(r#"{"approved": tru"#).approved);
        let stop = parse_verdict(r#"{"approved": false, "retry": false, "issues": ["bad"]}"#);
        assert!(!stop.retry);
        assert_eq!(stop.issues, ["bad"]);
    }
}
