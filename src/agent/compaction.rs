//! What of a conversation the model is sent, so that it fits the model's
//! context.
//!
//! The transcript keeps every message; the model is sent a view of it.
//! When the endpoint refuses a request as too long, or troupe's estimate
//! passes the context window it was told, the view is compacted one step
//! at a time: first the long tool results of the older turns are sent as
//! their head and tail, then those of the last turn too, then the oldest
//! turns are replaced by a summary the model writes in one extra call (the
//! session makes it). Each step is recorded in the transcript.

use std::ops::Range;

use crate::chat::{Message, Role, ToolSpec, Usage};
use crate::text::head_and_tail;

/// Tool results longer than this (bytes) are shortened.
const LONG_RESULT: usize = 2_000;
/// What is kept of each end of a shortened tool result.
const KEPT_END: usize = 600;
/// What is kept of each end of a tool result in the text to summarise.
const KEPT_END_IN_HISTORY: usize = 300;
/// Bytes of history one summary call is given when the window is unknown.
const DEFAULT_HISTORY_BYTES: usize = 48_000;
/// Bytes per token until an answered request has measured them: low, so
/// the first estimate errs towards compacting early.
const FIRST_BYTES_PER_TOKEN: f64 = 3.0;
/// Bytes a message costs beyond its text (role, separators, ids).
const MESSAGE_OVERHEAD: usize = 16;

/// Why the tool results were shortened in the view.
const SHORTENED: &str =
    "to fit the model's context; call the tool again for that part if you need it";

/// How a compaction step changed what the model is sent.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// The long tool results before message `before` are sent as head and
    /// tail; `results` of them.
    Shortened { before: usize, results: usize },
    /// Messages `range` are to be summarised.
    Summarize(Range<usize>),
}

/// What the model is sent of a conversation.
pub struct ContextView {
    /// Long tool results before this message are sent shortened.
    shortened_before: usize,
    /// The oldest turns, replaced by a summary.
    summary: Option<Summary>,
    /// Tokens a request may take, room for the answer left out.
    budget: Option<u64>,
    /// Bytes per token, as the last answered request measured them.
    bytes_per_token: f64,
}

struct Summary {
    /// Messages from 2 (after the system prompt and the task) up to this
    /// one are summarised.
    upto: usize,
    /// The summary, rendered as the text appended to the task message.
    block: String,
}

impl ContextView {
    /// `context_window` and `max_output_tokens` are the model's, when
    /// known; the answer's room comes off the window, at most half of it.
    pub fn new(context_window: Option<u32>, max_output_tokens: Option<u32>) -> Self {
        let budget = context_window.map(|window| {
            let window = u64::from(window);
            let answer = max_output_tokens.map_or(window / 4, u64::from);
            window - answer.min(window / 2)
        });
        ContextView {
            shortened_before: 0,
            summary: None,
            budget,
            bytes_per_token: FIRST_BYTES_PER_TOKEN,
        }
    }

    /// What the model is sent of `messages`.
    pub fn view(&self, messages: &[Message]) -> Vec<Message> {
        let mut sent = Vec::with_capacity(messages.len());
        let mut start = 0;
        if let Some(summary) = &self.summary {
            sent.extend(messages.iter().take(2).cloned());
            if let Some(task) = sent.get_mut(1) {
                task.content = Some(format!("{}\n\n{}", task.text(), summary.block));
            }
            start = summary.upto;
        }
        for (index, message) in messages.iter().enumerate().skip(start) {
            if index < self.shortened_before && is_long_result(message) {
                sent.push(Message {
                    content: Some(head_and_tail(message.text(), KEPT_END, KEPT_END, SHORTENED)),
                    ..message.clone()
                });
            } else {
                sent.push(message.clone());
            }
        }
        sent
    }

    /// The estimated tokens of `sent` when they pass the budget.
    pub fn over_budget(&self, sent: &[Message], tools: &[ToolSpec]) -> Option<u64> {
        let estimate = self.estimate(sent, tools);
        self.budget.filter(|budget| estimate > *budget)?;
        Some(estimate)
    }

    pub fn estimate(&self, sent: &[Message], tools: &[ToolSpec]) -> u64 {
        (bytes_of(sent, tools) as f64 / self.bytes_per_token).ceil() as u64
    }

    /// Learns the bytes per token from the provider's count for `sent`.
    pub fn measured(&mut self, sent: &[Message], tools: &[ToolSpec], usage: Usage) {
        if usage.estimated || usage.prompt == 0 {
            return;
        }
        self.bytes_per_token = (bytes_of(sent, tools) as f64 / usage.prompt as f64).clamp(1.0, 8.0);
    }

    /// The next step that makes the view smaller, if any is left: the
    /// shortening steps take effect at once, a summary once it is written
    /// (`summarized`).
    pub fn next_step(&mut self, messages: &[Message]) -> Option<Step> {
        let from = self.summary.as_ref().map_or(2, |s| s.upto);
        let last_turn = messages.iter().rposition(|m| m.role == Role::Assistant);
        for before in [last_turn.unwrap_or(0), messages.len()] {
            let start = self.shortened_before.max(from);
            let results = messages
                .get(start..before)
                .unwrap_or_default()
                .iter()
                .filter(|m| is_long_result(m))
                .count();
            if results > 0 {
                self.shortened_before = before;
                return Some(Step::Shortened { before, results });
            }
        }
        self.oldest_turns(messages, from, last_turn?)
            .map(Step::Summarize)
    }

    /// From `from` to a turn's start about half way through the rest, so
    /// that at least the last turn stays as it is.
    fn oldest_turns(
        &self,
        messages: &[Message],
        from: usize,
        last_turn: usize,
    ) -> Option<Range<usize>> {
        let rest: usize = messages.get(from..)?.iter().map(bytes_of_message).sum();
        let mut seen = 0;
        let mut end = None;
        for (index, message) in messages.iter().enumerate().take(last_turn + 1).skip(from) {
            if index > from && message.role == Role::Assistant {
                end = Some(index);
                if seen * 2 >= rest {
                    break;
                }
            }
            seen += bytes_of_message(message);
        }
        end.map(|end| from..end)
    }

    /// The view from now on sends `block` instead of messages `range`.
    pub fn summarized(&mut self, range: Range<usize>, block: String) {
        self.summary = Some(Summary {
            upto: range.end,
            block,
        });
    }

    /// Messages `range` as text for the summary call, with the summary
    /// they continue, cut to what one call can take.
    pub fn history(&self, messages: &[Message], range: Range<usize>) -> String {
        let mut text = String::new();
        if let Some(summary) = &self.summary {
            text.push_str(&summary.block);
            text.push_str("\n\n");
        }
        for message in messages.get(range).unwrap_or_default() {
            text.push_str(&history_entry(message));
            text.push_str("\n\n");
        }
        let max = match self.budget {
            Some(budget) => (budget as f64 * self.bytes_per_token * 0.6) as usize,
            None => DEFAULT_HISTORY_BYTES,
        };
        head_and_tail(&text, max / 2, max / 2, "to fit one summary call")
    }
}

fn is_long_result(message: &Message) -> bool {
    message.role == Role::Tool && message.text().len() > LONG_RESULT
}

fn history_entry(message: &Message) -> String {
    let mut entry = match message.role {
        Role::System => "### system\n".to_string(),
        Role::User => "### user\n".to_string(),
        Role::Assistant => "### agent\n".to_string(),
        Role::Tool => "### tool result\n".to_string(),
    };
    let text = match message.role {
        Role::Tool => head_and_tail(
            message.text(),
            KEPT_END_IN_HISTORY,
            KEPT_END_IN_HISTORY,
            "here",
        ),
        _ => message.text().to_string(),
    };
    entry.push_str(text.trim());
    for call in &message.tool_calls {
        entry.push_str(&format!(
            "\ncalls {}({})",
            call.name(),
            crate::text::excerpt(&call.function.arguments, 400)
        ));
    }
    entry
}

fn bytes_of(sent: &[Message], tools: &[ToolSpec]) -> usize {
    let tools: usize = tools
        .iter()
        .map(|tool| tool.name.len() + tool.description.len() + tool.parameters.to_string().len())
        .sum();
    tools + sent.iter().map(bytes_of_message).sum::<usize>()
}

fn bytes_of_message(message: &Message) -> usize {
    let calls: usize = message
        .tool_calls
        .iter()
        .map(|call| call.id.len() + call.name().len() + call.function.arguments.len())
        .sum();
    MESSAGE_OVERHEAD
        + message.text().len()
        + message.reasoning_content.as_deref().map_or(0, str::len)
        + calls
}

#[cfg(test)]
mod tests {
    use super::{ContextView, Step};
    use crate::chat::{Message, ToolCall};

    fn turn(n: usize, result: &str) -> [Message; 2] {
        let id = format!("c{n}");
        let mut call = Message::assistant("");
        call.tool_calls = vec![ToolCall::new(&id, "read_file", "{}")];
        [call, Message::tool_result(id, result)]
    }

    fn conversation(results: &[&str]) -> Vec<Message> {
        let mut messages = vec![Message::system("sys"), Message::user("task")];
        for (n, result) in results.iter().enumerate() {
            messages.extend(turn(n, result));
        }
        messages
    }

    #[test]
    fn old_results_shorten_first_then_the_last_then_turns_are_summarised() {
        let long = "x".repeat(10_000);
        let messages = conversation(&[&long, &long, "short", &long]);
        let mut view = ContextView::new(None, None);
        assert_eq!(view.view(&messages), messages);

        assert_eq!(
            view.next_step(&messages),
            Some(Step::Shortened {
                before: 8,
                results: 2
            })
        );
        let sent = view.view(&messages);
        assert!(sent[3].text().len() < 2_000 && sent[3].text().contains("left out"));
        assert_eq!(sent[9].text(), long, "the last turn's result stays whole");

        assert_eq!(
            view.next_step(&messages),
            Some(Step::Shortened {
                before: 10,
                results: 1
            })
        );
        let Some(Step::Summarize(range)) = view.next_step(&messages) else {
            panic!("a summary comes last");
        };
        assert_eq!(range.start, 2);
        assert!(range.end > 2 && range.end <= 8 && messages[range.end].tool_calls.len() == 1);
        view.summarized(range.clone(), "SUMMARY".into());
        let sent = view.view(&messages);
        assert_eq!(sent.len(), 2 + messages.len() - range.end);
        assert!(sent[1].text().starts_with("task") && sent[1].text().ends_with("SUMMARY"));
    }

    #[test]
    fn the_budget_leaves_room_for_the_answer_and_learns_from_usage() {
        let messages = conversation(&["y".repeat(3_000).as_str()]);
        let mut view = ContextView::new(Some(2_000), Some(4_096));
        assert!(
            view.over_budget(&messages, &[]).is_some(),
            "1000 tokens left"
        );
        view.measured(&messages, &[], crate::chat::Usage::new(400, 10));
        assert_eq!(view.over_budget(&messages, &[]), None);
        assert_eq!(
            ContextView::new(None, None).over_budget(&messages, &[]),
            None
        );
    }

    #[test]
    fn a_single_turn_cannot_be_summarised() {
        let messages = conversation(&["short"]);
        let mut view = ContextView::new(None, None);
        assert_eq!(view.next_step(&messages), None);
    }
}
