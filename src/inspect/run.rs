//! A run as text: its plan with every step's status, and per step the
//! attempts with their workers' reports and the reviewers' verdicts.

use super::conversation::Render;
use super::seen::SeenRun;
use crate::plan::render_tree;
use crate::record::ChangeRecord;
use crate::record::{AgentRecord, ApplyState, RunRecord, RunStatus, StepRecord};
use crate::text::{count, excerpt};

pub fn run_text(seen: &SeenRun, render: &Render) -> String {
    let run = &seen.record;
    let t = &run.totals;
    let mut out = format!(
        "{} {} · {} · {}\n",
        render.painter.paint("1", "run"),
        render.painter.paint("1", &run.run_id),
        render.status(&seen.state()),
        run.goal
    );
    out.push_str(&format!(
        "{}: {} completed, {} failed, {} skipped, {} unreviewed · {} · {} · {:.1} s · {}\n",
        count(t.steps as u64, "step"),
        t.completed,
        t.failed,
        t.skipped,
        t.unreviewed,
        count(t.agents, "agent"),
        t.token_usage.spent(),
        t.runtime_seconds,
        count(run.replans, "replan")
    ));
    if let Some(reason) = &run.reason {
        out.push_str(&format!("{reason}\n"));
    }
    if run.status == RunStatus::LimitReached {
        out.push_str(&format!(
            "`{}` continues it, with a higher limit to keep one\n",
            run.resume_command()
        ));
    }
    if let Some(trace) = &run.trace_id {
        out.push_str(&format!("trace {trace}\n"));
    }
    if let Some(note) = seen.died_note() {
        out.push_str(&format!("{note}\n"));
    }
    if let Some(apply) = apply_note(run) {
        out.push_str(&format!("{apply}\n"));
    }
    out.push('\n');
    out.push_str(&render_tree(&run.live_plan(), |id| {
        run.step(id).map(|s| s.status.as_str().to_string())
    }));
    for step in &run.steps {
        out.push('\n');
        out.push_str(&step_summary(step, render));
    }
    out
}

/// Where the run's result stands to the workspace, for a run in
/// checkouts that applies it; what to run when it is not there.
pub fn apply_note(run: &RunRecord) -> Option<String> {
    let apply = run.apply.as_ref()?;
    let branch = run.isolation.as_ref().map_or("", |i| i.branch.as_str());
    let resume = format!("troupe run --resume {}", run.run_id);
    Some(match apply.state {
        ApplyState::Applied => {
            let mut said = format!(
                "applied to the workspace: {} written ({} new), {} removed",
                count(apply.written.len() as u64, "path"),
                apply.added.len(),
                apply.removed.len()
            );
            if !apply.merged.is_empty() {
                said.push_str(&format!(", {} merged", apply.merged.len()));
            }
            if !apply.conflicted.is_empty() {
                said.push_str(&format!(
                    ", conflict markers in {}",
                    apply.conflicted.join(", ")
                ));
            }
            said
        }
        ApplyState::Pending if run.status == RunStatus::Completed => format!(
            "not applied yet: the result is branch {branch}; {resume} brings it into the workspace"
        ),
        ApplyState::Pending => {
            format!("the result goes into the workspace once the run completes (branch {branch})")
        }
        ApplyState::Refused => format!(
            "not applied: {}; {resume} applies it once that is dealt with",
            apply.reason.as_deref().unwrap_or("refused")
        ),
    })
}

fn step_summary(step: &StepRecord, render: &Render) -> String {
    let mut out = format!(
        "{} {} ({}{}, {})\n",
        render.painter.paint("1", &step.id),
        render.status(&step.status),
        count(step.attempts.len() as u64, "attempt"),
        step.duration_seconds
            .map(|d| format!(", {d:.1} s"))
            .unwrap_or_default(),
        step.stats.token_usage.spent()
    );
    if let Some(reason) = &step.reason {
        out.push_str(&format!("  {}\n", excerpt(reason, 200)));
    }
    for attempt in &step.attempts {
        if let Some(worker) = &attempt.worker {
            out.push_str(&format!(
                "  attempt {}: worker {}: {}\n",
                attempt.attempt,
                worker.status,
                excerpt(report_of(worker), 120)
            ));
        }
        for review in &attempt.reviews {
            out.push_str(&format!("    review: {}\n", verdict_line(review)));
        }
    }
    out
}

/// One step in full: every attempt with its directory, files, the claims
/// check, and every review's issues and suggestions.
pub fn step_text(step: &StepRecord, render: &Render) -> String {
    let mut out = format!(
        "{} {} · {} [{}]\n{}\n",
        render.painter.paint("1", "step"),
        render.painter.paint("1", &step.id),
        render.status(&step.status),
        step.kind,
        step.description
    );
    if !step.dependencies.is_empty() {
        out.push_str(&format!("after: {}\n", step.dependencies.join(", ")));
    }
    if let Some(reason) = &step.reason {
        out.push_str(&format!("{reason}\n"));
    }
    out.push_str(&format!(
        "{} · {} · {:.1} s\n",
        count(step.stats.agents, "agent"),
        count(step.stats.token_usage.total, "token"),
        step.stats.runtime_seconds
    ));
    for attempt in &step.attempts {
        out.push_str(&format!("\nattempt {}\n", attempt.attempt));
        for agent in &attempt.cut_short {
            out.push_str(&format!(
                "  cut short by a stop, then done again: {} in {}\n",
                agent.status, agent.dir
            ));
        }
        if let Some(worker) = &attempt.worker {
            out.push_str(&format!("  worker {} in {}\n", worker.status, worker.dir));
            out.push_str(&format!("    {}\n", report_of(worker)));
            if !worker.deliverables_files.is_empty() {
                out.push_str(&format!(
                    "    files: {}\n",
                    worker.deliverables_files.join(", ")
                ));
            }
        }
        if let Some(claims) = &attempt.claims {
            for line in claims.describe().lines() {
                out.push_str(&format!("  check: {line}\n"));
            }
        }
        if let Some(change) = &attempt.change {
            out.push_str(&change_text(change));
        }
        for review in &attempt.reviews {
            out.push_str(&format!(
                "  review {} in {}: {}\n",
                review.status,
                review.dir,
                verdict_line(review)
            ));
            if let Some(verdict) = &review.verdict {
                for issue in &verdict.issues {
                    out.push_str(&format!("    issue: {issue}\n"));
                }
                for suggestion in &verdict.suggestions {
                    out.push_str(&format!("    suggestion: {suggestion}\n"));
                }
            }
        }
    }
    out
}

/// An isolated attempt's change: its base, what it changed, where it
/// landed or why not.
fn change_text(change: &ChangeRecord) -> String {
    let short = |id: &str| id.chars().take(10).collect::<String>();
    let mut out = format!(
        "  checkout {} from {}\n",
        change.checkout,
        short(&change.base)
    );
    match &change.commit {
        None => out.push_str("    changed nothing\n"),
        Some(commit) => {
            out.push_str(&format!("    change {}", short(commit)));
            if let Some(diff) = &change.diff {
                out.push_str(&format!(" (diff in {diff})"));
            }
            out.push('\n');
            for line in change.stat.lines() {
                out.push_str(&format!("    {}\n", line.trim()));
            }
        }
    }
    if let Some(merge) = &change.merge {
        out.push_str(&format!("    landed: head {}\n", short(merge)));
    }
    if !change.conflicts.is_empty() {
        out.push_str(&format!(
            "    conflicted with what landed meanwhile: {}\n",
            change.conflicts.join(", ")
        ));
    }
    out
}

fn report_of(agent: &AgentRecord) -> &str {
    agent.error.as_deref().unwrap_or(&agent.summary)
}

fn verdict_line(review: &AgentRecord) -> String {
    match &review.verdict {
        Some(v) if v.approved => format!("approved: {}", excerpt(&v.summary, 100)),
        Some(v) => {
            let first = v.issues.first().unwrap_or(&v.summary);
            format!("rejected: {}", excerpt(first, 100))
        }
        None => format!("{}: {}", review.status, excerpt(report_of(review), 100)),
    }
}
