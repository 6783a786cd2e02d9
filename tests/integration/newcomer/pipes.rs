//! A reader that goes away: `troupe ... | head -1`.

use std::process::Command;

use serde_json::json;

use crate::common::{Sandbox, run, spawn};
use crate::team::{approving_reviewer, planner, run_dir, step, worker_rule, worker_writes};

/// `script` under bash with pipefail, so the exit code is troupe's.
fn piped(script: &str) -> crate::common::Run {
    let mut command = Command::new("bash");
    command
        .args(["-c", &format!("set -o pipefail; {script}")])
        .env("NO_COLOR", "1")
        .env("TROUPE_CONFIG", "");
    run(command)
}

#[test]
fn show_into_a_closed_pipe_ends_quietly() {
    let sandbox = Sandbox::new();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "done"}}]}
    ]}]}));
    assert_eq!(spawn(&sandbox, 1, "t", &model, &[]).code, 0);
    let troupe = env!("CARGO_BIN_EXE_troupe");
    let ws = sandbox.ws();
    let out = piped(&format!(
        "{troupe} show agent_1 --full --workspace {} | head -1",
        ws.display()
    ));
    assert_eq!(out.code, 0, "stderr:\n{}", out.stderr);
    assert_eq!(out.stdout.lines().count(), 1);
    assert!(
        !out.stderr.contains("panicked") && !out.stderr.contains("Broken pipe"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_run_into_a_closed_pipe_stops_its_agents_and_seals_its_record() {
    let sandbox = Sandbox::new();
    let rules = vec![
        planner(json!([step("a", &[])])),
        worker_rule("a", worker_writes("a", 3000)),
        approving_reviewer(),
    ];
    let model = sandbox.script(json!({"rules": rules}));
    let troupe = env!("CARGO_BIN_EXE_troupe");
    let out = piped(&format!(
        "{troupe} run goal -v --model {model} --workspace {} 2>&1 | head -1",
        sandbox.ws().display()
    ));
    assert!(!out.stdout.contains("panicked"), "{}", out.stdout);
    assert_eq!(out.code, 130, "interrupted by the closed pipe");
    let record = crate::common::read_json(&run_dir(&sandbox).join("run.json"));
    assert_eq!(record["status"], "interrupted", "sealed: {record}");
    assert!(record["completed_at"].is_string());
}

// Issue 43: `troupe run --json | head` closing the pipe while the run set
// up its checkouts exited 1, recorded the run `failed`, and printed the
// git command the stop cut short. Wherever the reader goes away, it is
// 130, `interrupted`, and troupe's own words.
#[test]
fn a_json_run_whose_reader_goes_away_during_set_up_is_interrupted() {
    for bytes in [1, 200, 400, 700] {
        let sandbox = Sandbox::new();
        crate::isolation::repository(&sandbox);
        let rules = vec![
            planner(json!([step("a", &[]), step("b", &[])])),
            worker_rule("a", worker_writes("a", 0)),
            worker_rule("b", worker_writes("b", 0)),
            approving_reviewer(),
        ];
        let model = sandbox.script(json!({"rules": rules}));
        let troupe = env!("CARGO_BIN_EXE_troupe");
        let err = sandbox.root().join("err");
        let out = piped(&format!(
            "{troupe} run goal --json --model {model} --workspace {} 2>{} | head -c {bytes} > /dev/null",
            sandbox.ws().display(),
            err.display()
        ));
        let said = std::fs::read_to_string(&err).unwrap();
        if out.code == 0 {
            // The run ended before the reader went away.
            continue;
        }
        assert_eq!(out.code, 130, "at {bytes} bytes: {said}");
        assert!(!said.contains("`git "), "at {bytes} bytes: {said}");
        let record = crate::common::read_json(&run_dir(&sandbox).join("run.json"));
        assert_eq!(
            record["status"], "interrupted",
            "at {bytes} bytes: {record}"
        );
    }
}
