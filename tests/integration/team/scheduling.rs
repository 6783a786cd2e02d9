//! The eager scheduler, seen through the timestamps in events.jsonl: no
//! batch barrier, and --max-parallel holds.

use serde_json::{Value, json};

use super::{TeamRun, approving_reviewer, planner, step, team_run, worker_rule, worker_writes};
use crate::common::Sandbox;

/// A diamond (a -> b, c -> d) and an independent long step e.
fn diamond_with_a_long_step() -> Vec<Value> {
    vec![
        planner(json!([
            step("a", &[]),
            step("b", &["a"]),
            step("c", &["a"]),
            step("d", &["b", "c"]),
            step("e", &[])
        ])),
        worker_rule("a", worker_writes("a", 100)),
        worker_rule("b", worker_writes("b", 700)),
        worker_rule("c", worker_writes("c", 700)),
        worker_rule("d", worker_writes("d", 100)),
        worker_rule("e", worker_writes("e", 4000)),
        approving_reviewer(),
    ]
}

fn interval(team: &TeamRun, id: &str) -> (u64, u64) {
    (team.at("step_started", id), team.at("step_completed", id))
}

#[test]
fn steps_start_as_soon_as_their_dependencies_are_done() {
    let sandbox = Sandbox::new();
    let team = team_run(&sandbox, diamond_with_a_long_step(), &[]);
    assert_eq!(team.run.code, 0, "stderr:\n{}", team.run.stderr);
    let (b_start, b_end) = interval(&team, "b");
    let (c_start, c_end) = interval(&team, "c");
    assert!(
        b_start < c_end && c_start < b_end,
        "b ({b_start}-{b_end}) and c ({c_start}-{c_end}) overlap"
    );
    let (_, e_end) = interval(&team, "e");
    let (d_start, _) = interval(&team, "d");
    assert!(
        b_start < e_end,
        "b started before the unrelated long step e finished: no batch barrier"
    );
    assert!(d_start < e_end, "so did d, two levels down");
    let (_, a_end) = interval(&team, "a");
    assert!(
        b_start >= a_end && c_start >= a_end,
        "but never before its own dependency"
    );
}

#[test]
fn max_parallel_one_serialises_everything() {
    let sandbox = Sandbox::new();
    let mut rules = diamond_with_a_long_step();
    rules[5] = worker_rule("e", worker_writes("e", 100));
    let team = team_run(&sandbox, rules, &["--max-parallel", "1"]);
    assert_eq!(team.run.code, 0, "stderr:\n{}", team.run.stderr);
    let mut intervals: Vec<(u64, u64)> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|id| interval(&team, id))
        .collect();
    intervals.sort();
    for pair in intervals.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "steps overlapped: {intervals:?}");
    }
}

#[test]
fn run_json_is_current_while_the_run_goes_on() {
    let sandbox = Sandbox::new();
    let rules = vec![
        planner(json!([step("slow", &[])])),
        worker_rule("slow", worker_writes("slow", 3000)),
        approving_reviewer(),
    ];
    let model = sandbox.script(json!({"rules": rules}));
    let mut command = crate::common::troupe();
    command
        .args(["run", "test goal", "--model", &model])
        .arg("--workspace")
        .arg(sandbox.ws())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = command.spawn().unwrap();
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let seen = loop {
        let record = std::fs::read_dir(sandbox.ws().join("sub_agent_results"))
            .ok()
            .and_then(|mut dirs| dirs.next())
            .and_then(|dir| std::fs::read_to_string(dir.ok()?.path().join("run.json")).ok())
            .and_then(|text| serde_json::from_str::<Value>(&text).ok());
        // The step runs first, its worker a moment later, once started.
        if let Some(record) = record
            && record["steps"][0]["status"] == "running"
            && record["steps"][0]["attempts"][0]["worker"]["status"] == "running"
        {
            break record;
        }
        assert!(
            std::time::Instant::now() < give_up,
            "run.json never showed the running step"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(seen["status"], "running");
    let worker = &seen["steps"][0]["attempts"][0]["worker"];
    assert_eq!(worker["status"], "running");
    assert!(worker["dir"].as_str().unwrap().ends_with("slow/worker-1"));
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_json_reader_that_stops_reading_holds_up_no_agent() {
    let sandbox = Sandbox::new();
    // Each worker's summary is in its event: the run prints far more than
    // a pipe holds.
    let long = "a long summary ".repeat(2_000);
    let finishes = |id: &str| {
        worker_rule(
            id,
            vec![
                json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": format!("{id}: {long}")}}]}),
            ],
        )
    };
    let rules = vec![
        planner(json!([
            step("a", &[]),
            step("b", &["a"]),
            step("c", &["b"]),
            step("d", &["c"]),
            step("e", &["d"])
        ])),
        finishes("a"),
        finishes("b"),
        finishes("c"),
        finishes("d"),
        finishes("e"),
        approving_reviewer(),
    ];
    let mut troupe = super::team_command(&sandbox, rules, &["--json"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Nobody reads stdout until the record says the run is over.
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let ended = loop {
        let status = std::fs::read_dir(sandbox.ws().join("sub_agent_results"))
            .ok()
            .and_then(|mut runs| runs.find_map(|r| r.ok()))
            .and_then(|run| std::fs::read_to_string(run.path().join("run.json")).ok())
            .and_then(|text| serde_json::from_str::<Value>(&text).ok())
            .and_then(|record| record["status"].as_str().map(str::to_string));
        if status
            .as_deref()
            .is_some_and(|s| s != "running" && s != "planning")
        {
            break true;
        }
        if std::time::Instant::now() > give_up {
            break false;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut out = String::new();
    std::io::Read::read_to_string(&mut troupe.stdout.take().unwrap(), &mut out).unwrap();
    let status = troupe.wait().unwrap();
    assert!(ended, "the run ended while its stdout was not read");
    assert_eq!(status.code(), Some(0));
    assert!(
        out.len() > 128 * 1024,
        "more than a pipe holds: {}",
        out.len()
    );
    assert!(out.lines().last().unwrap_or("").contains("run_finished"));
}
