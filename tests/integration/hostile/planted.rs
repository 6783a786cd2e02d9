//! Attack 1, planted directories: a worker's command puts a symlink where
//! troupe is about to make another agent's directory, hoping troupe writes
//! that agent's records, and builds its sandbox, outside the workspace.

use serde_json::json;

use super::{assert_untouched, outputs, outside, running, unprivileged};
use crate::common::{Sandbox, spawn};
use crate::team::{
    approving_reviewer, finish_team_run, planner, step, team_command, team_run, worker_rule,
    worker_writes,
};

/// The run directory, found from a worker's working directory: the
/// workspace, or its checkout (`<run>/<step>/checkout-1`).
const RUN_DIR: &str = r#"run=$(if [ -d sub_agent_results ]; then cd sub_agent_results/run_*; else cd ../..; fi && pwd)"#;

// Regression: troupe followed a planted `<run>/b/worker-1 -> outside`, wrote
// b's records there and confined b's worker to it.
#[test]
fn a_planted_agent_directory_is_refused_not_followed() {
    let sandbox = Sandbox::new();
    let outside = outside(&sandbox);
    let to = outside.display();
    let plant_worker = format!(r#"{RUN_DIR} && mkdir -p "$run/b" && ln -s {to} "$run/b/worker-1""#);
    let plant_reviews =
        format!(r#"{RUN_DIR} && ln -s {to} "$run/c/review-1" && ln -s {to} "$run/c/review-1-2""#);
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &["a"]), step("c", &[])])),
        worker_rule("a", running(&[&plant_worker])),
        worker_rule("b", worker_writes("b", 0)),
        worker_rule("c", running(&[&plant_reviews])),
        approving_reviewer(),
    ];
    let team = team_run(&sandbox, rules, &["--sandbox", "off", "--max-replans", "0"]);
    assert_eq!(team.run.code, 1, "stderr:\n{}", team.run.stderr);
    assert_eq!(team.step("a")["status"], "completed");
    let refused = |text: &str| {
        text.contains("refusing the agent directory")
            && text.contains("a symbolic link is already there")
    };
    let b = team.step("b");
    assert_eq!(b["status"], "failed", "{b}");
    assert!(refused(b["reason"].as_str().unwrap()), "{b}");
    // A reviewer that cannot start is a review that failed as a system:
    // tried once more, then the step is unreviewed, never approved.
    let c = team.step("c");
    assert_eq!(c["status"], "unreviewed", "{c}");
    let failures = team.events_of("review_failed");
    assert_eq!(failures.len(), 2, "{failures:?}");
    for failure in &failures {
        assert!(refused(failure["reason"].as_str().unwrap()), "{failure}");
    }
    assert!(
        team.events_of("review_approved")
            .iter()
            .all(|e| e["step"] == "a")
    );
    assert_untouched(&outside);
}

#[test]
fn spawn_refuses_a_planted_agent_directory() {
    let sandbox = Sandbox::new();
    let outside = outside(&sandbox);
    let results = sandbox.ws().join("sub_agent_results");
    std::fs::create_dir_all(&results).unwrap();
    std::os::unix::fs::symlink(&outside, results.join("agent_7")).unwrap();
    let model = sandbox
        .script(json!({"rules": [{"role": "worker", "reply": running(&["touch escaped"])}]}));
    let run = spawn(&sandbox, 7, "work", &model, &[]);
    assert_eq!(run.code, 1, "stderr:\n{}", run.stderr);
    assert!(
        run.stderr.contains("refusing the agent directory") && run.stderr.contains("symbolic link"),
        "{}",
        run.stderr
    );
    assert_untouched(&outside);
}

/// With the sandbox on, a worker cannot even plant: the results directory
/// is read-only to it, but for its own directory.
fn results_are_read_only_to_workers(as_nobody: bool) {
    if !crate::common::full_sandbox("results_are_read_only_to_workers") {
        return;
    }
    let sandbox = Sandbox::new();
    let outside = outside(&sandbox);
    let to = outside.display();
    let plant = format!(r#"{RUN_DIR} && mkdir -p "$run/b" && ln -s {to} "$run/b/worker-1""#);
    let tamper = format!(r#"{RUN_DIR} && echo '{{}}' > "$run/run.json""#);
    let own =
        "echo mine > report.txt && cd sub_agent_results/run_*/a/worker-1 && echo mine > own.txt";
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &["a"])])),
        worker_rule("a", running(&[&plant, &tamper, own])),
        worker_rule("b", worker_writes("b", 0)),
        approving_reviewer(),
    ];
    let command = team_command(
        &sandbox,
        rules,
        &["--sandbox", "required", "--max-replans", "0"],
    );
    let command = if as_nobody {
        unprivileged(&sandbox, command)
    } else {
        command
    };
    let team = finish_team_run(&sandbox, command);
    assert_eq!(team.run.code, 0, "stderr:\n{}", team.run.stderr);
    let worker =
        crate::common::read_json(&team.dir.join("a/worker-1/.subagent/conversations.json"));
    let out = outputs(&worker);
    for refused in &out[..2] {
        assert!(refused.contains("Read-only file system"), "{refused}");
    }
    assert!(!out[2].contains("exited with code"), "{}", out[2]);
    assert_eq!(
        std::fs::read_to_string(team.dir.join("a/worker-1/own.txt")).unwrap(),
        "mine\n",
        "the worker writes its own directory"
    );
    assert_eq!(team.step("b")["status"], "completed");
    assert_eq!(
        team.record()["totals"]["sandbox"]["results_read_only"],
        true
    );
    assert_untouched(&outside);
}

#[test]
fn the_results_directory_is_read_only_to_workers() {
    results_are_read_only_to_workers(false);
}

#[test]
fn the_results_directory_is_read_only_to_workers_as_an_ordinary_user() {
    results_are_read_only_to_workers(true);
}
