//! Human progress on stderr: one line per model turn and per tool call,
//! coloured only on a terminal and never when NO_COLOR is set.

use serde_json::Value;

use super::events::{AgentEvent, EventSink};
use crate::paint::Painter;
use crate::protocol::AgentStatus;
use crate::text::excerpt;

pub struct Progress {
    painter: Painter,
}

impl Progress {
    pub fn stderr() -> Self {
        Progress {
            painter: Painter::for_stderr(),
        }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        self.painter.paint(code, text)
    }

    /// The line for an event; `None` for the ones not worth a line (a tool
    /// that succeeded: its call already had one).
    fn line(&self, event: &AgentEvent<'_>) -> Option<String> {
        let line = match event {
            AgentEvent::Started { pid } => format!("started (pid {pid})"),
            AgentEvent::Stats { .. } | AgentEvent::ModelAsked { .. } => return None,
            AgentEvent::Sandbox { report } => {
                if report.fully_enforced() {
                    return None;
                }
                self.paint("33", &format!("sandbox: {}", report.note))
            }
            AgentEvent::ModelTurn {
                turn,
                tool_calls,
                usage,
                elapsed,
            } => {
                let calls = match tool_calls {
                    0 => "no tool call".to_string(),
                    n => crate::text::count(*n, "tool call"),
                };
                self.paint(
                    "2",
                    &format!(
                        "turn {turn}: {calls}, {} tokens, {:.1} s",
                        usage.total,
                        elapsed.as_secs_f64()
                    ),
                )
            }
            AgentEvent::ModelError { message } => {
                self.paint("31", &format!("model error: {message}"))
            }
            AgentEvent::ModelDelayed { delay } => self.paint("33", &delay.to_string()),
            AgentEvent::Compacted { step } => self.paint("33", &format!("context: {step}")),
            AgentEvent::ToolCall { name, arguments } => {
                format!("{} {}", self.paint("1", name), brief_arguments(arguments))
            }
            AgentEvent::ToolResult {
                name,
                success,
                summary,
            } => {
                if *success {
                    return None;
                }
                self.paint("31", &format!("  failed {name}: {summary}"))
            }
            AgentEvent::Stopping { reason } => self.paint("33", &format!("stopping: {reason}")),
            AgentEvent::Warning { message } => self.paint("33", &format!("warning: {message}")),
            AgentEvent::Ended {
                status,
                runtime,
                detail,
            } => {
                let colour = match status {
                    AgentStatus::Completed => "32",
                    _ => "31",
                };
                let text = format!("{status} in {:.1} s", runtime.as_secs_f64());
                let mut line = self.paint(colour, &text);
                if !detail.is_empty() {
                    line.push_str(&format!(": {}", excerpt(detail, 200)));
                }
                line
            }
        };
        Some(line)
    }
}

impl EventSink for Progress {
    fn event(&self, agent: &str, event: AgentEvent<'_>) {
        let Some(line) = self.line(&event) else {
            return;
        };
        let prefix = self.paint("36", &format!("agent {agent} |"));
        crate::tell!("{prefix} {line}");
    }
}

/// `key=value` pairs, each value cut short, so a call fits on a line.
fn brief_arguments(arguments: &Value) -> String {
    match arguments {
        Value::Object(map) => map
            .iter()
            .map(|(key, value)| {
                let shown = match value {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                format!("{key}={}", excerpt(&shown.replace('\n', "\\n"), 60))
            })
            .collect::<Vec<_>>()
            .join(" "),
        other => excerpt(&other.to_string(), 100),
    }
}
