//! Records without gaps, whatever the model did: every run ends with
//! run_finished and its tokens, replans are told what they need, a
//! missing usage is estimated, and an empty review is a failed review.

use serde_json::json;

use super::texts_of;
use crate::common::Sandbox;
use crate::common::mock_model::{MockModel, MockResponse};
use crate::http_client::spawn_against;
use crate::team::{
    finish_team_run, planner, step, team_command, team_run, worker_rule, worker_writes,
};

#[test]
fn an_invalid_first_plan_still_ends_with_run_finished_and_its_tokens() {
    let sandbox = Sandbox::new();
    let mock = MockModel::start(vec![MockResponse::answer(
        json!({"role": "assistant", "content": "I would rather not plan."}),
        "stop",
        Some((400, 59)),
    )]);
    let mut command = team_command(&sandbox, Vec::new(), &[]);
    command.args(["--planner-model", "p", "--planner-base-url", &mock.url]);
    let team = finish_team_run(&sandbox, command);
    assert_eq!(team.run.code, 2, "stderr:\n{}", team.run.stderr);
    let events = team.events();
    assert_eq!(events.last().unwrap()["type"], "run_finished", "{events:?}");
    assert_eq!(team.record()["totals"]["token_usage"]["total"], 459);
    assert_eq!(events.last().unwrap()["token_usage"]["total"], 459);
}

#[test]
fn a_replan_after_a_given_plan_is_told_the_goal_and_the_plan() {
    let sandbox = Sandbox::new();
    let plan = sandbox.root().join("plan.json");
    let given = json!({"summary": "given", "steps": [
        {"id": "only_step", "description": "do it", "type": "COMMAND", "dependencies": []}
    ]});
    std::fs::write(&plan, given.to_string()).unwrap();
    let mock = MockModel::start(vec![MockResponse::text("no plan, sorry")]);
    let fails = json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": false, "summary": "could not"}}]});
    let rules = vec![worker_rule("only_step", vec![fails])];
    let mut command = team_command(
        &sandbox,
        rules,
        &["--max-retries", "0", "--max-replans", "1"],
    );
    command.arg("--plan").arg(&plan);
    command.args(["--planner-model", "p", "--planner-base-url", &mock.url]);
    let team = finish_team_run(&sandbox, command);
    assert_eq!(team.run.code, 1, "stderr:\n{}", team.run.stderr);
    let requests = mock.requests();
    assert_eq!(requests.len(), 1, "one replan");
    let body = &requests[0].body;
    assert!(
        texts_of(body, "system")[0].contains("You are a planner"),
        "{body}"
    );
    let question = &texts_of(body, "user")[0];
    for part in ["Goal: test goal", "only_step", "did not work out"] {
        assert!(question.contains(part), "{part} in {question}");
    }
}

#[test]
fn a_missing_usage_is_estimated_and_marked() {
    let sandbox = Sandbox::new();
    let finish = crate::http_client::finish_call();
    let mock = MockModel::start(vec![MockResponse::answer(finish, "stop", None)]);
    let run = spawn_against(&sandbox, &mock, &[]);
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    let usage = &run.json()["stats"]["token_usage"];
    assert_eq!(usage["estimated"], true, "{usage}");
    assert!(
        usage["total"].as_u64().unwrap() > 100,
        "the prompt alone is long: {usage}"
    );
}

#[test]
fn an_empty_review_is_a_failed_review_not_a_rejection() {
    let sandbox = Sandbox::new();
    let rules = vec![
        planner(json!([step("a", &[])])),
        worker_rule("a", worker_writes("a", 0)),
        json!({"role": "reviewer", "reply": [{"content": ""}]}),
    ];
    // No replan: the script's Planner would plan the same step again.
    let team = team_run(&sandbox, rules, &["--max-replans", "0"]);
    assert_eq!(team.run.code, 1, "stderr:\n{}", team.run.stderr);
    assert!(team.events_of("review_rejected").is_empty());
    let failures = team.events_of("review_failed");
    assert_eq!(failures.len(), 2, "tried once more");
    assert!(
        failures[0]["reason"]
            .as_str()
            .unwrap()
            .contains("answered nothing")
    );
    assert_eq!(team.step("a")["status"], "unreviewed");
}
