//! What a model's tokens cost (issue 46, item 1): `[prices."MODEL"]`, the
//! cached prompt tokens each provider format reports, and the provider's
//! own cost preferred, through `troupe spawn` against an endpoint on
//! 127.0.0.1.

use serde_json::{Value, json};

use crate::common::Sandbox;
use crate::common::mock_model::{MockModel, MockResponse};
use crate::http_client::{finish_call, spawn_against, write_call};

/// A completion of `message` with `usage` as the endpoint spells it.
fn with_usage(message: Value, usage: Value) -> MockResponse {
    let body = json!({
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": usage,
    });
    MockResponse::raw(200, body.to_string())
}

/// A two-turn agent whose turns report `first` and `second`, under the
/// config file `config`; its result's token usage, what troupe said, and
/// what `troupe show` and `troupe status` say of it.
fn spent(first: Value, second: Value, config: &str) -> (Value, String, String) {
    let sandbox = Sandbox::new();
    let file = sandbox.root().join("troupe.toml");
    std::fs::write(&file, config).unwrap();
    let mock = MockModel::start(vec![
        with_usage(write_call(json!({"path": "a.txt", "content": "hi"})), first),
        with_usage(finish_call(), second),
    ]);
    let run = spawn_against(&sandbox, &mock, &["--config", &file.display().to_string()]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let show = crate::common::cli(&sandbox, &["show", "7"]);
    let status = crate::common::cli(&sandbox, &["status"]);
    let seen = format!("{}{}", show.stdout, status.stdout);
    (run.json()["stats"]["token_usage"].clone(), run.stderr, seen)
}

const PRICED: &str = "[prices.\"test-model\"]\ninput = 2.0\noutput = 8.0\ncached_input = 0.5\n";

fn cost(usage: &Value) -> f64 {
    usage["cost"]
        .as_f64()
        .unwrap_or_else(|| panic!("a cost: {usage}"))
}

#[test]
fn a_priced_model_costs_its_tokens_with_cached_ones_at_their_rate() {
    // OpenAI's shape, then DeepSeek's.
    let (usage, _, show) = spent(
        json!({"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100,
               "prompt_tokens_details": {"cached_tokens": 400}}),
        json!({"prompt_tokens": 2000, "completion_tokens": 50, "total_tokens": 2050,
               "prompt_cache_hit_tokens": 1500, "prompt_cache_miss_tokens": 500}),
        PRICED,
    );
    assert_eq!(usage["cached"], 1900, "{usage}");
    assert_eq!(usage["total"], 3150);
    // 600 fresh at $2, 400 cached at $0.50, 100 out at $8; then 500 fresh,
    // 1500 cached, 50 out.
    let expected =
        (600.0 * 2.0 + 400.0 * 0.5 + 100.0 * 8.0 + 500.0 * 2.0 + 1500.0 * 0.5 + 50.0 * 8.0) / 1e6;
    assert!(
        (cost(&usage) - expected).abs() < 1e-9,
        "{usage}: {expected}"
    );
    assert!(show.contains("3150 tokens, $0.0043"), "{show}");
    let row = show
        .lines()
        .find(|l| l.starts_with("7 "))
        .unwrap_or_default();
    assert!(row.contains("3150") && row.contains("$0.0043"), "{show}");
}

#[test]
fn the_providers_own_cost_is_taken_over_the_price() {
    let (usage, ..) = spent(
        json!({"prompt_tokens": 1000, "completion_tokens": 100, "cost": 0.0125}),
        json!({"prompt_tokens": 1000, "completion_tokens": 100, "cost": 0.0025}),
        PRICED,
    );
    assert!((cost(&usage) - 0.015).abs() < 1e-9, "{usage}");
}

#[test]
fn a_model_without_a_price_costs_null_and_is_said_once() {
    let (usage, stderr, _) = spent(
        json!({"prompt_tokens": 10, "completion_tokens": 1}),
        json!({"prompt_tokens": 10, "completion_tokens": 1}),
        "[prices.\"another-model\"]\ninput = 1.0\noutput = 1.0\n",
    );
    assert_eq!(usage["cost"], Value::Null, "never a guess: {usage}");
    let said = "[prices] names no price for test-model: its cost is recorded as unknown";
    assert_eq!(stderr.matches(said).count(), 1, "{stderr}");
}

#[test]
fn a_price_that_is_not_dollars_is_refused_with_its_model() {
    let sandbox = Sandbox::new();
    let file = sandbox.root().join("troupe.toml");
    std::fs::write(
        &file,
        "[prices.\"test-model\"]\ninput = -1.0\noutput = 1.0\n",
    )
    .unwrap();
    let mock = MockModel::start(vec![]);
    let run = spawn_against(&sandbox, &mock, &["--config", &file.display().to_string()]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("[prices.\"test-model\"]: input, output and cached_input are dollars per million tokens, 0 or more"),
        "{}",
        run.stderr
    );
}

/// A team run whose planner and reviewer are scripted and whose workers
/// ask `mock`, under `config`, with `extra` arguments.
fn team_against(
    sandbox: &Sandbox,
    mock: &MockModel,
    config: &str,
    extra: &[&str],
) -> crate::common::Run {
    let file = sandbox.root().join("troupe.toml");
    std::fs::write(&file, config).unwrap();
    let plan = json!({"summary": "two", "steps": [
        {"id": "a", "description": "do a", "dependencies": []},
        {"id": "b", "description": "do b", "dependencies": ["a"]},
    ]});
    let script = sandbox.script(json!({"rules": [
        {"role": "planner", "reply": [{"content": plan.to_string()}]},
        {"role": "reviewer", "reply": [{"content": json!({"approved": true, "summary": "ok", "issues": [], "suggestions": []}).to_string()}]},
    ]}));
    let mut command = crate::common::troupe();
    command
        .args(["--config", &file.display().to_string()])
        .args([
            "run",
            "two steps",
            "--isolation",
            "shared",
            "--max-replans",
            "0",
        ])
        .arg("--workspace")
        .arg(sandbox.ws())
        .args(["--model", "test-model", "--base-url", &mock.url])
        .args(["--planner-model", &script, "--reviewer-model", &script])
        .args(extra);
    crate::common::run(command)
}

#[test]
fn a_run_past_its_max_cost_ends_limit_reached_and_its_resume_command_goes_on() {
    let sandbox = Sandbox::new();
    let answer = |cost: f64| {
        with_usage(
            finish_call(),
            json!({"prompt_tokens": 100, "completion_tokens": 10, "cost": cost}),
        )
    };
    let mock = MockModel::start(vec![answer(0.6), answer(0.1), answer(0.1)]);
    let run = team_against(&sandbox, &mock, PRICED, &["--max-cost", "0.50"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let said = "the run spent $0.6000 of its $0.50 (--max-cost); no new agent starts";
    assert!(run.stderr.contains(said), "{}", run.stderr);
    assert_eq!(mock.requests().len(), 1, "b's worker never asked");
    let record = crate::team::run_dir(&sandbox).join("run.json");
    let record = crate::common::read_json(&record);
    assert_eq!(record["settings"]["max_cost"], 0.5);
    assert!(
        (cost(&record["totals"]["token_usage"]) - 0.6).abs() < 1e-9,
        "{record}"
    );
    assert!(
        record["reason"].as_str().unwrap().contains("(--max-cost)"),
        "{record}"
    );
    assert_eq!(record["status"], "limit_reached", "{record}");
    let show = crate::common::cli(&sandbox, &["show", "last"]);
    assert!(
        show.stdout
            .lines()
            .any(|l| l.starts_with("a failed (1 attempt,") && l.ends_with(", 110 tokens, $0.6000)"))
            && show.stdout.contains("` continues it, with a higher limit"),
        "each step's spend, and the way on: {}",
        show.stdout
    );
    let runs = crate::common::cli(&sandbox, &["runs"]);
    assert!(runs.stdout.contains("$0.6000"), "{}", runs.stdout);

    // The command the summary gives, with the cap now in the config file.
    let line = run
        .stderr
        .lines()
        .find(|line| line.contains("continues the run, with a higher limit"))
        .unwrap_or_else(|| panic!("a resume command: {}", run.stderr));
    let command = line.split('`').nth(1).unwrap();
    let words: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(words[..3], ["troupe", "run", "--resume"], "{line}");
    let file = sandbox.root().join("troupe.toml");
    std::fs::write(&file, format!("max_cost = 5\n{PRICED}")).unwrap();
    let mut resume = crate::common::troupe();
    resume
        .args(["--config", &file.display().to_string()])
        .args(&words[1..]);
    let resumed = crate::common::run(resume);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    let record = crate::common::read_json(&crate::team::run_dir(&sandbox).join("run.json"));
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["settings"]["max_cost"], 5.0, "from the config file");
    let b_row = resumed
        .stderr
        .lines()
        .find(|line| line.trim_start().starts_with("b ") && line.contains("completed"))
        .unwrap_or_else(|| panic!("b's row: {}", resumed.stderr));
    assert!(b_row.ends_with("$0.1000"), "each step's cost: {b_row}");
    assert!(
        (cost(&record["totals"]["token_usage"]) - 0.8).abs() < 1e-9,
        "what the first session spent counts: {record}"
    );
}

#[test]
fn max_cost_is_refused_for_a_model_without_a_price() {
    let sandbox = Sandbox::new();
    let mock = MockModel::start(vec![]);
    let run = team_against(&sandbox, &mock, "", &["--max-cost", "2"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "--max-cost needs a price for every model it caps; [prices] names none for test-model"
        ),
        "{}",
        run.stderr
    );
    assert!(mock.requests().is_empty());
}

#[test]
fn an_agent_past_its_max_agent_cost_wraps_up_with_stop_reason_cost_limit() {
    let sandbox = Sandbox::new();
    let file = sandbox.root().join("troupe.toml");
    std::fs::write(&file, PRICED).unwrap();
    let mock = MockModel::start(vec![
        with_usage(
            write_call(json!({"path": "a.txt", "content": "hi"})),
            json!({"prompt_tokens": 100, "completion_tokens": 10, "cost": 0.6}),
        ),
        with_usage(
            json!({"role": "assistant", "content": "I wrote a.txt and stopped there."}),
            json!({"prompt_tokens": 120, "completion_tokens": 12, "cost": 0.01}),
        ),
    ]);
    let config = file.display().to_string();
    let run = spawn_against(
        &sandbox,
        &mock,
        &["--config", &config, "--max-agent-cost", "0.5"],
    );
    let result = run.json();
    assert_eq!(
        result["stop_reason"], "cost_limit",
        "{result}\n{}",
        run.stderr
    );
    assert_eq!(result["result_summary"], "I wrote a.txt and stopped there.");
    assert_eq!(mock.requests().len(), 2, "the work, then the wrap-up");
    assert!((cost(&result["stats"]["token_usage"]) - 0.61).abs() < 1e-9);
    let task = crate::common::read_json(
        &sandbox
            .ws()
            .join("sub_agent_results/agent_7/.subagent/task.json"),
    );
    assert_eq!(task["limits"]["max_cost_micros"], 500_000);
}

#[test]
fn max_agent_cost_is_refused_for_a_model_without_a_price() {
    let sandbox = Sandbox::new();
    let mock = MockModel::start(vec![]);
    let run = spawn_against(&sandbox, &mock, &["--max-agent-cost", "1"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("--max-agent-cost needs a price for every model it caps; [prices] names none for test-model"),
        "{}",
        run.stderr
    );
}

#[test]
fn validate_says_the_most_a_plan_may_cost_under_the_caps() {
    let sandbox = Sandbox::new();
    let file = sandbox.root().join("troupe.toml");
    std::fs::write(&file, "max_agent_cost = 0.25\n").unwrap();
    let plan = sandbox.root().join("plan.json");
    std::fs::write(
        &plan,
        r#"{"steps": [{"id": "a", "description": "x"}, {"id": "b", "description": "y"}]}"#,
    )
    .unwrap();
    let validate = |extra: &[&str]| {
        let mut command = crate::common::troupe();
        command
            .args(["--config", &file.display().to_string(), "validate"])
            .arg(&plan)
            .args(extra);
        crate::common::run(command)
    };
    // Two steps, three attempts each, a worker and up to two reviewers
    // an attempt: 18 agents at $0.25 from the config file.
    let out = validate(&["--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.json()["worst_case"], json!({"agents": 18, "cost": 4.5}));
    let out = validate(&["--json", "--max-cost", "2", "--max-retries", "0"]);
    assert_eq!(out.json()["worst_case"], json!({"agents": 6, "cost": 1.5}));
    let out = validate(&["--max-cost", "1"]);
    assert!(
        out.stdout.contains("worst case: $1.00: 18 agents at most, at $0.25 each (--max-agent-cost), within $1.00 in all (--max-cost)"),
        "{}",
        out.stdout
    );
}

#[test]
fn plan_says_the_worst_case_of_the_plan_it_made() {
    let sandbox = Sandbox::new();
    let plan = json!({"summary": "two", "steps": [
        {"id": "a", "description": "do a", "dependencies": []},
        {"id": "b", "description": "do b", "dependencies": ["a"]},
    ]});
    let script = sandbox.script(json!({"rules": [
        {"role": "planner", "reply": [{"content": plan.to_string()}]},
    ]}));
    let mut command = crate::common::troupe();
    command
        .args(["plan", "two steps", "--model", &script])
        .args(["--max-agent-cost", "0.10", "--max-retries", "1"]);
    let out = crate::common::run(command);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("worst case: $1.20: 12 agents at most, at $0.10 each (--max-agent-cost)"),
        "{}",
        out.stderr
    );
    assert_eq!(out.json()["steps"].as_array().map(Vec::len), Some(2));
}
