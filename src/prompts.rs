//! The prompts, compiled in from `prompts/*.md` and overridable per run.
//!
//! Prompts are Markdown templates so that people who tune them need not
//! read Rust. `--prompts-dir DIR` replaces any of them by a file of the same
//! name in DIR; names missing there keep the built-in text.

use std::path::Path;

/// A prompt troupe knows, by its file name in `prompts/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prompt {
    /// The worker's system prompt.
    Worker,
    /// The worker's first user message: the task itself.
    WorkerTask,
    /// Sent when the model stops without calling `finish_task`.
    Reminder,
    /// Sent when the loop must end early and the model should report.
    WrapUp,
    /// Sent when the model's answer was cut at the output limit.
    Truncated,
    /// The system prompt of the call that summarises the oldest turns of
    /// a conversation grown too long for the model's context.
    Compact,
    /// That call's user message: the task and the turns to summarise.
    CompactTask,
    /// How the summary is shown to the agent, after its task.
    Summary,
    /// The reviewer's system prompt.
    Reviewer,
    /// The reviewer's first user message: what to review.
    ReviewerTask,
    /// Sent when the reviewer must give its verdict with tools off.
    ReviewerWrapUp,
    /// The planner's system prompt (parent).
    Planner,
    /// Asks the planner to plan the rest after failures (parent).
    Replan,
    /// A worker's task text for one step of a run (parent).
    Step,
    /// A reviewer's task text: the step and the worker's report (parent).
    Review,
}

impl Prompt {
    pub fn file_name(self) -> &'static str {
        match self {
            Prompt::Worker => "worker.md",
            Prompt::WorkerTask => "worker-task.md",
            Prompt::Reminder => "reminder.md",
            Prompt::WrapUp => "wrap-up.md",
            Prompt::Truncated => "truncated.md",
            Prompt::Compact => "compact.md",
            Prompt::CompactTask => "compact-task.md",
            Prompt::Summary => "summary.md",
            Prompt::Reviewer => "reviewer.md",
            Prompt::ReviewerTask => "reviewer-task.md",
            Prompt::ReviewerWrapUp => "reviewer-wrap-up.md",
            Prompt::Planner => "planner.md",
            Prompt::Replan => "replan.md",
            Prompt::Step => "step.md",
            Prompt::Review => "review.md",
        }
    }

    fn builtin(self) -> &'static str {
        match self {
            Prompt::Worker => include_str!("../prompts/worker.md"),
            Prompt::WorkerTask => include_str!("../prompts/worker-task.md"),
            Prompt::Reminder => include_str!("../prompts/reminder.md"),
            Prompt::WrapUp => include_str!("../prompts/wrap-up.md"),
            Prompt::Truncated => include_str!("../prompts/truncated.md"),
            Prompt::Compact => include_str!("../prompts/compact.md"),
            Prompt::CompactTask => include_str!("../prompts/compact-task.md"),
            Prompt::Summary => include_str!("../prompts/summary.md"),
            Prompt::Reviewer => include_str!("../prompts/reviewer.md"),
            Prompt::ReviewerTask => include_str!("../prompts/reviewer-task.md"),
            Prompt::ReviewerWrapUp => include_str!("../prompts/reviewer-wrap-up.md"),
            Prompt::Planner => include_str!("../prompts/planner.md"),
            Prompt::Replan => include_str!("../prompts/replan.md"),
            Prompt::Step => include_str!("../prompts/step.md"),
            Prompt::Review => include_str!("../prompts/review.md"),
        }
    }

    /// The template: the override in `dir` when there is one, else the
    /// built-in text. An override that exists but cannot be read is an
    /// error rather than a silent fallback, so a typo in a prompt never
    /// goes unnoticed.
    pub fn load(self, dir: Option<&Path>) -> std::io::Result<String> {
        if let Some(dir) = dir {
            let path = dir.join(self.file_name());
            match std::fs::read_to_string(&path) {
                Ok(text) => return Ok(text),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!("cannot read prompt {}: {e}", path.display()),
                    ));
                }
            }
        }
        Ok(self.builtin().to_string())
    }
}

/// The template with its `{name}` placeholders filled in (see
/// `text::fill`), trailing white space trimmed.
pub fn render(template: &str, values: &[(&str, &str)]) -> String {
    crate::text::fill(template, values).trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::render;

    #[test]
    fn values_are_not_rendered_again() {
        let text = render("{a} and {b} {c}", &[("a", "{b}"), ("b", "x")]);
        assert_eq!(text, "{b} and x {c}");
    }
}
