//! Run-wide limits: the deadline, the agent count, the token budget.

use std::time::Duration;

use serde_json::json;

use super::{approving_reviewer, planner, step, team_run, worker_rule, worker_writes};
use crate::common::Sandbox;

#[test]
fn the_deadline_stops_every_agent_and_exits_124() {
    let sandbox = Sandbox::new();
    let slow = vec![
        json!({"tool_calls": [{"name": "write_file", "arguments": {"path": "early.txt", "content": "kept"}}]}),
        json!({"tool_calls": [{"name": "run_command", "arguments": {"command": "sleep 60"}}]}),
    ];
    let rules = vec![
        planner(json!([step("slow", &[]), step("later", &["slow"])])),
        worker_rule("slow", slow),
        worker_rule("later", worker_writes("later", 0)),
        approving_reviewer(),
    ];
    let team = team_run(&sandbox, rules, &["--deadline", "2", "--kill-grace", "1"]);
    assert_eq!(team.run.code, 124, "stderr:\n{}", team.run.stderr);
    assert!(
        team.run.elapsed < Duration::from_secs(40),
        "{:?}",
        team.run.elapsed
    );
    let record = team.record();
    assert_eq!(record["status"], "deadline_exceeded");
    assert!(record["reason"].as_str().unwrap().contains("deadline"));
    let slow = team.step("slow");
    assert_eq!(slow["status"], "failed");
    assert_eq!(slow["attempts"][0]["worker"]["status"], "terminated");
    assert_eq!(team.step("later")["status"], "skipped");
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("early.txt")).unwrap(),
        "kept"
    );
    let transcript =
        crate::common::read_json(&team.dir.join("slow/worker-1/.subagent/conversations.json"));
    assert_eq!(transcript["status"], "terminated");
}

#[test]
fn max_agents_stops_new_agents() {
    let sandbox = Sandbox::new();
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &["a"])])),
        worker_rule("a", worker_writes("a", 0)),
        worker_rule("b", worker_writes("b", 0)),
        approving_reviewer(),
    ];
    let team = team_run(&sandbox, rules, &["--max-agents", "2"]);
    assert_eq!(team.run.code, 1);
    assert_eq!(team.step("a")["status"], "completed");
    assert_eq!(team.step("b")["status"], "skipped");
    assert!(
        team.record()["reason"]
            .as_str()
            .unwrap()
            .contains("--max-agents")
    );
    assert_eq!(team.events_of("limit_reached").len(), 1);
    assert_eq!(team.record()["totals"]["agents"], 2);
}

#[test]
fn the_token_budget_stops_new_agents() {
    let sandbox = Sandbox::new();
    let costly = vec![
        json!({"usage": {"prompt": 600, "completion": 100}, "tool_calls": [{"name": "write_file", "arguments": {"path": "a.txt", "content": "a"}}]}),
        json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "spent"}}]}),
    ];
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &["a"])])),
        worker_rule("a", costly),
        worker_rule("b", worker_writes("b", 0)),
        approving_reviewer(),
    ];
    let team = team_run(&sandbox, rules, &["--max-tokens", "500"]);
    assert_eq!(team.run.code, 1, "stderr:\n{}", team.run.stderr);
    let reason = team.record()["reason"].as_str().unwrap().to_string();
    assert!(reason.contains("700 tokens of its 500"), "{reason}");
    assert_eq!(team.record()["status"], "limit_reached");
    assert!(
        team.run.stderr.contains("troupe run --resume run_"),
        "the resume command: {}",
        team.run.stderr
    );
    let a = team.step("a");
    assert_eq!(
        a["status"], "failed",
        "its review could not start, which is no approval"
    );
    assert!(a["reason"].as_str().unwrap().contains("--max-tokens"));
    assert_eq!(team.step("b")["status"], "skipped");
    assert_eq!(team.record()["totals"]["token_usage"]["total"], 700);
}

#[test]
fn each_agent_wraps_up_at_its_own_token_cap_and_the_others_go_on() {
    let sandbox = Sandbox::new();
    // a's worker spends 700 tokens in its first answer; its cap is 500.
    let costly = vec![
        json!({"usage": {"prompt": 600, "completion": 100}, "tool_calls": [{"name": "write_file", "arguments": {"path": "a.txt", "content": "a"}}]}),
        json!({"content": "Out of tokens; a.txt is written."}),
    ];
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &[])])),
        worker_rule("a", costly),
        worker_rule("b", worker_writes("b", 0)),
        approving_reviewer(),
    ];
    let team = team_run(
        &sandbox,
        rules,
        &[
            "--max-agent-tokens",
            "500",
            "--max-retries",
            "0",
            "--max-replans",
            "0",
            "--isolation",
            "shared",
        ],
    );
    assert_eq!(team.run.code, 1, "stderr:\n{}", team.run.stderr);
    let result = crate::common::read_json(&team.dir.join("a/worker-1/.subagent/result.json"));
    assert_eq!(result["stop_reason"], "token_limit", "{result}");
    assert_eq!(team.step("a")["status"], "failed");
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("a.txt")).unwrap(),
        "a",
        "what it wrote before its cap is kept"
    );
    assert_eq!(
        team.step("b")["status"],
        "completed",
        "b has a cap of its own"
    );
    assert!(
        team.dir
            .join("a/worker-1/.subagent/conversations.json")
            .is_file(),
        "the transcript is kept"
    );
}
