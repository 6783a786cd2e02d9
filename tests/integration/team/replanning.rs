//! Replanning when most steps fail, bounded by --max-replans.

use serde_json::{Value, json};

use super::{approving_reviewer, step, team_run};
use crate::common::{Sandbox, read_json};

fn plan_reply(steps: Value) -> Value {
    json!({"content": json!({"summary": "try", "steps": steps}).to_string()})
}

/// Every worker fails; the planner answers the first plan and then one new
/// step per replan.
fn always_failing() -> Vec<Value> {
    vec![
        json!({"role": "planner", "reply": [
            plan_reply(json!([step("step_1", &[]), step("step_2", &["step_1"]), step("step_3", &[])])),
            plan_reply(json!([step("retry_1", &[])])),
            plan_reply(json!([step("retry_2", &[])])),
            plan_reply(json!([step("retry_3", &[])]))
        ]}),
        json!({"role": "worker", "reply": [
            {"tool_calls": [{"name": "finish_task", "arguments": {"success": false, "summary": "could not do it"}}]}
        ]}),
        approving_reviewer(),
    ]
}

#[test]
fn most_steps_failing_replans_at_most_max_replans_times() {
    let sandbox = Sandbox::new();
    let team = team_run(&sandbox, always_failing(), &["--max-parallel", "1"]);
    assert_eq!(team.run.code, 1, "stderr:\n{}", team.run.stderr);
    let record = team.record();
    assert_eq!(record["replans"], 2);
    assert_eq!(
        team.events_of("replanning").len(),
        2,
        "the default --max-replans is 2"
    );
    let status = |id: &str| team.step(id)["status"].as_str().unwrap().to_string();
    assert_eq!(status("step_1"), "replaced");
    assert_eq!(status("step_2"), "replaced");
    assert_eq!(status("step_3"), "replaced");
    assert_eq!(status("retry_1"), "replaced");
    assert_eq!(status("retry_2"), "failed");
    assert!(
        record["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["id"] != "retry_3"),
        "no third replan"
    );
    assert_eq!(team.step("retry_2")["round"], 2);
    assert!(team.dir.join("replan-1.json").exists() && team.dir.join("replan-2.json").exists());

    let planner = read_json(&team.dir.join("planner/conversations.json"));
    let asks: Vec<&str> = planner["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(asks.len(), 3);
    assert!(
        asks[1].contains("step_1") && asks[1].contains("could not do it"),
        "the failure reaches the planner: {}",
        asks[1]
    );
}

#[test]
fn max_replans_bounds_and_zero_disables() {
    let sandbox = Sandbox::new();
    let team = team_run(
        &sandbox,
        always_failing(),
        &["--max-parallel", "1", "--max-replans", "1"],
    );
    assert_eq!(team.run.code, 1);
    assert_eq!(team.record()["replans"], 1);

    let sandbox = Sandbox::new();
    let team = team_run(
        &sandbox,
        always_failing(),
        &["--max-parallel", "1", "--max-replans", "0"],
    );
    assert_eq!(team.run.code, 1);
    assert_eq!(team.record()["replans"], 0);
    assert!(team.events_of("replanning").is_empty());
    assert_eq!(team.step("step_2")["status"], "skipped");
    assert_eq!(
        team.step("step_3")["status"],
        "failed",
        "independent steps still ran"
    );
}

#[test]
fn completed_steps_feed_the_replan_and_a_good_replan_completes_the_run() {
    let sandbox = Sandbox::new();
    let finish = |ok: bool| json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": ok, "summary": if ok { "done well" } else { "broke" }}}]});
    let write = |id: &str| json!({"tool_calls": [{"name": "write_file", "arguments": {"path": format!("{id}.txt"), "content": id}}]});
    let rules = vec![
        json!({"role": "planner", "reply": [
            plan_reply(json!([step("good", &[]), step("bad_1", &[]), step("bad_2", &[])])),
            plan_reply(json!([step("fix", &["good"])]))
        ]}),
        json!({"role": "worker", "step": "good", "reply": [write("good"), finish(true)]}),
        json!({"role": "worker", "step": "fix", "reply": [write("fix"), finish(true)]}),
        json!({"role": "worker", "reply": [finish(false)]}),
        approving_reviewer(),
    ];
    let team = team_run(&sandbox, rules, &["--max-parallel", "1"]);
    assert_eq!(
        team.run.code, 0,
        "a successful replan completes the run; stderr:\n{}",
        team.run.stderr
    );
    assert_eq!(team.step("good")["status"], "completed");
    assert_eq!(team.step("bad_1")["status"], "replaced");
    assert_eq!(team.step("fix")["status"], "completed");
    let brief = read_json(&team.dir.join("fix/worker-1/.subagent/conversations.json"));
    let text = brief["messages"][1]["content"].as_str().unwrap();
    assert!(
        text.contains("good") && text.contains("done well") && text.contains("good.txt"),
        "{text}"
    );
}

// Issue 43: a replan that named a step as the run already had ended the
// run ("the id `step_1` is already taken"). The new step is renamed, the
// replan's own dependencies follow it, and the run goes on.
#[test]
fn a_replan_that_reuses_a_step_s_id_has_it_renamed_and_the_run_goes_on() {
    let sandbox = Sandbox::new();
    let rules = vec![
        json!({"role": "planner", "reply": [
            plan_reply(json!([step("step_1", &[])])),
            plan_reply(json!([step("step_1", &[]), step("check", &["step_1"])]))
        ]}),
        json!({"role": "worker", "step": "step_1", "reply": [
            {"tool_calls": [{"name": "finish_task", "arguments": {"success": false, "summary": "could not do it"}}]}
        ]}),
        json!({"role": "worker", "reply": [
            {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "done"}}]}
        ]}),
        approving_reviewer(),
    ];
    let team = team_run(&sandbox, rules, &["--max-replans", "1"]);
    assert_eq!(team.run.code, 0, "stderr:\n{}", team.run.stderr);
    assert!(
        team.run.stderr.contains(
            "the Planner named a new step `step_1`, an id this run has: it is `step_1-2`"
        ),
        "{}",
        team.run.stderr
    );
    assert_eq!(team.step("step_1")["status"], "replaced");
    assert_eq!(team.step("step_1-2")["status"], "completed");
    assert_eq!(team.step("check")["dependencies"], json!(["step_1-2"]));
    assert_eq!(team.step("check")["status"], "completed");
}
