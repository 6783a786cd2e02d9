//! Replanning: when a step fails while under half the steps have
//! completed, the Planner is given the failures and the completed steps'
//! results and plans the rest; the steps that did not complete are marked
//! `replaced` and the new ones join the run. An answer that is not a valid
//! plan is saved and the run goes on as if there had been no replan.

use std::collections::HashSet;

use super::context::RunContext;
use super::events::RunEvent;
use super::planner::Planner;
use super::record::{RunRecord, StepRecord, StepStatus};
use super::scheduler::{is_done, skip_dependents};

/// Why the rest should be replanned now, if it should: a failure while
/// under half the steps have completed, with replans left.
pub(super) fn replan_reason(ctx: &RunContext) -> Option<String> {
    let accept = ctx.team.accept_unreviewed;
    ctx.recorder
        .with(|run| {
            if run.replans >= ctx.team.max_replans {
                return None;
            }
            let active: Vec<&StepRecord> = run
                .steps
                .iter()
                .filter(|s| s.status != StepStatus::Replaced)
                .collect();
            let done = active.iter().filter(|s| is_done(s, accept)).count();
            (done * 2 < active.len())
                .then(|| format!("only {done} of {} steps completed", active.len()))
        })
        .flatten()
}

pub(super) async fn replan(ctx: &RunContext, planner: &mut Planner, reason: String) {
    let accept = ctx.team.accept_unreviewed;
    let Some((round, failed, completed, taken, done)) = ctx.recorder.with(|run| {
        let round = run.replans + 1;
        let failed = describe_failures(run);
        let completed = describe_completed(run, accept);
        let taken: HashSet<String> = run.steps.iter().map(|s| s.id.clone()).collect();
        let done: HashSet<String> = run
            .steps
            .iter()
            .filter(|s| is_done(s, accept))
            .map(|s| s.id.clone())
            .collect();
        (round, failed, completed, taken, done)
    }) else {
        return;
    };
    let event = RunEvent::Replanning { round, reason };
    ctx.recorder.emit(event, |run| run.replans = round);
    match planner.replan(&failed, &completed, &taken, &done).await {
        Ok(plan) => {
            let file = ctx.run_dir.join(format!("replan-{round}.json"));
            if let Err(e) = crate::fsutil::write_json_atomic(&file, &plan) {
                eprintln!("troupe: cannot save {}: {e}", file.display());
            }
            let replaced: Vec<String> = ctx
                .recorder
                .with(|run| {
                    run.steps
                        .iter()
                        .filter(|s| s.status != StepStatus::Replaced && !is_done(s, accept))
                        .map(|s| s.id.clone())
                        .collect()
                })
                .unwrap_or_default();
            let event = RunEvent::StepsReplaced {
                round,
                steps: replaced.clone(),
            };
            ctx.recorder.emit(event, |run| {
                for step in run.steps.iter_mut().filter(|s| replaced.contains(&s.id)) {
                    step.status = StepStatus::Replaced;
                    step.reason = Some(format!("replaced by replan {round}"));
                }
                run.steps
                    .extend(plan.steps.iter().map(|s| StepRecord::new(s, round)));
            });
            let levels = crate::supervisor::plan::levels(&plan).len();
            let event = RunEvent::PlanReady {
                round,
                summary: plan.summary.clone(),
                steps: plan.steps.len(),
                levels,
                file: ctx.show(&file),
            };
            ctx.recorder.emit(event, |_| {});
            eprint!("{}", crate::supervisor::plan::render_tree(&plan, |_| None));
        }
        Err(failure) => {
            let saved =
                ctx.save_planner_answer(&format!("invalid-replan-{round}.txt"), &failure.answer);
            let event = RunEvent::PlanInvalid {
                round,
                reason: failure.reason,
                saved: ctx.show(&saved),
            };
            ctx.recorder.emit(event, |_| {});
            let failed: Vec<String> = ctx
                .recorder
                .with(|run| {
                    run.steps
                        .iter()
                        .filter(|s| matches!(s.status, StepStatus::Failed | StepStatus::Unreviewed))
                        .map(|s| s.id.clone())
                        .collect()
                })
                .unwrap_or_default();
            for id in failed {
                skip_dependents(ctx, &id);
            }
        }
    }
}

fn describe_failures(run: &RunRecord) -> String {
    let lines: Vec<String> = run
        .steps
        .iter()
        .filter(|s| matches!(s.status, StepStatus::Failed | StepStatus::Unreviewed))
        .map(|s| {
            format!(
                "{} ({}) failed: {}",
                s.id,
                s.description.trim(),
                s.reason.as_deref().unwrap_or("")
            )
        })
        .collect();
    lines.join("; ")
}

fn describe_completed(run: &RunRecord, accept: bool) -> String {
    let lines: Vec<String> = run
        .steps
        .iter()
        .filter(|s| is_done(s, accept))
        .map(|s| {
            let mut line = format!("- {} ({})", s.id, s.description.trim());
            if let Some(report) = s.delivered() {
                line.push_str(&format!(": {}", report.summary.trim()));
                if !report.deliverables_files.is_empty() {
                    line.push_str(&format!(
                        " [files: {}]",
                        report.deliverables_files.join(", ")
                    ));
                }
            }
            line
        })
        .collect();
    if lines.is_empty() {
        "(none)".to_string()
    } else {
        lines.join("\n")
    }
}
