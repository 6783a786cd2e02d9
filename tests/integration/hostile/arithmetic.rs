//! Attack 8, arithmetic: durations from flags and numbers from the model
//! at the edge of their types.

use serde_json::json;

use super::outputs;
use crate::common::{Sandbox, read_json, run, spawn, troupe};

const MAX: &str = "18446744073709551615";

// Regression: `--timeout 18446744073709551615` overflowed in the parent
// (exit 101, status.json left "running"); a read_file offset + limit that
// overflowed panicked the agent in a debug build, which hung until the
// idle watchdog.
#[test]
fn the_largest_numbers_are_taken_not_panicked_on() {
    let sandbox = Sandbox::new();
    let huge = u64::MAX;
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "a.txt", "content": "one\ntwo\n"}}]},
        {"tool_calls": [
            {"name": "read_file", "arguments": {"path": "a.txt", "offset": 2, "limit": huge}},
            {"name": "read_file", "arguments": {"path": "a.txt", "offset": huge, "limit": huge}},
            {"name": "search_workspace", "arguments": {"pattern": "one", "max_results": huge}}
        ]},
        {"tool_calls": [{"name": "run_command", "arguments": {"command": "echo ran", "timeout_seconds": huge}}]},
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "done"}}]}
    ]}]}));
    let flags = [
        "--timeout",
        MAX,
        "--idle-timeout",
        MAX,
        "--kill-grace",
        MAX,
        "--launch-timeout",
        MAX,
        "--command-timeout",
        MAX,
    ];
    let out = spawn(&sandbox, 1, "count high", &model, &flags);
    assert_eq!(out.code, 0, "stderr:\n{}", out.stderr);
    let results = outputs(&sandbox.transcript(1));
    assert!(results[1].contains("two"), "{}", results[1]);
    assert!(
        results[2].contains("is past the end of a.txt"),
        "{}",
        results[2]
    );
    assert!(results[3].contains("a.txt:1: one"), "{}", results[3]);
    assert!(results[4].contains("ran"), "{}", results[4]);
    let status = read_json(&sandbox.agent_dir(1).join(".subagent/status.json"));
    assert_eq!(status["status"], "completed");

    let mut wait = troupe();
    wait.args(["wait", "1", "--timeout", MAX])
        .arg("--workspace")
        .arg(sandbox.ws());
    assert_eq!(run(wait).code, 0);
}
