//! Plans: strict validation with the reason, and what the planner's
//! answers become.

use serde_json::json;

use super::{
    approving_reviewer, planner, run_dir, step, team_run, validate, worker_rule, worker_writes,
};
use crate::common::{Sandbox, read_json, run, troupe};

#[test]
fn invalid_plans_are_refused_with_the_reason() {
    let cases = [
        (
            r#"{"steps": [{"id": "a", "description": "x", "dependencies": ["b"]}, {"id": "b", "description": "y", "dependencies": ["a"]}]}"#,
            "cycle: a -> b -> a",
        ),
        (
            r#"{"steps": [{"id": "a", "description": "x"}, {"id": "a", "description": "y"}]}"#,
            "the id `a` is used by steps 1 and 2",
        ),
        (
            r#"{"steps": [{"id": "a", "description": "x", "dependencies": ["ghost"]}]}"#,
            "depends on `ghost`, which no step declares",
        ),
        (
            r#"{"summary": "nothing", "steps": []}"#,
            "the plan has no steps",
        ),
        (r#"{"steps": [{"id": "", "description": "x"}]}"#, "empty id"),
        (
            r#"{"steps": [{"id": "a", "description": 5}]}"#,
            "`description` must be a non-empty string",
        ),
    ];
    for (text, reason) in cases {
        let sandbox = Sandbox::new();
        let run = validate(&sandbox, text);
        assert_eq!(run.code, 2, "{text}");
        assert!(
            run.stderr.contains("is invalid") && run.stderr.contains(reason),
            "{reason}: {}",
            run.stderr
        );
    }
}

#[test]
fn a_valid_plan_prints_its_levels() {
    let sandbox = Sandbox::new();
    let text = r#"{"summary": "diamond", "steps": [
  {"id": "a", "description": "first", "type": "COMMAND"},
  {"id": "b", "description": "left", "dependencies": ["a"]},
  {"id": "c", "description": "right", "dependencies": ["a"]},
  {"id": "d", "description": "join", "dependencies": ["b", "c"]}]}
"#;
    let run = validate(&sandbox, text);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("4 steps in 3 levels"), "{}", run.stdout);
    assert!(
        run.stdout
            .contains("level 2\n    b  left [task] <- a\n    c  right [task] <- a"),
        "{}",
        run.stdout
    );
}

#[test]
fn a_fenced_plan_from_the_planner_is_accepted_and_saved() {
    let sandbox = Sandbox::new();
    let plan = json!({"summary": "one file", "steps": [step("step_1", &[])]});
    let fenced = format!("Sure! Here is my plan:\n```json\n{plan}\n```\nGood luck.");
    let model =
        sandbox.script(json!({"rules": [{"role": "planner", "reply": [{"content": fenced}]}]}));
    let out = sandbox.root().join("plan.json");
    let mut command = troupe();
    command
        .args(["plan", "write one file", "--model", &model, "-o"])
        .arg(&out);
    let run = run(command);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(read_json(&out), plan);
    assert!(run.stderr.contains("1 step in 1 level"), "{}", run.stderr);
}

#[test]
fn an_invalid_plan_from_the_planner_is_not_run() {
    let sandbox = Sandbox::new();
    let rules = vec![
        json!({"role": "planner", "reply": [{"content": "I would rather not plan today."}]}),
        worker_rule("step_1", worker_writes("step_1", 0)),
    ];
    let team = team_run(&sandbox, rules, &[]);
    assert_eq!(team.run.code, 2, "stderr:\n{}", team.run.stderr);
    let record = team.record();
    assert_eq!(record["status"], "failed");
    assert!(record["steps"].as_array().unwrap().is_empty());
    let invalid = &team.events_of("plan_invalid")[0];
    assert!(
        invalid["reason"]
            .as_str()
            .unwrap()
            .contains("no JSON object")
    );
    let saved = sandbox.ws().join(invalid["saved"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(saved).unwrap(),
        "I would rather not plan today."
    );
    assert!(
        team.run.stderr.contains("the plan is invalid"),
        "{}",
        team.run.stderr
    );
}

#[test]
fn a_plan_file_runs_without_the_planner() {
    let sandbox = Sandbox::new();
    let plan_path = sandbox.root().join("plan.json");
    std::fs::write(
        &plan_path,
        json!({"summary": "from a file", "steps": [step("only", &[])]}).to_string(),
    )
    .unwrap();
    let model = sandbox.script(
        json!({"rules": [worker_rule("only", worker_writes("only", 0)), approving_reviewer()]}),
    );
    let mut command = troupe();
    command
        .args(["run", "--plan"])
        .arg(&plan_path)
        .args(["--model", &model])
        .arg("--workspace")
        .arg(sandbox.ws());
    let run = run(command);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let record = read_json(&run_dir(&sandbox).join("run.json"));
    assert_eq!(record["goal"], "from a file");
    assert_eq!(
        read_json(&run_dir(&sandbox).join("plan.json"))["steps"][0]["id"],
        "only"
    );

    let bad = sandbox.root().join("bad.json");
    std::fs::write(&bad, r#"{"steps": []}"#).unwrap();
    let mut command = troupe();
    command
        .args(["run", "--plan"])
        .arg(&bad)
        .args(["--model", &model])
        .arg("--workspace")
        .arg(sandbox.ws());
    let refused = crate::common::run(command);
    assert_eq!(refused.code, 2);
    assert!(
        refused.stderr.contains("has no steps"),
        "{}",
        refused.stderr
    );
}

#[test]
fn json_mode_streams_the_events_on_stdout() {
    let sandbox = Sandbox::new();
    let rules = vec![
        planner(json!([step("step_1", &[])])),
        worker_rule("step_1", worker_writes("step_1", 0)),
        approving_reviewer(),
    ];
    let team = team_run(&sandbox, rules, &["--json"]);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let streamed: Vec<serde_json::Value> = team
        .run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        streamed,
        team.events(),
        "stdout carries exactly events.jsonl"
    );
    let kinds: Vec<&str> = streamed
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "run_started",
            "plan_ready",
            "isolation",
            "step_started",
            "worker_finished",
            "claims_checked",
            "review_started",
            "review_approved",
            "step_completed",
            "run_finished"
        ]
    );
    assert!(
        streamed
            .iter()
            .all(|e| e["at"].is_string() && e["elapsed_ms"].is_u64())
    );
}
