//! The task texts the parent writes for a step's agents: the worker's
//! (the step, what its direct dependencies delivered, the last review's
//! feedback) and the reviewer's (the step, the worker's report, the
//! parent's check of its claims).

use std::path::PathBuf;

use super::events::{SentBack, SentBackBy};
use crate::prompts::{Prompt, Prompts, render};
use crate::record::ChangeRecord;
use crate::record::Claims;
use crate::record::{AgentRecord, StepRecord};
use crate::run::isolation::{Carried, CheckoutView};

/// What a direct dependency delivered.
pub struct Delivered<'a> {
    pub step: &'a StepRecord,
    pub report: Option<&'a AgentRecord>,
    /// The run's workspace, which the report's directory is shown in.
    pub workspace: &'a std::path::Path,
}

/// `carried`: what the attempt starts with of the rejected attempt
/// before it.
pub fn worker_brief(
    prompts: &Prompts,
    goal: &str,
    step: &StepRecord,
    dependencies: &[Delivered<'_>],
    feedback: Option<&SentBack>,
    carried: &Carried,
) -> String {
    let template = prompts.text(Prompt::Step);
    let dependencies = if dependencies.is_empty() {
        "(none: this step depends on no other)".to_string()
    } else {
        dependencies
            .iter()
            .map(describe_dependency)
            .collect::<Vec<_>>()
            .join("\n")
    };
    let feedback = match feedback {
        None => "(none: this is the first attempt)".to_string(),
        Some(sent_back) => describe_feedback(sent_back, carried),
    };
    render(
        &template,
        &[
            ("goal", goal),
            ("step_id", &step.id),
            ("description", &step.description),
            ("dependencies", &dependencies),
            ("feedback", &feedback),
        ],
    )
}

/// The most of an attempt's diff put in the reviewer's brief; the rest
/// it reads from the file.
const DIFF_IN_BRIEF: u64 = 12_000;

/// The start of an attempt's diff, for the reviewer's brief.
pub struct DiffHead {
    /// The file that holds all of it.
    pub path: PathBuf,
    /// Whole lines only.
    pub text: String,
    /// The size of the whole diff, when the file holds more than `text`.
    pub cut: Option<u64>,
}

impl DiffHead {
    /// The head of the diff in `path`, read off the thread that serves
    /// the agents (a diff may be large, the disk slow); `None` when it
    /// cannot be read.
    pub async fn read(path: PathBuf) -> Option<DiffHead> {
        tokio::task::spawn_blocking(move || {
            let (mut text, more) = crate::fsutil::read_head(&path, DIFF_IN_BRIEF).ok()?;
            let cut = match more {
                false => None,
                true => {
                    text.truncate(text.rfind('\n').map_or(0, |end| end + 1));
                    Some(std::fs::metadata(&path).map_or(0, |m| m.len()))
                }
            };
            Some(DiffHead { path, text, cut })
        })
        .await
        .ok()
        .flatten()
    }
}

/// `diff`: the head of the attempt's whole diff, when there is one.
pub fn review_brief(
    prompts: &Prompts,
    goal: &str,
    step: &StepRecord,
    review: &Review<'_>,
    diff: Option<&DiffHead>,
) -> String {
    let template = prompts.text(Prompt::Review);
    let (attempt, worker, claims) = (review.attempt, review.worker, review.claims);
    let success = claims.success_claimed.to_string();
    let mut summary = if worker.summary.trim().is_empty() {
        "(the worker gave no summary)".to_string()
    } else {
        worker.summary.clone()
    };
    // Checked against the step's output_schema before the review began.
    if let (Some(_), Some(result)) = (&step.output_schema, &worker.result) {
        summary.push_str(&format!(
            "\n\nThe step's result (it matches the step's output_schema; judge whether it is right):\n{}",
            pretty(result)
        ));
    }
    render(
        &template,
        &[
            ("goal", goal),
            ("step_id", &step.id),
            ("description", &step.description),
            ("attempt", &attempt.to_string()),
            ("success", &success),
            ("summary", &summary),
            ("claims", &claims.describe()),
            ("change", &describe_change(review.change, diff)),
        ],
    )
}

/// The attempt's change for the reviewer: its stat and its diff (cut,
/// the rest in its file), or why there is none.
fn describe_change(change: Option<&ChangeRecord>, diff: Option<&DiffHead>) -> String {
    let Some(change) = change else {
        return "(this run's workers share the workspace: there is no separate change to show; check the files themselves)".to_string();
    };
    let refused = match change.refused.is_empty() {
        true => String::new(),
        false => format!(
            "troupe will not land this change, whatever you answer:\n- {}\n\n",
            change.refused.join("\n- ")
        ),
    };
    if change.commit.is_none() {
        return match refused.is_empty() {
            true => {
                "The attempt changed nothing: its checkout is exactly the step's base.".to_string()
            }
            false => format!("{refused}troupe did not read the checkout into a change."),
        };
    }
    let base: String = change.base.chars().take(12).collect();
    let mut text = format!(
        "{refused}Against the step's base ({base}); you are reading the attempt's checkout, the whole tree as it would land.\n{}",
        change.stat.trim_end()
    );
    if let Some(diff) = diff {
        text.push_str(&format!("\n\n{}", diff.text.trim_end()));
        if let Some(total) = diff.cut {
            text.push_str(&format!(
                "\n(the diff is cut here: these are its first {} of {total} bytes; all of it is in {})",
                diff.text.len(),
                diff.path.display()
            ));
        }
    }
    text
}

/// The most of a dependency's typed result a brief carries; the rest the
/// worker reads from the dependency's `result.json`.
pub const RESULT_IN_BRIEF: usize = 16 * 1024;

/// Where a dependency's whole typed result is, for a brief that carries
/// only the first `RESULT_IN_BRIEF` bytes of it: its worker's sealed
/// result (`report.dir` is shown relative to `workspace`), which the
/// dependent may read (`Step::worker`).
pub fn result_file(workspace: &std::path::Path, report: &AgentRecord) -> PathBuf {
    workspace
        .join(&report.dir)
        .join(crate::protocol::SUBAGENT_DIR)
        .join("result.json")
}

/// Whether `result` is cut in a dependent's brief.
pub fn cut_in_brief(result: &serde_json::Value) -> bool {
    compact(result).len() > RESULT_IN_BRIEF
}

fn describe_dependency(dep: &Delivered<'_>) -> String {
    let mut text = format!("- {} ({})", dep.step.id, dep.step.description.trim());
    match dep.report {
        Some(report) => {
            text.push_str(&format!("\n  result: {}", report.summary.trim()));
            if let Some(result) = &dep.step.result {
                let json = compact(result);
                match json.len() > RESULT_IN_BRIEF {
                    false => text.push_str(&format!("\n  typed result (JSON): {json}")),
                    true => text.push_str(&format!(
                        "\n  typed result (JSON), its first {RESULT_IN_BRIEF} of {} bytes: {}\n  (cut here; all of it is the `result` field of {})",
                        json.len(),
                        crate::text::excerpt(&json, RESULT_IN_BRIEF),
                        result_file(dep.workspace, report).display()
                    )),
                }
            }
            if !report.deliverables_files.is_empty() {
                text.push_str(&format!(
                    "\n  files: {}",
                    report.deliverables_files.join(", ")
                ));
            }
        }
        None => text.push_str("\n  result: (no report)"),
    }
    text
}

/// A result for a reader: indented JSON.
fn pretty(value: &serde_json::Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// A result on one line, as a dependent's brief lists it.
fn compact(value: &serde_json::Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// The first of `paths`, and how many more.
fn named_paths(paths: &[String]) -> String {
    const NAMED: usize = 20;
    let mut text = paths
        .iter()
        .take(NAMED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if paths.len() > NAMED {
        text.push_str(&format!(" and {} more", paths.len() - NAMED));
    }
    text
}

fn describe_feedback(sent_back: &SentBack, carried: &Carried) -> String {
    let verdict = &sent_back.verdict;
    let (opening, why) = match sent_back.by {
        SentBackBy::Reviewer => ("The reviewer rejected your previous attempt.", "Review"),
        SentBackBy::Schema => (
            "troupe sent your previous attempt back before its review.",
            "Why",
        ),
        SentBackBy::Landing => (
            "Your previous attempt was accepted, but troupe could not land its change.",
            "Why",
        ),
    };
    let mut text = String::from(opening);
    match carried {
        Carried::InPlace => {}
        Carried::Kept(paths) => text.push_str(&format!(
            " Its changes are in your workspace, on the project as it stands now ({}): fix what the review names rather than starting over.",
            named_paths(paths)
        )),
        Carried::SetAside => text.push_str(
            " Its changes were set aside: you start again from the project as it stands now, so make every change of this step anew.",
        ),
    }
    if !verdict.summary.trim().is_empty() {
        text.push_str(&format!("\n{why}: {}", verdict.summary.trim()));
    }
    if !verdict.issues.is_empty() {
        text.push_str("\nIssues:");
        for issue in &verdict.issues {
            text.push_str(&format!("\n- {issue}"));
        }
    }
    if !verdict.suggestions.is_empty() {
        text.push_str("\nSuggestions:");
        for suggestion in &verdict.suggestions {
            text.push_str(&format!("\n- {suggestion}"));
        }
    }
    text.push_str("\nFix these, then finish again.");
    text
}

/// What the reviewer of an attempt is given.
pub(super) struct Review<'a> {
    pub attempt: u32,
    pub worker: &'a AgentRecord,
    pub claims: &'a Claims,
    /// With isolation: the attempt's change, and its checkout to read.
    pub change: Option<&'a ChangeRecord>,
    pub checkout: Option<CheckoutView>,
}
