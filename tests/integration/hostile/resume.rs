//! Attack 7, resume: a run picked up again by a relative path.

use serde_json::json;

use crate::common::{Sandbox, read_json, run, troupe};
use crate::team::{approving_reviewer, planner, step, team_run, worker_rule, worker_writes};

// Regression: `troupe run --resume ws/sub_agent_results/run_X --workspace ws`
// failed every resumed step with "cannot read the task file", burning an
// attempt and a replan.
#[test]
fn a_run_resumed_by_a_relative_path_completes() {
    let sandbox = Sandbox::new();
    let failing = vec![
        planner(json!([step("a", &[])])),
        json!({"role": "worker", "reply": [{"error": "down", "status": 503}]}),
        approving_reviewer(),
    ];
    let team = team_run(&sandbox, failing, &["--max-replans", "0"]);
    assert_eq!(team.run.code, 1, "stderr:\n{}", team.run.stderr);
    let run_id = team.dir.file_name().unwrap().to_str().unwrap().to_string();

    let working = sandbox.script(json!({"rules": [
        worker_rule("a", worker_writes("a", 0)),
        approving_reviewer()
    ]}));
    let mut command = troupe();
    command
        .current_dir(sandbox.root())
        .args(["run", "--resume", &format!("ws/sub_agent_results/{run_id}")])
        .args(["--workspace", "ws", "--model", &working]);
    let resumed = run(command);
    assert_eq!(resumed.code, 0, "stderr:\n{}", resumed.stderr);
    let record = read_json(&team.dir.join("run.json"));
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["replans"], 0);
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("a.txt")).unwrap(),
        "a"
    );

    let elsewhere = Sandbox::new();
    std::fs::create_dir_all(elsewhere.ws()).unwrap();
    let mut wrong = troupe();
    wrong
        .args(["run", "--resume"])
        .arg(&team.dir)
        .arg("--workspace")
        .arg(elsewhere.ws())
        .args(["--model", &working]);
    let refused = run(wrong);
    assert_eq!(refused.code, 2);
    assert!(
        refused.stderr.contains("is not a run of the workspace"),
        "{}",
        refused.stderr
    );
}
