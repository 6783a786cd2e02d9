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
/// what `troupe show` says of it.
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
    (
        run.json()["stats"]["token_usage"].clone(),
        run.stderr,
        show.stdout,
    )
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
