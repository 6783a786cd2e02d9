//! The prompts, compiled in from `prompts/*.md` and overridable per run.
//!
//! Prompts are Markdown templates so that people who tune them need not
//! read Rust. `--prompts-dir DIR` replaces any of them by a file of the same
//! name in DIR; names missing there keep the built-in text. troupe reads
//! the directory once, as it starts, and hands its agents the text in
//! their task files: an agent that rewrites a prompt file meanwhile (the
//! directory may lie in its workspace) changes no prompt of the run.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

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
    /// Every prompt troupe knows.
    const ALL: [Prompt; 15] = [
        Prompt::Worker,
        Prompt::WorkerTask,
        Prompt::Reminder,
        Prompt::WrapUp,
        Prompt::Truncated,
        Prompt::Compact,
        Prompt::CompactTask,
        Prompt::Summary,
        Prompt::Reviewer,
        Prompt::ReviewerTask,
        Prompt::ReviewerWrapUp,
        Prompt::Planner,
        Prompt::Replan,
        Prompt::Step,
        Prompt::Review,
    ];

    /// The `{name}`s troupe fills in this prompt.
    fn placeholders(self) -> &'static [&'static str] {
        const OPENING: &[&str] = &[
            "agent_id",
            "summary",
            "task",
            "deliverables_dir",
            "timeout_seconds",
            "workspace",
            "system",
            "current_time",
        ];
        match self {
            Prompt::Worker | Prompt::WorkerTask | Prompt::Reviewer | Prompt::ReviewerTask => {
                OPENING
            }
            Prompt::Reminder | Prompt::Compact | Prompt::Planner => &[],
            Prompt::WrapUp | Prompt::ReviewerWrapUp => &["reason"],
            Prompt::Truncated => &["max_output_tokens"],
            Prompt::CompactTask => &["task", "history"],
            Prompt::Summary => &["summary"],
            Prompt::Replan => &["failed", "completed"],
            Prompt::Step => &["goal", "step_id", "description", "dependencies", "feedback"],
            Prompt::Review => &[
                "goal",
                "step_id",
                "description",
                "attempt",
                "success",
                "summary",
                "claims",
                "change",
            ],
        }
    }

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
}

/// The overrides of `--prompts-dir`, by file name, as they were when
/// troupe read them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Prompts(BTreeMap<String, String>);

impl Prompts {
    /// The overrides in `dir`, each read now. One that exists but cannot be
    /// read is an error rather than a silent fallback, and so are a `.md`
    /// file named as no prompt is and a `{name}` the prompt does not fill:
    /// a typo in a prompt never goes unnoticed.
    pub fn read(dir: Option<&Path>) -> std::io::Result<Prompts> {
        let mut found = BTreeMap::new();
        let Some(dir) = dir else {
            return Ok(Prompts(found));
        };
        let invalid = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
        for entry in std::fs::read_dir(dir)? {
            let name = entry?.file_name();
            let name = name.to_string_lossy();
            let known = Prompt::ALL.iter().any(|p| p.file_name() == name);
            if name.ends_with(".md") && !known {
                let names: Vec<&str> = Prompt::ALL.iter().map(|p| p.file_name()).collect();
                return Err(invalid(format!(
                    "{} is no prompt troupe knows; the prompts are {}",
                    dir.join(&*name).display(),
                    names.join(", ")
                )));
            }
        }
        for prompt in Prompt::ALL {
            let path = dir.join(prompt.file_name());
            match std::fs::read_to_string(&path) {
                Ok(text) => {
                    if let Some(unknown) = unfilled(&text, prompt.placeholders()) {
                        let filled: Vec<String> = prompt
                            .placeholders()
                            .iter()
                            .map(|n| format!("{{{n}}}"))
                            .collect();
                        return Err(invalid(format!(
                            "prompt {} has {{{unknown}}}, which troupe does not fill there; it fills {}",
                            path.display(),
                            match filled.is_empty() {
                                true => "nothing".to_string(),
                                false => filled.join(", "),
                            }
                        )));
                    }
                    found.insert(prompt.file_name().to_string(), text);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!("cannot read prompt {}: {e}", path.display()),
                    ));
                }
            }
        }
        Ok(Prompts(found))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The template of `prompt`: its override, else the built-in text.
    pub fn text(&self, prompt: Prompt) -> String {
        match self.0.get(prompt.file_name()) {
            Some(text) => text.clone(),
            None => prompt.builtin().to_string(),
        }
    }
}

/// The first `{name}` of `text` (a name of lower-case letters, digits and
/// `_`: JSON examples in a prompt are not placeholders) that is not one of
/// `known`.
fn unfilled<'a>(text: &'a str, known: &[&str]) -> Option<&'a str> {
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        if let Some(close) = after.find('}') {
            let name = &after[..close];
            let is_name = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            if is_name && !known.contains(&name) {
                return Some(name);
            }
        }
        rest = after;
    }
    None
}

/// The template with its `{name}` placeholders filled in (see
/// `text::fill`), trailing white space trimmed.
pub fn render(template: &str, values: &[(&str, &str)]) -> String {
    crate::text::fill(template, values).trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::{Prompt, Prompts, render};

    #[test]
    fn every_built_in_prompt_uses_only_what_troupe_fills() {
        for prompt in Prompt::ALL {
            assert_eq!(
                super::unfilled(prompt.builtin(), prompt.placeholders()),
                None,
                "{}",
                prompt.file_name()
            );
        }
    }

    #[test]
    fn an_unknown_placeholder_or_file_name_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("worker.md"),
            "Do {task} by {current_time}. {\"json\": 1}",
        )
        .unwrap();
        let read = Prompts::read(Some(dir.path())).unwrap();
        assert!(read.text(Prompt::Worker).contains("{task}"));
        std::fs::write(dir.path().join("step.md"), "Step {tsk}").unwrap();
        let error = Prompts::read(Some(dir.path())).unwrap_err().to_string();
        assert!(
            error.contains(
                "step.md has {tsk}, which troupe does not fill there; it fills {goal}, {step_id}"
            ),
            "{error}"
        );
        std::fs::remove_file(dir.path().join("step.md")).unwrap();
        std::fs::write(dir.path().join("reviewr.md"), "x").unwrap();
        let error = Prompts::read(Some(dir.path())).unwrap_err().to_string();
        assert!(
            error.contains("reviewr.md is no prompt troupe knows; the prompts are worker.md"),
            "{error}"
        );
    }

    #[test]
    fn values_are_not_rendered_again() {
        let text = render("{a} and {b} {c}", &[("a", "{b}"), ("b", "x")]);
        assert_eq!(text, "{b} and x {c}");
    }
}
