//! The seed's fake-model cases, and the reviewer's view of the real files.

use serde_json::{Value, json};

use super::{approving_reviewer, planner, step, team_run, verdict, worker_rule, worker_writes};
use crate::common::{Sandbox, messages_with_role, read_json, tool_results};

fn one_step(reviewer_replies: Vec<Value>) -> Vec<Value> {
    vec![
        planner(json!([step("step_1", &[])])),
        worker_rule("step_1", worker_writes("step_1", 0)),
        json!({"role": "reviewer", "reply": reviewer_replies}),
    ]
}

#[test]
fn approved_at_once() {
    let sandbox = Sandbox::new();
    let team = team_run(&sandbox, one_step(vec![verdict(json!(true), "none")]), &[]);
    assert_eq!(team.run.code, 0, "stderr:\n{}", team.run.stderr);
    let record = team.record();
    assert_eq!(record["status"], "completed");
    let step = team.step("step_1");
    assert_eq!(step["status"], "completed");
    assert_eq!(step["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(
        step["attempts"][0]["reviews"][0]["verdict"]["approved"],
        true
    );
    assert!(
        team.dir
            .join("step_1/worker-1/.subagent/conversations.json")
            .exists()
    );
    assert!(
        team.dir
            .join("step_1/review-1/.subagent/conversations.json")
            .exists()
    );
    assert!(
        team.run.stderr.contains("step_1  approved"),
        "{}",
        team.run.stderr
    );
    assert!(
        team.run
            .stderr
            .contains("run completed: 1 of 1 step completed"),
        "{}",
        team.run.stderr
    );
}

#[test]
fn rejected_then_approved_with_the_feedback_passed_on() {
    let sandbox = Sandbox::new();
    let rules = vec![
        planner(json!([step("step_1", &[])])),
        worker_rule("step_1", worker_writes("step_1", 0)),
        json!({"role": "reviewer", "attempt": 1, "reply": [verdict(json!(false), "the greeting is missing")]}),
        approving_reviewer(),
    ];
    let team = team_run(&sandbox, rules, &[]);
    assert_eq!(team.run.code, 0, "stderr:\n{}", team.run.stderr);
    let step = team.step("step_1");
    assert_eq!(step["status"], "completed");
    assert_eq!(step["attempts"].as_array().unwrap().len(), 2);
    let retry = read_json(
        &team
            .dir
            .join("step_1/worker-2/.subagent/conversations.json"),
    );
    let brief = retry["messages"][1]["content"].as_str().unwrap();
    assert!(
        brief.contains("the greeting is missing")
            && brief.contains("The reviewer rejected your previous attempt."),
        "the retry sees the issue, and who raised it: {brief}"
    );
    assert_eq!(team.events_of("step_retry").len(), 1);
    assert_eq!(team.events_of("step_retry")[0]["sent_back_by"], "reviewer");
    assert!(
        team.run
            .stderr
            .contains("rejected: the greeting is missing"),
        "{}",
        team.run.stderr
    );
}

#[test]
fn rejected_until_retries_run_out_fails_and_skips_dependents() {
    let sandbox = Sandbox::new();
    let rules = vec![
        planner(json!([
            step("step_1", &[]),
            step("step_2", &["step_1"]),
            step("step_3", &["step_2"]),
            step("step_4", &[])
        ])),
        worker_rule("step_1", worker_writes("step_1", 0)),
        worker_rule("step_4", worker_writes("step_4", 0)),
        json!({"role": "reviewer", "step": "step_1", "reply": [verdict(json!(false), "still wrong")]}),
        approving_reviewer(),
    ];
    let team = team_run(
        &sandbox,
        rules,
        &["--max-retries", "1", "--max-replans", "0"],
    );
    assert_eq!(team.run.code, 1, "stderr:\n{}", team.run.stderr);
    let failed = team.step("step_1");
    assert_eq!(failed["status"], "failed");
    assert_eq!(
        failed["attempts"].as_array().unwrap().len(),
        2,
        "one attempt and one retry"
    );
    assert!(failed["reason"].as_str().unwrap().contains("still wrong"));
    assert_eq!(team.step("step_2")["status"], "skipped");
    assert_eq!(
        team.step("step_3")["status"],
        "skipped",
        "transitive dependents are skipped"
    );
    assert!(
        team.step("step_3")["reason"]
            .as_str()
            .unwrap()
            .contains("step_2")
    );
    assert_eq!(
        team.step("step_4")["status"],
        "completed",
        "an independent step goes on"
    );
    assert_eq!(team.record()["status"], "failed");
    let finished = team.events_of("run_finished");
    assert_eq!(finished[0]["exit_code"], 1);
    assert_eq!(finished[0]["skipped"], 2);
}

#[test]
fn a_retry_false_verdict_stops_at_once() {
    let sandbox = Sandbox::new();
    let stop = json!({"content": json!({"approved": false, "summary": "impossible", "issues": ["cannot be done"], "retry": false}).to_string()});
    let team = team_run(&sandbox, one_step(vec![stop]), &["--max-replans", "0"]);
    assert_eq!(team.run.code, 1);
    let step = team.step("step_1");
    assert_eq!(step["attempts"].as_array().unwrap().len(), 1);
    assert!(
        step["reason"]
            .as_str()
            .unwrap()
            .contains("advised against another")
    );
}

#[test]
fn a_worker_error_fails_the_step() {
    let sandbox = Sandbox::new();
    let rules = vec![
        planner(json!([step("step_1", &[])])),
        worker_rule(
            "step_1",
            vec![json!({"error": "the model is down", "status": 503})],
        ),
        approving_reviewer(),
    ];
    let team = team_run(&sandbox, rules, &["--max-replans", "0"]);
    assert_eq!(team.run.code, 1);
    let step = team.step("step_1");
    assert_eq!(step["status"], "failed");
    let reason = step["reason"].as_str().unwrap();
    assert!(
        reason.contains("ended error") && reason.contains("the model is down"),
        "{reason}"
    );
    assert!(
        step["attempts"][0]["reviews"]
            .as_array()
            .unwrap()
            .is_empty(),
        "no review of a failed worker"
    );
}

#[test]
fn invalid_json_the_string_true_and_prose_are_all_rejections() {
    let answers = [
        json!({"content": "{\"approved\": tru"}),
        json!({"content": "{\"approved\": \"true\", \"summary\": \"fine\"}"}),
        json!({"content": "I looked at everything and it passes. Approved!"}),
    ];
    for answer in answers {
        let sandbox = Sandbox::new();
        let team = team_run(
            &sandbox,
            one_step(vec![answer.clone()]),
            &["--max-retries", "0", "--max-replans", "0"],
        );
        assert_eq!(
            team.run.code, 1,
            "{answer} must not approve; stderr:\n{}",
            team.run.stderr
        );
        let step = team.step("step_1");
        assert_eq!(step["status"], "failed");
        let review = &step["attempts"][0]["reviews"][0];
        assert_eq!(review["verdict"]["approved"], false, "{answer}");
        assert!(!review["verdict"]["issues"][0].as_str().unwrap().is_empty());
        assert_eq!(
            team.events_of("review_rejected").len(),
            1,
            "{answer} is a rejection, not a review failure"
        );
    }
}

#[test]
fn a_reviewer_that_crashes_leaves_the_step_unreviewed() {
    let sandbox = Sandbox::new();
    let real = env!("CARGO_BIN_EXE_troupe-agent");
    let wrapper = sandbox.executable(
        "crashing-reviewer",
        &format!(
            "if grep -q '\"role\": \"reviewer\"' \"$2\"; then kill -9 $$; fi\nexec {real} \"$@\""
        ),
    );
    let rules = one_step(vec![verdict(json!(true), "none")]);
    let agent_bin = wrapper.to_str().unwrap().to_string();
    let team = team_run(
        &sandbox,
        rules.clone(),
        &["--agent-bin", &agent_bin, "--max-replans", "0"],
    );
    assert_eq!(team.run.code, 1, "stderr:\n{}", team.run.stderr);
    let step = team.step("step_1");
    assert_eq!(
        step["status"], "unreviewed",
        "a crashed review is not an approval"
    );
    assert_eq!(
        step["attempts"][0]["reviews"].as_array().unwrap().len(),
        2,
        "the review is tried once more"
    );
    assert!(
        step["reason"].as_str().unwrap().contains("SIGKILL"),
        "{}",
        step["reason"]
    );
    assert_eq!(team.events_of("review_failed").len(), 2);

    let sandbox = Sandbox::new();
    let wrapper = sandbox.executable(
        "crashing-reviewer",
        &format!(
            "if grep -q '\"role\": \"reviewer\"' \"$2\"; then kill -9 $$; fi\nexec {real} \"$@\""
        ),
    );
    let agent_bin = wrapper.to_str().unwrap().to_string();
    let team = team_run(
        &sandbox,
        rules,
        &["--agent-bin", &agent_bin, "--accept-unreviewed"],
    );
    assert_eq!(
        team.run.code, 0,
        "accepted unreviewed: stderr:\n{}",
        team.run.stderr
    );
    assert_eq!(team.step("step_1")["status"], "unreviewed");
}

#[test]
fn a_reviewer_that_times_out_leaves_the_step_unreviewed() {
    let sandbox = Sandbox::new();
    let slow = json!({"delay_ms": 20000, "content": "{\"approved\": true}"});
    let team = team_run(
        &sandbox,
        one_step(vec![slow]),
        &["--timeout", "2", "--kill-grace", "1", "--max-replans", "0"],
    );
    assert_eq!(team.run.code, 1, "stderr:\n{}", team.run.stderr);
    let step = team.step("step_1");
    assert_eq!(step["status"], "unreviewed");
    let reviews = step["attempts"][0]["reviews"].as_array().unwrap();
    assert_eq!(reviews.len(), 2);
    assert!(reviews.iter().all(|r| r["status"] == "timeout"));
}

#[test]
fn the_reviewer_sees_the_real_files_and_the_claims_check() {
    let sandbox = Sandbox::new();
    let rules = vec![
        planner(json!([step("step_1", &[])])),
        worker_rule(
            "step_1",
            vec![
                json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "wrote report.txt"}}]}),
            ],
        ),
        json!({"role": "reviewer", "reply": [
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "report.txt"}}]},
            verdict(json!(false), "report.txt does not exist")
        ]}),
    ];
    let team = team_run(
        &sandbox,
        rules,
        &["--max-retries", "0", "--max-replans", "0"],
    );
    assert_eq!(team.run.code, 1);
    let attempt = &team.step("step_1")["attempts"][0];
    assert_eq!(attempt["claims"]["suspicious"], true);
    assert_eq!(attempt["claims"]["changing_calls"], 0);
    let review = read_json(
        &team
            .dir
            .join("step_1/review-1/.subagent/conversations.json"),
    );
    let brief = messages_with_role(&review, "user")[0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        brief.contains("no successful call that changes anything"),
        "{brief}"
    );
    assert!(brief.contains("WARNING"), "{brief}");
    let results = tool_results(&review);
    let error = results[0]["error"].as_str().unwrap();
    assert!(
        error.contains("report.txt") && error.contains("No such file"),
        "the reviewer read the disk: {error}"
    );
    let tools = crate::common::tool_call_names(&review);
    assert_eq!(tools, ["read_file"]);
    assert!(
        team.run
            .stderr
            .contains("claims success without changing anything"),
        "{}",
        team.run.stderr
    );
}

#[test]
fn reviewers_get_only_read_only_tools() {
    let sandbox = Sandbox::new();
    let rules = one_step(vec![
        json!({"tool_calls": [{"name": "write_file", "arguments": {"path": "sneaky.txt", "content": "x"}}]}),
        verdict(json!(true), "none"),
    ]);
    let team = team_run(&sandbox, rules, &[]);
    assert_eq!(team.run.code, 0, "stderr:\n{}", team.run.stderr);
    assert!(!sandbox.ws().join("sneaky.txt").exists());
    let review = read_json(
        &team
            .dir
            .join("step_1/review-1/.subagent/conversations.json"),
    );
    let error = tool_results(&review)[0]["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(error.contains("unknown tool `write_file`"), "{error}");
}
