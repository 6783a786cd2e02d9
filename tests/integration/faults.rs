//! Fault injection: signals to the parent, kills of the child at random
//! points, children that break the protocol in the middle of a team run.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Sandbox, processes_with, read_json, spawn_command, troupe};
use crate::team::{
    approving_reviewer, planner, run_dir, step, team_run, worker_rule, worker_writes,
};

/// `troupe run` started in the background, its output discarded.
pub(crate) fn start_run(sandbox: &Sandbox, rules: Vec<Value>, extra: &[&str]) -> Child {
    let model = sandbox.script(json!({"rules": rules}));
    let mut command = troupe();
    command
        .args(["run", "test goal", "--model", &model])
        .arg("--workspace")
        .arg(sandbox.ws())
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command.spawn().expect("start troupe run")
}

/// The workspace's first run directory, once there is one.
pub(crate) fn first_run(sandbox: &Sandbox) -> Option<PathBuf> {
    std::fs::read_dir(sandbox.ws().join("sub_agent_results"))
        .ok()?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.is_dir())
}

/// Waits, for a generous while, until `ready` holds.
pub(crate) fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let give_up = Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(Instant::now() < give_up, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn events(sandbox: &Sandbox) -> Vec<Value> {
    let Ok(mut dirs) = std::fs::read_dir(sandbox.ws().join("sub_agent_results")) else {
        return Vec::new();
    };
    let Some(Ok(dir)) = dirs.next() else {
        return Vec::new();
    };
    std::fs::read_to_string(dir.path().join("events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

pub(crate) fn has_event(sandbox: &Sandbox, kind: &str, step: &str) -> bool {
    events(sandbox)
        .iter()
        .any(|e| e["type"] == kind && e["step"] == step)
}

pub(crate) fn wait_exit(child: &mut Child) -> i32 {
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code().unwrap_or(-1);
        }
        if Instant::now() > give_up {
            let _ = child.kill();
            panic!("troupe did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn ctrl_c_interrupts_and_resume_completes_without_redoing_work() {
    let sandbox = Sandbox::new();
    let plan = planner(json!([
        step("quick", &[]),
        step("slow", &["quick"]),
        step("after", &["slow"])
    ]));
    let slow_rules = vec![
        plan.clone(),
        worker_rule("quick", worker_writes("quick", 0)),
        worker_rule("slow", worker_writes("slow", 30_000)),
        worker_rule("after", worker_writes("after", 0)),
        approving_reviewer(),
    ];
    let mut run = start_run(&sandbox, slow_rules, &[]);
    wait_for("the slow step to start", || {
        has_event(&sandbox, "step_started", "slow")
    });
    signal(&run, "-INT");
    assert_eq!(wait_exit(&mut run), 130);
    let dir = run_dir(&sandbox);
    let record = read_json(&dir.join("run.json"));
    assert_eq!(record["status"], "interrupted");
    let status = |record: &Value, id: &str| {
        record["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .unwrap()["status"]
            .clone()
    };
    assert_eq!(status(&record, "quick"), "completed");
    assert_eq!(status(&record, "slow"), "interrupted");
    assert_eq!(status(&record, "after"), "pending");
    let cut = read_json(&dir.join("slow/worker-1/.subagent/conversations.json"));
    assert_eq!(
        cut["status"], "terminated",
        "the interrupted transcript is sealed"
    );

    let fast_rules = vec![
        plan,
        worker_rule("quick", worker_writes("quick", 0)),
        worker_rule("slow", worker_writes("slow", 0)),
        worker_rule("after", worker_writes("after", 0)),
        approving_reviewer(),
    ];
    let resumed = team_run_resume(
        &sandbox,
        fast_rules,
        dir.file_name().unwrap().to_str().unwrap(),
    );
    assert_eq!(resumed.code, 0, "stderr:\n{}", resumed.stderr);
    let record = read_json(&dir.join("run.json"));
    assert_eq!(record["status"], "completed");
    assert_eq!(
        dir_names(&dir.join("quick")),
        ["review-1", "worker-1"],
        "the completed step did not run again"
    );
    assert_eq!(
        dir_names(&dir.join("slow")),
        ["review-1", "worker-1", "worker-1.cut-1"],
        "the interrupted attempt was done again under its own number, and what it left kept"
    );
    let slow = &record["steps"][1]["attempts"];
    assert_eq!(slow.as_array().unwrap().len(), 1, "{slow}");
    assert_eq!(slow[0]["worker"]["status"], "completed");
    let cut = &slow[0]["cut_short"][0];
    assert_eq!(cut["status"], "terminated", "{slow}");
    assert!(
        cut["dir"]
            .as_str()
            .unwrap()
            .ends_with("slow/worker-1.cut-1"),
        "{cut}"
    );
    let kept = read_json(&dir.join("slow/worker-1.cut-1/.subagent/conversations.json"));
    assert_eq!(kept["status"], "terminated", "its transcript is kept");
    assert_eq!(status(&record, "after"), "completed");
    assert!(events(&sandbox).iter().any(|e| e["type"] == "run_resumed"));
}

/// The README's demo, interrupted with Ctrl-C during step_1's second
/// attempt, resumes to the project an uninterrupted demo leaves: the cut
/// attempt is done again as attempt 2, which the script answers, and
/// what it left is kept beside it.
#[test]
fn the_demo_interrupted_in_its_second_attempt_resumes_to_the_whole_project() {
    let sandbox = Sandbox::new();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/team");
    let script = examples.join("script.json");
    let mut slow: Value = serde_json::from_str(&std::fs::read_to_string(&script).unwrap()).unwrap();
    let second = &mut slow["rules"][2];
    assert_eq!(
        (&second["step"], &second["attempt"]),
        (&json!("step_1"), &json!(2))
    );
    second["reply"][0]["delay_ms"] = json!(30_000);
    let slow_script = sandbox.root().join("slow-demo.json");
    std::fs::write(&slow_script, slow.to_string()).unwrap();
    let mut run = troupe()
        .arg("run")
        .arg("--goal-file")
        .arg(examples.join("goal.txt"))
        .arg("--workspace")
        .arg(sandbox.ws())
        .arg("--model")
        .arg(format!("scripted:{}", slow_script.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("step_1's second worker", || {
        first_run(&sandbox).is_some_and(|run| run.join("step_1/worker-2/.subagent").is_dir())
    });
    signal(&run, "-INT");
    assert_eq!(wait_exit(&mut run), 130);
    let dir = run_dir(&sandbox);

    let mut resume = troupe();
    resume
        .arg("run")
        .arg("--resume")
        .arg(dir.file_name().unwrap())
        .arg("--workspace")
        .arg(sandbox.ws())
        .arg("--model")
        .arg(format!("scripted:{}", script.display()));
    let resumed = crate::common::run(resume);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    crate::team::assert_demo_project(&sandbox.ws(), &resumed.stderr);
    let record = read_json(&dir.join("run.json"));
    assert_eq!(record["status"], "completed");
    let attempts = &record["steps"][0]["attempts"];
    assert_eq!(attempts.as_array().unwrap().len(), 2, "{attempts}");
    assert_eq!(attempts[1]["attempt"], 2);
    assert_eq!(attempts[1]["worker"]["status"], "completed");
    assert_eq!(attempts[1]["cut_short"][0]["status"], "terminated");
    assert!(
        dir.join("step_1/worker-2.cut-1/.subagent/conversations.json")
            .is_file()
    );
}

pub(crate) fn team_run_resume(
    sandbox: &Sandbox,
    rules: Vec<Value>,
    run_id: &str,
) -> crate::common::Run {
    team_run_resume_with(sandbox, rules, run_id, &[])
}

/// `troupe run --resume RUN` with `extra` arguments.
pub(crate) fn team_run_resume_with(
    sandbox: &Sandbox,
    rules: Vec<Value>,
    run_id: &str,
    extra: &[&str],
) -> crate::common::Run {
    let model = sandbox.script(json!({"rules": rules}));
    let mut command = troupe();
    command
        .args(["run", "--resume", run_id, "--model", &model])
        .arg("--workspace")
        .arg(sandbox.ws())
        .args(extra);
    crate::common::run(command)
}

fn dir_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn resume_refuses_a_changed_plan() {
    let sandbox = Sandbox::new();
    let rules = vec![
        planner(json!([step("a", &[])])),
        json!({"role": "worker", "reply": [{"error": "down", "status": 503}]}),
        approving_reviewer(),
    ];
    let team = team_run(&sandbox, rules.clone(), &["--max-replans", "0"]);
    assert_eq!(team.run.code, 1);
    std::fs::write(
        team.dir.join("plan.json"),
        json!({"summary": "edited", "steps": [{"id": "a", "description": "something else"}]})
            .to_string(),
    )
    .unwrap();
    let refused = team_run_resume(&sandbox, rules, team.dir.to_str().unwrap());
    assert_eq!(refused.code, 2);
    assert!(
        refused
            .stderr
            .contains("plan.json changed since the run started"),
        "{}",
        refused.stderr
    );
}

#[test]
fn a_killed_parent_leaves_no_agent_and_no_command_behind() {
    let sandbox = Sandbox::new();
    let marker = format!("troupe-orphan-marker-{}", std::process::id());
    let command = format!("sleep 3017; : {marker}");
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &[])])),
        json!({"role": "worker", "reply": [{"tool_calls": [{"name": "run_command", "arguments": {"command": command}}]}]}),
        approving_reviewer(),
    ];
    let mut run = start_run(&sandbox, rules, &[]);
    let ws = sandbox.ws().display().to_string();
    wait_for("both commands to run", || {
        processes_with(&marker).len() >= 2
    });
    let agents = format!("--task {ws}");
    assert!(
        !processes_with(&agents).is_empty(),
        "the agents run with task files in the workspace"
    );
    signal(&run, "-KILL");
    let _ = wait_exit(&mut run);
    wait_for("every agent and command to be gone", || {
        processes_with(&marker).is_empty() && processes_with(&agents).is_empty()
    });
}

#[test]
fn transcripts_and_run_json_parse_whenever_a_child_is_killed() {
    let mut seed: u64 = std::process::id() as u64 ^ 0x9e37_79b9_7f4a_7c15;
    for trial in 0..12 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let delay = Duration::from_millis(20 + (seed >> 33) % 400);
        let sandbox = Sandbox::new();
        let writes: Vec<Value> = (0..40)
            .map(|i| json!({"tool_calls": [{"name": "write_file", "arguments": {"path": format!("f{i}.txt"), "content": "x".repeat(2000)}}]}))
            .collect();
        let rules = vec![
            planner(json!([step("a", &[])])),
            worker_rule("a", writes),
            approving_reviewer(),
        ];
        let mut run = start_run(&sandbox, rules, &["--max-replans", "0"]);
        let ws = sandbox.ws().display().to_string();
        std::thread::sleep(delay);
        for pid in processes_with(&format!("--task {ws}")) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        let code = wait_exit(&mut run);
        assert!(code == 0 || code == 1, "trial {trial}: exit {code}");
        let dir = run_dir(&sandbox);
        let record = read_json(&dir.join("run.json"));
        assert!(
            record["status"] == "completed" || record["status"] == "failed",
            "trial {trial}: {record}"
        );
        for entry in walkdir::WalkDir::new(&dir)
            .into_iter()
            .filter_map(Result::ok)
        {
            let name = entry.file_name().to_string_lossy();
            if name == "conversations.json" || name == "result.json" || name == "task.json" {
                let text = std::fs::read_to_string(entry.path()).unwrap();
                let parsed: Result<Value, _> = serde_json::from_str(&text);
                assert!(
                    parsed.is_ok(),
                    "trial {trial}: {} is torn: {text}",
                    entry.path().display()
                );
            }
        }
    }
}

#[test]
fn children_that_break_the_protocol_fail_their_step_and_the_run_goes_on() {
    let sandbox = Sandbox::new();
    let real = env!("CARGO_BIN_EXE_troupe-agent");
    let hello = r#"echo '{"type":"hello","protocol":1,"agent_id":"x","role":"worker","pid":'$$'}'"#;
    let wrapper = sandbox.executable(
        "unreliable-agent",
        &format!(
            r#"task="$2"
if grep -q '"role": "worker"' "$task"; then
  case "$(grep -o '"step": "[a-z_]*"' "$task")" in
    *garbage*) {hello}; echo 'this is not json'; sleep 30;;
    *huge*) {hello}; head -c 20971520 /dev/zero | tr '\0' 'x'; echo; sleep 30;;
    *unknown*) {hello}; echo '{{"type":"from_the_future","x":1}}';;
    *silent*) {hello}; exit 0;;
  esac
fi
exec {real} "$@""#
        ),
    );
    let rules = vec![
        planner(json!([
            step("garbage", &[]),
            step("huge", &[]),
            step("unknown", &[]),
            step("silent", &[]),
            step("good", &[])
        ])),
        worker_rule("unknown", worker_writes("unknown", 0)),
        worker_rule("good", worker_writes("good", 0)),
        approving_reviewer(),
    ];
    let agent_bin = wrapper.to_str().unwrap().to_string();
    let team = team_run(
        &sandbox,
        rules,
        &[
            "--agent-bin",
            &agent_bin,
            "--max-replans",
            "0",
            "--kill-grace",
            "1",
        ],
    );
    assert_eq!(team.run.code, 1, "stderr:\n{}", team.run.stderr);
    let reason = |id: &str| {
        team.step(id)["reason"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(team.step("garbage")["status"], "failed");
    assert!(
        reason("garbage").contains("not JSON") && reason("garbage").contains("this is not json"),
        "{}",
        reason("garbage")
    );
    assert_eq!(team.step("huge")["status"], "failed");
    assert!(
        reason("huge").contains("16777216-byte limit"),
        "{}",
        reason("huge")
    );
    assert_eq!(team.step("silent")["status"], "failed");
    assert!(
        reason("silent").contains("without reporting a result"),
        "{}",
        reason("silent")
    );
    assert_eq!(
        team.step("unknown")["status"],
        "completed",
        "an unknown message type is skipped"
    );
    assert_eq!(
        team.step("good")["status"],
        "completed",
        "the rest of the plan ran"
    );
}

#[test]
fn ctrl_c_stops_a_spawned_agent_and_keeps_its_transcript() {
    let sandbox = Sandbox::new();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "begun.txt", "content": "x"}}]},
        {"delay_ms": 30000, "content": "never"}
    ]}]}));
    let mut command = spawn_command(&sandbox, 1, "t", &model);
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = command.spawn().unwrap();
    wait_for("the first file", || sandbox.ws().join("begun.txt").exists());
    signal(&child, "-INT");
    assert_eq!(wait_exit(&mut child), 130);
    let result: Value = serde_json::from_reader(child.stdout.take().unwrap()).unwrap();
    assert_eq!(result["status"], "terminated");
    assert_eq!(sandbox.transcript(1)["status"], "terminated");
}
