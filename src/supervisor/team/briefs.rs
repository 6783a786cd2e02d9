//! The task texts the parent writes for a step's agents: the worker's
//! (the step, what its direct dependencies delivered, the last review's
//! feedback) and the reviewer's (the step, the worker's report, the
//! parent's check of its claims).

use std::path::Path;

use super::claims::Claims;
use super::record::{AgentRecord, StepRecord};
use crate::prompts::{Prompt, render};
use crate::protocol::VerdictReport;

/// What a direct dependency delivered.
pub struct Delivered<'a> {
    pub step: &'a StepRecord,
    pub report: Option<&'a AgentRecord>,
}

pub fn worker_brief(
    prompts_dir: Option<&Path>,
    goal: &str,
    step: &StepRecord,
    dependencies: &[Delivered<'_>],
    feedback: Option<&VerdictReport>,
) -> std::io::Result<String> {
    let template = Prompt::Step.load(prompts_dir)?;
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
        Some(verdict) => describe_feedback(verdict),
    };
    Ok(render(
        &template,
        &[
            ("goal", goal),
            ("step_id", &step.id),
            ("description", &step.description),
            ("dependencies", &dependencies),
            ("feedback", &feedback),
        ],
    ))
}

pub fn review_brief(
    prompts_dir: Option<&Path>,
    goal: &str,
    step: &StepRecord,
    attempt: u32,
    worker: &AgentRecord,
    claims: &Claims,
) -> std::io::Result<String> {
    let template = Prompt::Review.load(prompts_dir)?;
    let success = claims.success_claimed.to_string();
    let summary = if worker.summary.trim().is_empty() {
        "(the worker gave no summary)".to_string()
    } else {
        worker.summary.clone()
    };
    Ok(render(
        &template,
        &[
            ("goal", goal),
            ("step_id", &step.id),
            ("description", &step.description),
            ("attempt", &attempt.to_string()),
            ("success", &success),
            ("summary", &summary),
            ("claims", &claims.describe()),
        ],
    ))
}

fn describe_dependency(dep: &Delivered<'_>) -> String {
    let mut text = format!("- {} ({})", dep.step.id, dep.step.description.trim());
    match dep.report {
        Some(report) => {
            text.push_str(&format!("\n  result: {}", report.summary.trim()));
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

fn describe_feedback(verdict: &VerdictReport) -> String {
    let mut text = String::from("The reviewer rejected your previous attempt.");
    if !verdict.summary.trim().is_empty() {
        text.push_str(&format!("\nReview: {}", verdict.summary.trim()));
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
