//! A transcript as text: who said what, the tool calls with their
//! arguments, what the tools answered, and the stats.

use serde_json::Value;

use super::{Shown, Tone};
use crate::chat::{Message, Role};
use crate::paint::Painter;
use crate::text::prefix;
use crate::transcript::Conversation;

/// Longest text shown of one message unless `full`.
const SHOWN: usize = 600;

pub struct Render {
    pub painter: Painter,
    /// Show every message whole.
    pub full: bool,
}

impl Render {
    pub fn header(&self, doc: &Conversation) -> String {
        let stats = &doc.stats;
        let ended = doc
            .completed_at
            .map(|at| crate::timefmt::format_time(&at))
            .unwrap_or_else(|| "-".to_string());
        let mut out = format!(
            "{} {} · {} · {}\n",
            self.painter.paint("1", "agent"),
            self.painter.paint("1", doc.agent_id.as_str()),
            self.status(&doc.status),
            doc.summary
        );
        out.push_str(&format!(
            "{} · {} to {} · {:.1} s · {} · {} read, {}, {}{}\n",
            doc.conversation_id,
            crate::timefmt::format_time(&doc.created_at),
            ended,
            stats.runtime_seconds,
            stats.token_usage.spent(),
            crate::text::count(stats.files_read, "file"),
            crate::text::count(stats.searches, "search"),
            crate::text::count(stats.commands, "command"),
            match stats.web_pages {
                0 => String::new(),
                pages => format!(", {}", crate::text::count(pages, "web page")),
            }
        ));
        if let Some(reason) = doc.stop_reason {
            out.push_str(&format!("stopped: {}\n", reason.describe()));
        }
        if let Some(error) = &doc.error {
            out.push_str(&format!(
                "{}\n",
                self.painter.paint("31", &format!("error: {error}"))
            ));
        }
        out
    }

    /// The messages from `from` on, with tool results named after their
    /// calls.
    pub fn messages(&self, messages: &[Message], from: usize) -> String {
        let mut out = String::new();
        for message in &messages[from.min(messages.len())..] {
            out.push_str(&self.message(message, messages));
        }
        out
    }

    fn message(&self, message: &Message, all: &[Message]) -> String {
        let mut out = String::new();
        match message.role {
            Role::Tool => {
                let call_id = message.tool_call_id.clone().unwrap_or_default();
                let name = all
                    .iter()
                    .flat_map(|m| &m.tool_calls)
                    .find(|c| c.id == call_id)
                    .map(|c| c.name().to_string())
                    .unwrap_or_else(|| "tool".to_string());
                let result: Value = serde_json::from_str(message.text()).unwrap_or(Value::Null);
                let (state, body) = match result.get("success").and_then(Value::as_bool) {
                    Some(true) => (self.painter.paint("32", "ok"), text_of(&result, "content")),
                    Some(false) => {
                        let error = text_of(&result, "error");
                        let content = text_of(&result, "content");
                        let body = if content.is_empty() {
                            error.clone()
                        } else {
                            format!("{error}\n{content}")
                        };
                        (self.painter.paint("31", "failed"), body)
                    }
                    None => (String::new(), message.text().to_string()),
                };
                out.push_str(&self.rule(&format!("tool {name} ({call_id}) {state}")));
                out.push_str(&self.cut(&body));
            }
            role => {
                let name = match role {
                    Role::System => "system",
                    Role::User => "user",
                    Role::Assistant => "assistant",
                    Role::Tool => "tool",
                };
                out.push_str(&self.rule(name));
                if let Some(reasoning) = message
                    .reasoning_content
                    .as_deref()
                    .filter(|r| !r.is_empty())
                {
                    out.push_str(
                        &self
                            .painter
                            .paint("2", &self.cut(&format!("(reasoning) {reasoning}"))),
                    );
                }
                if !message.text().is_empty() {
                    out.push_str(&self.cut(message.text()));
                }
                for call in &message.tool_calls {
                    let arguments = call.arguments_value();
                    let shown = if self.full {
                        serde_json::to_string_pretty(&arguments).unwrap_or_default()
                    } else {
                        crate::text::excerpt(&arguments.to_string(), 300)
                    };
                    out.push_str(&format!(
                        "  {} {} {}  ({})\n",
                        self.painter.paint("36", "->"),
                        self.painter
                            .paint("1", &crate::text::controls_written_out(call.name(), &[])),
                        shown,
                        call.id
                    ));
                }
            }
        }
        out
    }

    /// A status in its colour: green done, yellow under way, red not.
    pub fn status(&self, status: &dyn Shown) -> String {
        let code = match status.tone() {
            Tone::Done => "32",
            Tone::Underway => "33",
            Tone::Wrong => "31",
        };
        self.painter.paint(code, status.word())
    }

    fn rule(&self, title: &str) -> String {
        format!(
            "{}\n",
            self.painter.paint("1;34", &format!("── {title} ──"))
        )
    }

    /// A transcript's text, cut to `SHOWN` bytes unless `--full`, its
    /// control characters written out (a model's OSC 52 would set the
    /// clipboard of whoever reads it, piped or not).
    fn cut(&self, text: &str) -> String {
        let text = crate::text::controls_written_out(text, &['\n', '\t']);
        let text = text.trim_end();
        if self.full || text.len() <= SHOWN {
            return format!("{text}\n");
        }
        let kept = prefix(text, SHOWN);
        format!(
            "{kept}\n[... {} more bytes; --full shows all]\n",
            text.len() - kept.len()
        )
    }
}

fn text_of(value: &Value, key: &str) -> String {
    value
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}
