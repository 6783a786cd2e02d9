//! Replanning, read off the run's record: whether the rest should be
//! replanned (a step failed while under half the steps have completed,
//! with replans left), and what the Planner is told: the failures, and
//! the completed steps with their results; and the Planner's answers,
//! the first plan's and each replan's, recorded by the owner.

use std::path::Path;

use super::events::RunEvent;
use super::owner::Owner;
use super::planner::{PlanFailure, Planner, ReplanContext};
use crate::plan::{Plan, levels, render_tree};
use crate::record::{RunRecord, StepRecord, StepStatus};

impl Owner<'_> {
    /// Why the rest should be replanned now, if it should.
    pub(super) fn replan_reason(&self) -> Option<String> {
        let (run, team) = (self.record(), &self.context().team);
        let (max_replans, accept) = (team.max_replans, team.accept_unreviewed);
        if run.replans >= max_replans {
            return None;
        }
        let active: Vec<&StepRecord> = run
            .steps
            .iter()
            .filter(|s| s.status != StepStatus::Replaced)
            .collect();
        let done = active.iter().filter(|s| s.is_done(accept)).count();
        (done * 2 < active.len())
            .then(|| format!("only {done} of {} steps completed", active.len()))
    }

    /// Says that the plan of `round`, saved as `file`, is ready, with
    /// `update` to the record, and shows it.
    pub(super) fn plan_ready(
        &mut self,
        round: u32,
        plan: &Plan,
        file: &Path,
        update: impl FnOnce(&mut RunRecord),
    ) {
        let event = RunEvent::PlanReady {
            round,
            summary: plan.summary.clone(),
            steps: plan.steps.len(),
            levels: levels(plan).len(),
            file: self.context().show(file),
        };
        self.emit(event, update);
        crate::console::progress(&render_tree(plan, |_| None));
    }

    /// Says that the planner gave no plan in `round`, with `update` to
    /// the record; an answer that was no valid plan is saved for the user.
    pub(super) fn plan_failed(
        &mut self,
        round: u32,
        failure: PlanFailure,
        update: impl FnOnce(&mut RunRecord),
    ) {
        let event = match failure {
            PlanFailure::NoAnswer(reason) => RunEvent::PlannerFailed { round, reason },
            PlanFailure::Invalid { reason, answer } => {
                let name = match round {
                    0 => "invalid-plan.txt".to_string(),
                    round => format!("invalid-replan-{round}.txt"),
                };
                let ctx = self.context();
                let saved = ctx.show(&ctx.save_planner_answer(&name, &answer));
                RunEvent::PlanInvalid {
                    round,
                    reason,
                    saved,
                }
            }
        };
        self.emit(event, update);
    }

    /// Asks the Planner to plan the rest; the steps that did not complete
    /// make way for the new ones. An answer that is not a valid plan is
    /// saved, and the run goes on as if there had been no replan.
    pub(super) async fn replan(&mut self, planner: &mut Planner, reason: String) {
        let ctx = self.context();
        let accept = ctx.team.accept_unreviewed;
        let round = self.record().replans + 1;
        self.emit(RunEvent::Replanning { round, reason }, |run| {
            run.replans = round;
        });
        let run = self.record();
        let plan = run.live_plan();
        let context = ReplanContext {
            goal: &run.goal,
            plan: &plan,
            failed: &describe_failures(run),
            completed: &describe_completed(run, accept),
            taken: &run.steps.iter().map(|s| s.id.clone()).collect(),
            done: &run
                .steps
                .iter()
                .filter(|s| s.is_done(accept))
                .map(|s| s.id.clone())
                .collect(),
        };
        let answer = planner.replan(&context).await;
        match answer {
            Ok(plan) => {
                let file = ctx.run_dir.join(format!("replan-{round}.json"));
                if let Err(e) = super::save_json(&file, &plan).await {
                    crate::tell!("troupe: cannot save {}: {e}", file.display());
                }
                let replaced = replaced_by_replan(self.record(), accept);
                let event = RunEvent::StepsReplaced {
                    round,
                    steps: replaced.clone(),
                };
                self.emit(event, |run| {
                    for step in run.steps.iter_mut().filter(|s| replaced.contains(&s.id)) {
                        step.status = StepStatus::Replaced;
                        step.reason = Some(format!("replaced by replan {round}"));
                    }
                    run.steps
                        .extend(plan.steps.iter().map(|s| StepRecord::new(s, round)));
                });
                self.plan_ready(round, &plan, &file, |_| {});
            }
            Err(failure) => {
                self.plan_failed(round, failure, |_| {});
                let failed: Vec<String> = self
                    .record()
                    .steps
                    .iter()
                    .filter(|s| s.status.is_failure())
                    .map(|s| s.id.clone())
                    .collect();
                for id in failed {
                    self.skip_dependents(&id);
                }
            }
        }
    }
}

/// The steps a replan takes the place of: those that are not done.
fn replaced_by_replan(run: &RunRecord, accept: bool) -> Vec<String> {
    run.steps
        .iter()
        .filter(|s| s.status != StepStatus::Replaced && !s.is_done(accept))
        .map(|s| s.id.clone())
        .collect()
}

fn describe_failures(run: &RunRecord) -> String {
    let lines: Vec<String> = run
        .steps
        .iter()
        .filter(|s| s.status.is_failure())
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
        .filter(|s| s.is_done(accept))
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
