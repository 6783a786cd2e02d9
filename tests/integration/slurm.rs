//! Agents placed by a real Slurm cluster through `srun`: a team, a
//! timeout, a crash, and the sbatch example. They need a cluster, so they
//! are ignored by a plain `cargo test`; `.ci/run` starts a one-node
//! cluster with `.ci/slurm-up` and runs them (`cargo test -- --ignored`),
//! where a missing cluster is a failure.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::{Sandbox, present, processes_with, read_json};
use crate::team::{
    approving_reviewer, planner, run_dir, step, team_run, worker_rule, worker_writes,
};

const SRUN: &str = "srun --ntasks=1 --quiet --unbuffered --job-name=troupe-{step_id}-{role} --";

/// The cluster's slurmd log when `.ci/slurm-up` started it, or `None` when
/// there is no cluster (and the test should skip).
fn cluster(test: &str) -> Option<Option<PathBuf>> {
    let up = Command::new("sinfo")
        .arg("-h")
        .output()
        .is_ok_and(|out| out.status.success());
    if !present(
        test,
        "a Slurm cluster that answers sinfo (.ci/slurm-up starts one)",
        up,
    ) {
        return None;
    }
    Some(std::env::var_os("TROUPE_SLURM_DIR").map(|dir| PathBuf::from(dir).join("slurmd.log")))
}

fn launched_steps(log: &Option<PathBuf>) -> Option<usize> {
    let log = log.as_ref()?;
    Some(
        std::fs::read_to_string(log)
            .ok()?
            .matches("launch task StepId=")
            .count(),
    )
}

#[test]
#[ignore = "needs a Slurm cluster: .ci/run starts one and runs these"]
fn a_team_runs_its_agents_as_job_steps() {
    let Some(log) = cluster("a_team_runs_its_agents_as_job_steps") else {
        return;
    };
    let before = launched_steps(&log);
    let sandbox = Sandbox::new();
    let where_am_i = vec![
        json!({"tool_calls": [{"name": "run_command", "arguments": {"command": "echo job=$SLURM_JOB_NAME step=$SLURM_STEP_ID > a.txt; cat a.txt"}}]}),
        json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "wrote a.txt"}}]}),
    ];
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &["a"]), step("c", &[])])),
        worker_rule("a", where_am_i),
        worker_rule("b", worker_writes("b", 0)),
        worker_rule("c", worker_writes("c", 0)),
        approving_reviewer(),
    ];
    let team = team_run(&sandbox, rules, &["--launcher", SRUN, "--apply"]);
    assert_eq!(team.run.code, 0, "stderr:\n{}", team.run.stderr);
    for id in ["a", "b", "c"] {
        assert_eq!(team.step(id)["status"], "completed");
        assert!(sandbox.ws().join(format!("{id}.txt")).exists());
    }
    let seen = std::fs::read_to_string(sandbox.ws().join("a.txt")).unwrap();
    assert!(
        seen.starts_with("job=troupe-a-worker step="),
        "the worker ran as a Slurm job step: {seen}"
    );
    if let (Some(before), Some(after)) = (before, launched_steps(&log)) {
        assert!(
            after - before >= 6,
            "slurmd launched a job step for each worker and reviewer"
        );
    }
}

#[test]
#[ignore = "needs a Slurm cluster: .ci/run starts one and runs these"]
fn a_timeout_under_slurm_cancels_the_step_and_keeps_partial_work() {
    if cluster("a_timeout_under_slurm_cancels_the_step_and_keeps_partial_work").is_none() {
        return;
    }
    let sandbox = Sandbox::new();
    let slow = vec![
        json!({"tool_calls": [{"name": "write_file", "arguments": {"path": "partial.txt", "content": "half"}}]}),
        json!({"tool_calls": [{"name": "run_command", "arguments": {"command": "sleep 120"}}]}),
    ];
    let rules = vec![
        planner(json!([step("slow", &[])])),
        worker_rule("slow", slow),
        approving_reviewer(),
    ];
    let team = team_run(
        &sandbox,
        rules,
        &[
            "--launcher",
            SRUN,
            "--timeout",
            "4",
            "--kill-grace",
            "2",
            "--max-replans",
            "0",
        ],
    );
    assert_eq!(team.run.code, 1, "stderr:\n{}", team.run.stderr);
    let worker = &team.step("slow")["attempts"][0]["worker"];
    assert_eq!(worker["status"], "timeout");
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("partial.txt")).unwrap(),
        "half"
    );
    let transcript = read_json(&team.dir.join("slow/worker-1/.subagent/conversations.json"));
    assert_eq!(transcript["status"], "timeout");
    let agents = format!("--task {}", sandbox.ws().display());
    let give_up = Instant::now() + Duration::from_secs(30);
    while !(processes_with(&agents).is_empty()
        && processes_with("sleep 120").is_empty()
        && no_steps("troupe-slow-worker"))
    {
        assert!(
            Instant::now() < give_up,
            "the job step or its processes outlived the timeout: agents {:?}, commands {:?}, step listed: {}",
            processes_with(&agents),
            processes_with("sleep 120"),
            !no_steps("troupe-slow-worker")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Whether Slurm shows no job named `name`.
fn no_steps(name: &str) -> bool {
    Command::new("squeue")
        .args(["-h", "-n", name])
        .output()
        .is_ok_and(|out| out.status.success() && out.stdout.is_empty())
}

#[test]
#[ignore = "needs a Slurm cluster: .ci/run starts one and runs these"]
fn a_child_that_crashes_under_slurm_fails_only_its_step() {
    if cluster("a_child_that_crashes_under_slurm_fails_only_its_step").is_none() {
        return;
    }
    let sandbox = Sandbox::new();
    let crash = vec![
        json!({"tool_calls": [{"name": "run_command", "arguments": {"command": "kill -9 $PPID"}}]}),
    ];
    let rules = vec![
        planner(json!([step("crash", &[]), step("fine", &[])])),
        worker_rule("crash", crash),
        worker_rule("fine", worker_writes("fine", 0)),
        approving_reviewer(),
    ];
    let team = team_run(&sandbox, rules, &["--launcher", SRUN, "--max-replans", "0"]);
    assert_eq!(team.run.code, 1, "stderr:\n{}", team.run.stderr);
    let crashed = team.step("crash");
    assert_eq!(crashed["status"], "failed");
    assert_eq!(crashed["attempts"][0]["worker"]["status"], "error");
    assert_eq!(team.step("fine")["status"], "completed");
}

#[test]
#[ignore = "needs a Slurm cluster: .ci/run starts one and runs these"]
fn the_sbatch_example_runs_a_team_inside_one_allocation() {
    let Some(log) = cluster("the_sbatch_example_runs_a_team_inside_one_allocation") else {
        return;
    };
    let before = launched_steps(&log);
    let sandbox = Sandbox::new();
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("sbatch")
        .arg("--wait")
        .arg(format!(
            "--output={}",
            sandbox.root().join("job.log").display()
        ))
        .arg(repo.join("examples/slurm/run.sbatch"))
        .current_dir(&repo)
        .env("TROUPE", env!("CARGO_BIN_EXE_troupe"))
        .env("WORKSPACE", sandbox.ws())
        .env("NO_COLOR", "1")
        .output()
        .expect("sbatch");
    let job_log = std::fs::read_to_string(sandbox.root().join("job.log")).unwrap_or_default();
    assert!(
        out.status.success(),
        "sbatch failed: {}\n{job_log}",
        String::from_utf8_lossy(&out.stderr)
    );
    let record = read_json(&run_dir(&sandbox).join("run.json"));
    assert_eq!(record["status"], "completed", "{job_log}");
    if let (Some(before), Some(after)) = (before, launched_steps(&log)) {
        assert!(
            after - before >= 8,
            "the batch step and the agents' steps were launched"
        );
    }
}
