//! A model per role, from flags or the config file, and structured
//! answers where the endpoint takes them.

use serde_json::json;

use super::{one_step_plan, run_with_planner_at};
use crate::common::mock_model::{MockModel, MockResponse};
use crate::common::{Sandbox, run, troupe};
use crate::team::{finish_team_run, planner, step, team_command, worker_rule, worker_writes};

#[test]
fn the_planner_has_its_own_model_and_asks_for_a_plan_by_schema() {
    let sandbox = Sandbox::new();
    let mock = MockModel::start(vec![MockResponse::text(&one_step_plan())]);
    let team = run_with_planner_at(&sandbox, &mock, &[]);
    assert_eq!(team.run.code, 0, "stderr:\n{}", team.run.stderr);
    let requests = mock.requests();
    assert_eq!(requests.len(), 1, "only the planner asks the endpoint");
    let body = &requests[0].body;
    assert_eq!(body["model"], "planner-x");
    assert_eq!(body["max_tokens"], 4096);
    assert_eq!(body["response_format"]["type"], "json_schema");
    let schema = &body["response_format"]["json_schema"]["schema"];
    assert_eq!(schema["required"], json!(["summary", "steps"]));
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("a.txt")).unwrap(),
        "a"
    );
}

#[test]
fn the_reviewer_model_comes_from_the_config_file() {
    let sandbox = Sandbox::new();
    let verdict = json!({"approved": true, "summary": "fine", "issues": [], "suggestions": [], "retry": true});
    let mock = MockModel::start(vec![MockResponse::text(&verdict.to_string())]);
    let config = sandbox.root().join("troupe.toml");
    let toml = format!(
        "[roles.reviewer]\nmodel = \"reviewer-x\"\nbase_url = \"{}\"\nmax_output_tokens = 512\n",
        mock.url
    );
    std::fs::write(&config, toml).unwrap();
    let rules = vec![
        planner(json!([step("a", &[])])),
        worker_rule("a", worker_writes("a", 0)),
    ];
    let mut command = team_command(&sandbox, rules, &[]);
    command.env("TROUPE_CONFIG", &config);
    let team = finish_team_run(&sandbox, command);
    assert_eq!(team.run.code, 0, "stderr:\n{}", team.run.stderr);
    let requests = mock.requests();
    assert_eq!(requests.len(), 1);
    let body = &requests[0].body;
    assert_eq!(body["model"], "reviewer-x");
    assert_eq!(body["max_tokens"], 512);
    assert!(
        !body["tools"].as_array().unwrap().is_empty(),
        "the reviewer's read-only tools"
    );
    assert!(
        body.get("response_format").is_none(),
        "auto: not with tools"
    );
    assert_eq!(team.step("a")["status"], "completed");
}

#[test]
fn structured_answers_fall_back_when_the_endpoint_refuses_them() {
    let mock = MockModel::start(vec![
        MockResponse::raw(
            400,
            r#"{"error": {"message": "response_format json_schema is not supported"}}"#,
        ),
        MockResponse::text(&one_step_plan()),
    ]);
    let mut command = troupe();
    command.args(["plan", "a goal", "--model", "m", "--base-url", &mock.url]);
    let out = run(command);
    assert_eq!(out.code, 0, "stderr:\n{}", out.stderr);
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[0].body.get("response_format").is_some());
    assert!(
        requests[1].body.get("response_format").is_none(),
        "asked again without"
    );

    let mock = MockModel::start(vec![MockResponse::text(&one_step_plan())]);
    let mut command = troupe();
    command.args([
        "plan",
        "a goal",
        "--model",
        "m",
        "--base-url",
        &mock.url,
        "--structured",
        "off",
    ]);
    assert_eq!(run(command).code, 0);
    assert!(mock.requests()[0].body.get("response_format").is_none());
}
