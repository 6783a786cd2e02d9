//! The scheduler, driven in-process through the same wiring as `troupe
//! run` (`wiring::run`): a scripted `AgentRunner` stands in for the child
//! processes and tokio's paused clock for time, so retries, reviews,
//! skips, replans, budgets, the deadline, Ctrl-C and resume are tested
//! without a process or a real sleep.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::*;
use crate::llm::scripted::ScriptedModel;
use crate::plan::{Plan, Step};
use crate::protocol::{AgentRole, AgentStats, AgentStatus, VerdictReport};
use crate::record::IsolationMode;
use crate::record::{AgentRecord, StepStatus};
use crate::signal::{Interruption, StopCause};
use crate::supervisor::SpawnError;
use crate::supervisor::interrupt::EXIT_INTERRUPTED;

/// How one scripted agent ends, and after how long.
#[derive(Clone)]
struct Act {
    after: Duration,
    end: End,
}

#[derive(Clone)]
enum End {
    Worked,
    WorkerFailed,
    Verdict { approved: bool, retry: bool },
    Crashed,
    CannotStart,
}

/// How long a stopped agent takes to end, as a real one takes up to
/// `--kill-grace` after its `cancel`.
const GRACE: Duration = Duration::from_secs(2);

fn after(secs: u64, end: End) -> Act {
    Act {
        after: Duration::from_secs(secs),
        end,
    }
}

/// What the runner was asked, and when on the run's clock.
#[derive(Clone, Debug)]
struct Asked {
    request: AgentRequest,
    at: Duration,
}

/// Agents scripted by step, role and attempt; the `n`-th reviewer of an
/// attempt takes the `n`-th act of its list. Unscripted workers work and
/// unscripted reviewers approve, at once.
struct ScriptedRunner {
    acts: HashMap<(String, AgentRole, u32), Vec<Act>>,
    started: Instant,
    stop: crate::signal::StopSignal,
    asked: Arc<Mutex<Vec<Asked>>>,
}

impl AgentRunner for ScriptedRunner {
    fn run(&self, request: AgentRequest) -> RunFuture<'_> {
        Box::pin(async move {
            let key = (request.step.clone(), request.role, request.attempt);
            let nth = {
                let mut asked = self.asked.lock().unwrap();
                let nth = asked
                    .iter()
                    .filter(|a| (a.request.step.clone(), a.request.role, a.request.attempt) == key)
                    .count();
                asked.push(Asked {
                    request: request.clone(),
                    at: self.started.elapsed(),
                });
                nth
            };
            let act = self
                .acts
                .get(&key)
                .and_then(|acts| acts.get(nth).or(acts.last()))
                .cloned()
                .unwrap_or(match request.role {
                    AgentRole::Reviewer => after(
                        0,
                        End::Verdict {
                            approved: true,
                            retry: true,
                        },
                    ),
                    _ => after(0, End::Worked),
                });
            let dir = request.dir.display().to_string();
            if let End::CannotStart = act.end {
                return Err(SpawnError::Prepare {
                    path: request.dir,
                    source: std::io::Error::other("the disk is full"),
                });
            }
            let stopped = tokio::select! {
                () = tokio::time::sleep(act.after) => false,
                _ = self.stop.stopped() => true,
            };
            if stopped {
                tokio::time::sleep(GRACE).await;
            }
            let mut record = AgentRecord::running(dir);
            record.stats = AgentStats {
                runtime_seconds: act.after.as_secs_f64(),
                ..AgentStats::default()
            };
            if stopped {
                record.status = AgentStatus::Terminated;
                record.error = Some("stopped".to_string());
                return Ok(record);
            }
            match act.end {
                End::Worked => {
                    record.status = AgentStatus::Completed;
                    record.summary = format!("did {}", request.step);
                    record.success_claimed = true;
                    record.changing_calls = 1;
                }
                End::WorkerFailed => {
                    record.status = AgentStatus::Failed;
                    record.summary = "could not do it".to_string();
                }
                End::Verdict { approved, retry } => {
                    record.status = AgentStatus::Completed;
                    record.verdict = Some(VerdictReport {
                        approved,
                        summary: "checked".to_string(),
                        issues: vec![format!("issue with {}", request.step)],
                        suggestions: Vec::new(),
                        retry,
                    });
                }
                End::Crashed => {
                    record.status = AgentStatus::Error;
                    record.error = Some("the reviewer crashed".to_string());
                }
                End::CannotStart => {}
            }
            Ok(record)
        })
    }
}

struct Outcome {
    code: u8,
    record: RunRecord,
    events: Vec<Value>,
    asked: Vec<Asked>,
    _dir: tempfile::TempDir,
}

impl Outcome {
    fn step(&self, id: &str) -> &crate::record::StepRecord {
        self.record.step(id).unwrap()
    }

    fn events_of(&self, kind: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["type"] == kind).collect()
    }

    /// The run ended as `status` (run.json's word) with `code`, and the
    /// exit code, run.json and `run_finished` agree.
    fn assert_ended(&self, status: &str, code: u8) {
        assert_eq!(self.code, code, "{:?}", self.events);
        assert_eq!(serde_json::to_value(self.record.status).unwrap(), status);
        let last = self.events.last().unwrap();
        assert_eq!(last["type"], "run_finished");
        assert_eq!(
            (&last["status"], &last["exit_code"]),
            (&json!(status), &json!(code))
        );
    }

    fn asked_of(&self, step: &str, role: AgentRole) -> Vec<&Asked> {
        self.asked
            .iter()
            .filter(|a| a.request.step == step && a.request.role == role)
            .collect()
    }
}

fn plan(steps: &[(&str, &[&str])]) -> Plan {
    Plan {
        summary: "a test plan".to_string(),
        steps: steps
            .iter()
            .map(|(id, deps)| Step {
                id: id.to_string(),
                description: format!("do {id}"),
                kind: "FILE_WRITE".to_string(),
                dependencies: deps.iter().map(|d| d.to_string()).collect(),
                output_schema: None,
                powers: None,
            })
            .collect(),
    }
}

pub(super) fn settings() -> TeamSettings {
    TeamSettings {
        apply: false,
        max_parallel: 5,
        max_retries: 2,
        max_replans: 0,
        accept_unreviewed: false,
        max_agents: 200,
        max_tokens: None,
        max_cost: None,
        deadline: None,
        verbose: false,
        isolation: IsolationMode::Shared,
    }
}

type Acts = Vec<((&'static str, AgentRole, u32), Vec<Act>)>;

/// A run of `plan` on scripted agents, with the planner's replies for any
/// replans; `resume` picks up this record instead of planning.
async fn run(
    opening: Result<Plan, RunRecord>,
    team: TeamSettings,
    acts: Acts,
    planner_replies: Vec<Value>,
) -> Outcome {
    run_stopped(opening, team, acts, planner_replies, Vec::new()).await
}

/// `run`, its stop triggered after each of so many seconds for its cause,
/// as the interrupt watch triggers it on Ctrl-C.
async fn run_stopped(
    opening: Result<Plan, RunRecord>,
    team: TeamSettings,
    acts: Acts,
    planner_replies: Vec<Value>,
    stops: Vec<(u64, StopCause)>,
) -> Outcome {
    run_prepared(opening, team, acts, planner_replies, stops, |_| {}).await
}

/// `run_stopped`, with `prepare` done to the run directory before the
/// run opens its records.
async fn run_prepared(
    opening: Result<Plan, RunRecord>,
    team: TeamSettings,
    acts: Acts,
    planner_replies: Vec<Value>,
    stops: Vec<(u64, StopCause)>,
    prepare: impl FnOnce(&std::path::Path),
) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().canonicalize().unwrap();
    let script = workspace.join("script.json");
    let replies = match planner_replies.is_empty() {
        true => vec![json!({"content": "no plan"})],
        false => planner_replies,
    };
    let rules = json!({"rules": [{"role": "planner", "reply": replies}]});
    std::fs::write(&script, rules.to_string()).unwrap();
    let model: Arc<dyn crate::llm::ChatModel> = Arc::new(ScriptedModel::load(&script).unwrap());
    let (record, opening) = match opening {
        Ok(plan) => {
            let run_dir = workspace.join("sub_agent_results/run_test");
            let record = fresh_record(&workspace, &team, "run_test", "the goal", &run_dir);
            let goal = "the goal".to_string();
            (
                record,
                Opening::Plan {
                    goal,
                    plan: Some(plan),
                },
            )
        }
        Err(record) => {
            let again = record
                .steps
                .iter()
                .filter(|s| !s.is_settled(team.accept_unreviewed))
                .map(|s| s.id.clone())
                .collect();
            (record, Opening::Resume { again })
        }
    };
    let run_dir = workspace.join("sub_agent_results/run_test");
    std::fs::create_dir_all(&run_dir).unwrap();
    prepare(&run_dir);
    let stop = crate::signal::StopSignal::default();
    for (secs, cause) in stops {
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(secs)).await;
            stop.trigger(cause);
        });
    }
    let asked = Arc::new(Mutex::new(Vec::new()));
    let acts = acts
        .into_iter()
        .map(|((step, role, attempt), acts)| ((step.to_string(), role, attempt), acts))
        .collect();
    let runner = |agents: wiring::Agents| -> Box<dyn AgentRunner> {
        Box::new(ScriptedRunner {
            acts,
            started: Instant::now(),
            stop: agents.stop,
            asked: Arc::clone(&asked),
        })
    };
    let role = RoleModel {
        model: Arc::clone(&model),
        context_window: None,
        max_output_tokens: None,
    };
    let models = TeamModels {
        planner: model,
        workers: role.clone(),
        reviewers: role,
    };
    let wiring = wiring::Wiring {
        workspace,
        run_dir: run_dir.clone(),
        record,
        team,
        prompts: crate::prompts::Prompts::default(),
        max_file_size: None,
        guarded: Vec::new(),
        json: false,
        stop,
        interrupts: Interrupts::new(),
        isolation: None,
        checkouts: crate::run::isolation::Checkouts::full("in-process tests run no sandbox"),
        ceiling: None,
        span: Default::default(),
    };
    let code = wiring::run(wiring, models, runner, opening).await.unwrap();
    let record = crate::fsutil::read_json(&run_dir.join("run.json"), "run.json").unwrap();
    let events = std::fs::read_to_string(run_dir.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let asked = asked.lock().unwrap().clone();
    Outcome {
        code,
        record,
        events,
        asked,
        _dir: dir,
    }
}

const W: AgentRole = AgentRole::Worker;
const R: AgentRole = AgentRole::Reviewer;

fn verdict(approved: bool, retry: bool) -> End {
    End::Verdict { approved, retry }
}

#[tokio::test(start_paused = true)]
async fn a_rejection_sends_the_worker_back_with_the_feedback() {
    let acts = vec![(("a", R, 1), vec![after(1, verdict(false, true))])];
    let out = run(Ok(plan(&[("a", &[])])), settings(), acts, vec![]).await;
    assert_eq!(out.code, 0);
    let a = out.step("a");
    assert_eq!(a.status, StepStatus::Completed);
    assert_eq!(a.attempts.len(), 2);
    let workers = out.asked_of("a", W);
    assert!(
        workers[1].request.brief.contains("issue with a"),
        "{}",
        workers[1].request.brief
    );
    assert!(workers[1].request.dir.ends_with("a/worker-2"));
    assert_eq!(out.events_of("step_retry").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn retry_false_fails_at_once_and_retries_run_out() {
    let acts = vec![
        (("a", R, 1), vec![after(0, verdict(false, false))]),
        (("b", R, 1), vec![after(0, verdict(false, true))]),
        (("b", R, 2), vec![after(0, verdict(false, true))]),
    ];
    let mut team = settings();
    team.max_retries = 1;
    let out = run(Ok(plan(&[("a", &[]), ("b", &[])])), team, acts, vec![]).await;
    assert_eq!(out.code, EXIT_FAILED);
    let a = out.step("a");
    assert_eq!((a.status, a.attempts.len()), (StepStatus::Failed, 1));
    assert!(
        a.reason
            .as_deref()
            .unwrap()
            .contains("advised against another")
    );
    let b = out.step("b");
    assert_eq!((b.status, b.attempts.len()), (StepStatus::Failed, 2));
    assert!(
        b.reason
            .as_deref()
            .unwrap()
            .contains("rejected 2 times (--max-retries 1)"),
        "{:?}",
        b.reason
    );
}

#[tokio::test(start_paused = true)]
async fn a_review_that_fails_twice_is_unreviewed_and_counts_only_when_accepted() {
    let acts = || vec![(("a", R, 1), vec![after(1, End::Crashed)])];
    let out = run(Ok(plan(&[("a", &[])])), settings(), acts(), vec![]).await;
    assert_eq!(out.code, EXIT_FAILED);
    assert_eq!(out.step("a").status, StepStatus::Unreviewed);
    assert_eq!(out.events_of("review_failed").len(), 2);
    assert_eq!(out.asked_of("a", R).len(), 2, "tried once more");
    assert!(
        out.asked_of("a", R)[1]
            .request
            .dir
            .ends_with("a/review-1-2")
    );

    let mut team = settings();
    team.accept_unreviewed = true;
    let out = run(Ok(plan(&[("a", &[])])), team, acts(), vec![]).await;
    assert_eq!(out.code, 0);
}

// Regression: a reviewer that could not start (an I/O error in troupe)
// failed the step, where a review that fails as a system is tried again.
#[tokio::test(start_paused = true)]
async fn a_reviewer_that_cannot_start_is_a_review_failure_tried_again() {
    let acts = vec![(
        ("a", R, 1),
        vec![after(0, End::CannotStart), after(0, verdict(true, true))],
    )];
    let out = run(Ok(plan(&[("a", &[])])), settings(), acts, vec![]).await;
    assert_eq!(out.code, 0);
    assert_eq!(out.step("a").status, StepStatus::Completed);
    let failed = out.events_of("review_failed");
    assert_eq!(failed.len(), 1);
    assert!(
        failed[0]["reason"]
            .as_str()
            .unwrap()
            .contains("the disk is full")
    );
    let first = &out.step("a").attempts[0].reviews[0];
    assert_eq!(first.status, AgentStatus::Error);
}

#[tokio::test(start_paused = true)]
async fn a_failure_skips_its_dependents_and_independent_steps_go_on() {
    let acts = vec![(("a", W, 1), vec![after(1, End::WorkerFailed)])];
    let steps = plan(&[("a", &[]), ("b", &["a"]), ("c", &["b"]), ("d", &[])]);
    let out = run(Ok(steps), settings(), acts, vec![]).await;
    assert_eq!(out.code, EXIT_FAILED);
    assert_eq!(out.step("a").status, StepStatus::Failed);
    for skipped in ["b", "c"] {
        assert_eq!(out.step(skipped).status, StepStatus::Skipped);
        assert!(
            out.step(skipped)
                .reason
                .as_deref()
                .unwrap()
                .contains("did not complete")
        );
    }
    assert_eq!(out.step("d").status, StepStatus::Completed);
    assert!(out.asked_of("b", W).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_step_starts_the_moment_its_dependencies_are_done() {
    let acts = vec![
        (("a", W, 1), vec![after(10, End::Worked)]),
        (("b", W, 1), vec![after(1, End::Worked)]),
        (("c", W, 1), vec![after(30, End::Worked)]),
    ];
    let steps = plan(&[("a", &[]), ("b", &["a"]), ("c", &[])]);
    let out = run(Ok(steps), settings(), acts, vec![]).await;
    assert_eq!(out.code, 0);
    let b = out.asked_of("b", W)[0].at;
    assert_eq!(
        b,
        Duration::from_secs(10),
        "b started when a was approved, not when c ended"
    );
    let c = out.asked_of("c", W)[0].at;
    assert_eq!(c, Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn parallel_slots_are_respected() {
    let acts = vec![
        (("a", W, 1), vec![after(5, End::Worked)]),
        (("b", W, 1), vec![after(5, End::Worked)]),
    ];
    let mut team = settings();
    team.max_parallel = 1;
    let out = run(Ok(plan(&[("a", &[]), ("b", &[])])), team, acts, vec![]).await;
    assert_eq!(out.code, 0);
    assert_eq!(out.asked_of("b", W)[0].at, Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn the_budget_stops_new_agents_and_says_why() {
    let mut team = settings();
    team.max_agents = 2;
    team.max_parallel = 1;
    let out = run(Ok(plan(&[("a", &[]), ("b", &[])])), team, vec![], vec![]).await;
    out.assert_ended("limit_reached", EXIT_FAILED);
    assert!(
        out.record
            .reason
            .as_deref()
            .unwrap()
            .contains("--max-agents")
    );
    assert_eq!(out.step("a").status, StepStatus::Completed);
    let b = out.step("b");
    assert_eq!(b.status, StepStatus::Skipped);
    assert!(
        b.reason.as_deref().unwrap().contains("--max-agents"),
        "{:?}",
        b.reason
    );
    let limits = out.events_of("limit_reached");
    assert_eq!(limits[0]["limit"], "budget");
    assert_eq!(out.record.totals.agents, 2);
}

#[tokio::test(start_paused = true)]
async fn the_deadline_stops_what_runs_and_exits_124() {
    let acts = vec![(("a", W, 1), vec![after(3600, End::Worked)])];
    let mut team = settings();
    team.deadline = Some(Duration::from_secs(5));
    let out = run(Ok(plan(&[("a", &[]), ("b", &["a"])])), team, acts, vec![]).await;
    out.assert_ended("deadline_exceeded", EXIT_DEADLINE);
    assert_eq!(out.record.status, RunStatus::DeadlineExceeded);
    assert_eq!(out.step("a").status, StepStatus::Failed);
    assert_eq!(out.step("b").status, StepStatus::Skipped);
    assert_eq!(out.events_of("limit_reached")[0]["limit"], "deadline");
}

#[tokio::test(start_paused = true)]
async fn a_budget_spent_by_the_last_agent_leaves_the_run_completed() {
    let mut team = settings();
    team.max_agents = 2;
    let out = run(Ok(plan(&[("a", &[])])), team, vec![], vec![]).await;
    out.assert_ended("completed", 0);
}

#[tokio::test(start_paused = true)]
async fn ctrl_c_stops_what_runs_and_exits_130() {
    let acts = vec![(("a", W, 1), vec![after(3600, End::Worked)])];
    let steps = plan(&[("a", &[]), ("b", &["a"])]);
    let stops = vec![(5, StopCause::Interrupted(Interruption::Sigint))];
    let out = run_stopped(Ok(steps), settings(), acts, vec![], stops).await;
    out.assert_ended("interrupted", EXIT_INTERRUPTED);
    assert_eq!(out.step("a").status, StepStatus::Interrupted);
    assert!(out.asked_of("b", W).is_empty());
    assert_eq!(
        out.events_of("interrupted")[0]["reason"],
        "interrupted by SIGINT"
    );
    assert_eq!(out.events_of("step_interrupted").len(), 1);
    assert!(out.events_of("limit_reached").is_empty());
}

// Regression: Ctrl-C during the grace period of a run that its deadline
// had stopped turned it into `interrupted` (exit 130, the step cut short
// `interrupted`, the rest left pending), though its reason and its
// `limit_reached` said the deadline. The first cause wins.
#[tokio::test(start_paused = true)]
async fn ctrl_c_after_the_deadline_leaves_the_run_the_deadlines() {
    let acts = vec![(("a", W, 1), vec![after(3600, End::Worked)])];
    let mut team = settings();
    team.deadline = Some(Duration::from_secs(5));
    let steps = plan(&[("a", &[]), ("b", &["a"])]);
    let stops = vec![(6, StopCause::Interrupted(Interruption::Sigint))];
    let out = run_stopped(Ok(steps), team, acts, vec![], stops).await;
    out.assert_ended("deadline_exceeded", EXIT_DEADLINE);
    assert_eq!(out.step("a").status, StepStatus::Failed);
    assert_eq!(out.step("b").status, StepStatus::Skipped);
    assert!(out.events_of("interrupted").is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_deadline_after_ctrl_c_leaves_the_run_interrupted() {
    let acts = vec![(("a", W, 1), vec![after(3600, End::Worked)])];
    let mut team = settings();
    team.deadline = Some(Duration::from_secs(6));
    let stops = vec![(5, StopCause::Interrupted(Interruption::Sigint))];
    let out = run_stopped(Ok(plan(&[("a", &[])])), team, acts, vec![], stops).await;
    out.assert_ended("interrupted", EXIT_INTERRUPTED);
    assert_eq!(out.step("a").status, StepStatus::Interrupted);
    assert!(out.events_of("limit_reached").is_empty());
}

#[tokio::test(start_paused = true)]
async fn under_half_completed_the_rest_is_replanned() {
    let acts = vec![(("a", W, 1), vec![after(1, End::WorkerFailed)])];
    let steps = plan(&[("a", &[]), ("b", &["a"])]);
    let replan = json!({"summary": "again", "steps": [
        {"id": "a2", "description": "do a differently", "type": "FILE_WRITE", "dependencies": []}
    ]});
    let mut team = settings();
    team.max_replans = 1;
    let out = run(
        Ok(steps),
        team,
        acts,
        vec![json!({"content": replan.to_string()})],
    )
    .await;
    assert_eq!(out.code, 0, "{:?}", out.events);
    assert_eq!(out.record.replans, 1);
    assert_eq!(out.step("a").status, StepStatus::Replaced);
    assert_eq!(out.step("b").status, StepStatus::Replaced);
    assert_eq!(out.step("a2").status, StepStatus::Completed);
    assert_eq!(out.step("a2").round, 1);
    assert_eq!(
        out.events_of("steps_replaced")[0]["steps"],
        json!(["a", "b"])
    );
}

#[tokio::test(start_paused = true)]
async fn a_resumed_run_runs_only_what_did_not_complete() {
    let first = run(
        Ok(plan(&[("a", &[]), ("b", &[])])),
        settings(),
        vec![(("b", R, 1), vec![after(0, verdict(false, false))])],
        vec![],
    )
    .await;
    assert_eq!(first.step("b").status, StepStatus::Failed);
    let mut record = first.record.clone();
    for step in &mut record.steps {
        if !step.is_settled(false) {
            step.status = StepStatus::Pending;
        }
    }
    let out = run(Err(record), settings(), vec![], vec![]).await;
    assert_eq!(out.code, 0);
    assert!(out.asked_of("a", W).is_empty(), "a completed before");
    let again = out.asked_of("b", W);
    assert_eq!(again.len(), 1);
    assert_eq!(
        again[0].request.attempt, 2,
        "numbered after the first session's"
    );
    assert!(
        again[0].request.brief.contains("issue with b"),
        "the last rejection is the feedback"
    );
    assert_eq!(out.step("b").attempts.len(), 2);
}

// A run whose records could not all be written said nothing of it at its
// end: run.json said completed, and troupe exited 0.
#[tokio::test(start_paused = true)]
async fn a_run_whose_records_could_not_be_written_ends_failed_saying_why() {
    let out = run_prepared(
        Ok(plan(&[("a", &[])])),
        settings(),
        vec![(("a", W, 1), vec![after(2, End::Worked)])],
        vec![],
        vec![],
        |run_dir| {
            // A rename cannot put run.json where a directory is: every
            // write of it fails, the first before any agent starts, until
            // the directory is gone.
            let blocked = run_dir.join("run.json");
            std::fs::create_dir(&blocked).unwrap();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                std::fs::remove_dir(&blocked).unwrap();
            });
        },
    )
    .await;
    out.assert_ended("failed", EXIT_FAILED);
    assert_eq!(out.step("a").status, StepStatus::Completed);
    let reason = out.record.reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with("the run's records could not all be written (")
            && reason.contains("the first: run.json: Is a directory"),
        "{reason}"
    );
}
