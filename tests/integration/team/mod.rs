//! Team runs through `troupe run`, on the scripted model: what run.json,
//! events.jsonl and the exit code say, and what the agents really saw.

mod limits;
mod plans;
mod powers;
mod replanning;
mod results;
mod reviews;
mod scheduling;

use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};

use crate::common::{Run, Sandbox, read_json, run, troupe};

/// A scripted planner reply holding `steps` as a plan.
pub fn planner(steps: Value) -> Value {
    let plan = json!({"summary": "a test plan", "steps": steps});
    json!({"role": "planner", "reply": [{"content": plan.to_string()}]})
}

/// A step of a plan.
pub fn step(id: &str, deps: &[&str]) -> Value {
    json!({"id": id, "description": format!("do {id}"), "type": "FILE_WRITE", "dependencies": deps})
}

/// Checks that the demo's whole project is in `workspace`, the
/// reviewer's fix to pom.xml included; `stderr` is the run's, for a
/// failure to show.
pub fn assert_demo_project(workspace: &std::path::Path, stderr: &str) {
    let project = workspace.join("demoapp");
    for file in [
        "pom.xml",
        "src/main/java/com/example/App.java",
        "COORDINATES.txt",
        "LAYOUT.txt",
    ] {
        assert!(project.join(file).is_file(), "{file}: {stderr}");
    }
    let pom = std::fs::read_to_string(project.join("pom.xml")).unwrap();
    assert!(pom.contains("<artifactId>demoapp</artifactId>"), "{pom}");
}

/// Worker replies: write `<id>.txt`, then finish successfully.
pub fn worker_writes(id: &str, delay_ms: u64) -> Vec<Value> {
    vec![
        json!({"delay_ms": delay_ms, "tool_calls": [{"name": "write_file", "arguments": {"path": format!("{id}.txt"), "content": id}}]}),
        json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": format!("wrote {id}.txt")}}]}),
    ]
}

pub fn worker_rule(id: &str, reply: Vec<Value>) -> Value {
    json!({"role": "worker", "step": id, "reply": reply})
}

pub fn verdict(approved: Value, issue: &str) -> Value {
    json!({"content": json!({"approved": approved, "summary": "checked", "issues": [issue], "suggestions": []}).to_string()})
}

pub fn approving_reviewer() -> Value {
    json!({"role": "reviewer", "reply": [verdict(json!(true), "none")]})
}

/// Two steps that can run at once, `a` and `b`, each writing its
/// `<id>.txt`, and a reviewer that approves both.
pub fn two_steps_at_once() -> Vec<Value> {
    vec![
        planner(json!([step("a", &[]), step("b", &[])])),
        worker_rule("a", worker_writes("a", 0)),
        worker_rule("b", worker_writes("b", 0)),
        approving_reviewer(),
    ]
}

/// `troupe validate` of a plan file holding `text`.
pub fn validate(sandbox: &Sandbox, text: &str) -> Run {
    let path = sandbox.root().join("plan.json");
    std::fs::write(&path, text).unwrap();
    let mut command = troupe();
    command.arg("validate").arg(&path);
    run(command)
}

/// What a team run left behind.
pub struct TeamRun {
    pub run: Run,
    pub dir: PathBuf,
}

impl TeamRun {
    pub fn record(&self) -> Value {
        read_json(&self.dir.join("run.json"))
    }

    pub fn events(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.dir.join("events.jsonl")).expect("events.jsonl");
        text.lines()
            .map(|line| {
                serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("bad event line ({e}): {line}"))
            })
            .collect()
    }

    pub fn events_of(&self, kind: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["type"] == kind)
            .collect()
    }

    pub fn step(&self, id: &str) -> Value {
        let record = self.record();
        record["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no step {id} in run.json"))
    }

    /// Milliseconds since the run started of the first event of `kind`
    /// for `step`.
    pub fn at(&self, kind: &str, step: &str) -> u64 {
        self.events()
            .iter()
            .find(|e| e["type"] == kind && e["step"] == step)
            .and_then(|e| e["elapsed_ms"].as_u64())
            .unwrap_or_else(|| panic!("no {kind} event for {step}"))
    }
}

/// `troupe run "test goal"` in the sandbox with `rules` as the scripted
/// model, plus `extra` arguments.
pub fn team_run(sandbox: &Sandbox, rules: Vec<Value>, extra: &[&str]) -> TeamRun {
    finish_team_run(sandbox, team_command(sandbox, rules, extra))
}

/// The command `team_run` runs, for a test that runs it another way.
pub fn team_command(sandbox: &Sandbox, rules: Vec<Value>, extra: &[&str]) -> Command {
    let model = sandbox.script(json!({"rules": rules}));
    let mut command = troupe();
    command
        .args(["run", "test goal", "--model", &model])
        .arg("--workspace")
        .arg(sandbox.ws())
        .args(extra);
    command
}

/// Runs a team run's command and finds what it left.
pub fn finish_team_run(sandbox: &Sandbox, command: Command) -> TeamRun {
    let run = run(command);
    let dir = run_dir(sandbox);
    TeamRun { run, dir }
}

/// The one run directory in the sandbox's workspace.
pub fn run_dir(sandbox: &Sandbox) -> PathBuf {
    let results = sandbox.ws().join("sub_agent_results");
    let mut runs: Vec<PathBuf> = std::fs::read_dir(&results)
        .unwrap_or_else(|e| panic!("no {}: {e}", results.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("run_"))
        .collect();
    assert_eq!(runs.len(), 1, "one run directory in {}", results.display());
    runs.pop().unwrap()
}
