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

/// How the workers of `planted_prompts` meet the prompts directory.
#[derive(Clone, Copy, PartialEq)]
enum Prompted {
    /// Sandboxed in the workspace itself.
    Shared,
    /// Sandboxed, each attempt in a checkout of its own.
    Isolated,
    /// Not sandboxed at all.
    Unconfined,
}

/// A run whose prompts lie in its workspace (`--prompts-dir`), whose
/// first worker rewrites two of them.
fn planted_prompts(as_nobody: bool, mode: Prompted) {
    let sandbox = Sandbox::new();
    let prompts = sandbox.ws().join("prompts");
    std::fs::create_dir_all(&prompts).unwrap();
    std::fs::write(prompts.join("step.md"), "STEP-ORIGINAL {description}\n").unwrap();
    std::fs::write(prompts.join("reviewer.md"), "REVIEWER-ORIGINAL\n").unwrap();
    let plant = "echo PLANTED > prompts/reviewer.md; echo PLANTED > prompts/step.md; true";
    let mut steps = vec![step("a", &[]), step("b", &["a"])];
    if mode == Prompted::Shared {
        let mut c = step("c", &[]);
        c["powers"] = json!({"write": ["prompts"]});
        steps.push(c);
    }
    let rules = vec![
        planner(json!(steps)),
        json!({"role": "worker", "step": "a", "attempt": 1, "reply": running(&[plant])}),
        worker_rule("a", worker_writes("a", 0)),
        worker_rule("b", worker_writes("b", 0)),
        worker_rule("c", worker_writes("c", 0)),
        approving_reviewer(),
    ];
    let dir = prompts.display().to_string();
    let mut extra = vec!["--prompts-dir", &dir, "--max-replans", "0"];
    extra.extend(match mode {
        Prompted::Shared => ["--isolation", "shared"],
        Prompted::Isolated => ["--isolation", "worktree"],
        Prompted::Unconfined => ["--sandbox", "off"],
    });
    let mut command = team_command(&sandbox, rules, &extra);
    if as_nobody {
        command = unprivileged(&sandbox, command);
    }
    let team = finish_team_run(&sandbox, command);
    // Whatever the worker could write, this run's agents got the text
    // troupe read as it started.
    let b_task = std::fs::read_to_string(team.dir.join("b/worker-1/.subagent/task.json")).unwrap();
    assert!(b_task.contains("STEP-ORIGINAL do b"), "{b_task}");
    let review =
        std::fs::read_to_string(team.dir.join("b/review-1/.subagent/conversations.json")).unwrap();
    assert!(review.contains("REVIEWER-ORIGINAL"), "{review}");
    for text in [&b_task, &review] {
        assert!(!text.contains("PLANTED"), "{text}");
    }
    let kept = |name: &str| std::fs::read_to_string(prompts.join(name)).unwrap();
    match mode {
        // Nothing held the worker: the planted text is there for the next
        // run, as any file it wrote is.
        Prompted::Unconfined => {
            assert_eq!(team.run.code, 0, "stderr:\n{}", team.run.stderr);
            assert_eq!(kept("step.md"), "PLANTED\n");
        }
        // Its checkout's prompts were the worker's to change, but troupe
        // lands no change to them: its next attempt ran.
        Prompted::Isolated => {
            assert_eq!(team.run.code, 0, "stderr:\n{}", team.run.stderr);
            let refused = team.events_of("change_refused");
            assert_eq!(refused.len(), 1, "{refused:?}");
            assert!(
                refused[0]["reasons"]
                    .to_string()
                    .contains("prompts/reviewer.md is troupe's (its prompts or settings"),
                "{refused:?}"
            );
            assert_eq!(kept("step.md"), "STEP-ORIGINAL {description}\n");
        }
        // The directory is read-only to every agent, and a step given it
        // to write is not run.
        Prompted::Shared => {
            assert_eq!(kept("step.md"), "STEP-ORIGINAL {description}\n");
            assert_eq!(kept("reviewer.md"), "REVIEWER-ORIGINAL\n");
            assert_eq!(team.run.code, 1, "stderr:\n{}", team.run.stderr);
            let c = team.step("c");
            assert_eq!(c["status"], "failed", "{c}");
            assert!(
                c.to_string().contains("which is read-only to every agent"),
                "{c}"
            );
        }
    }
}

// Fourth trial, weakness 5: with --prompts-dir in the workspace, a shared
// worker rewrote reviewer.md and step.md, and the run's reviewers took the
// planted text as their system prompt.
#[test]
fn a_worker_cannot_plant_the_prompts_of_its_run() {
    planted_prompts(false, Prompted::Shared);
}

#[test]
fn a_worker_cannot_plant_the_prompts_of_its_run_as_an_ordinary_user() {
    planted_prompts(true, Prompted::Shared);
}

#[test]
fn a_change_to_the_prompts_is_not_landed() {
    planted_prompts(false, Prompted::Isolated);
}

#[test]
fn prompts_are_read_once_as_the_run_starts() {
    planted_prompts(false, Prompted::Unconfined);
}
