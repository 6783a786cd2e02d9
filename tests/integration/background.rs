//! Background agents driven from a shell: spawn returns at once, status,
//! wait and terminate from another process, and lost supervisors.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Run, Sandbox, alive, cli, read_json, run, spawn_command, troupe};

/// A worker that takes about `turns * latency` to write two files.
fn slow_script(sandbox: &Sandbox, latency_ms: u64) -> String {
    sandbox.script(json!({"latency_ms": latency_ms, "rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "first.txt", "content": "1"}}], "usage": {"prompt": 10, "completion": 5}},
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "first.txt"}}], "usage": {"prompt": 10, "completion": 5}},
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "second.txt", "content": "2"}}], "usage": {"prompt": 10, "completion": 5}},
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "wrote both"}}]}
    ]}]}))
}

fn background(sandbox: &Sandbox, id: u32, model: &str, extra: &[&str]) -> Run {
    let mut command = troupe();
    command
        .args([
            "spawn",
            "--id",
            &id.to_string(),
            "--summary",
            "bg",
            "--task",
            "write two files",
            "--background",
        ])
        .arg("--workspace")
        .arg(sandbox.ws())
        .args(["--model", model])
        .args(extra);
    run(command)
}

fn status_of(sandbox: &Sandbox, id: u32) -> Value {
    let out = cli(sandbox, &["status", &id.to_string(), "--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    out.json()["agents"][0].clone()
}

fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let give_up = Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(Instant::now() < give_up, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_background_agent_runs_on_while_status_and_wait_follow_it() {
    let sandbox = Sandbox::new();
    let model = slow_script(&sandbox, 700);
    let started = background(&sandbox, 1, &model, &[]);
    assert_eq!(started.code, 0, "stderr:\n{}", started.stderr);
    let answer = started.json();
    assert_eq!(answer["status"], "running");
    assert_eq!(answer["background"], true);
    assert_eq!(answer["agent_id"], 1);
    assert!(
        !sandbox.ws().join("second.txt").exists(),
        "spawn returned before the agent finished"
    );

    let first = status_of(&sandbox, 1);
    assert_eq!(first["status"], "running");
    wait_until("the counters to advance", || {
        let now = status_of(&sandbox, 1);
        now["status"] != "running" || now["token_usage"]["total"].as_u64().unwrap_or(0) > 0
    });
    let later = status_of(&sandbox, 1);
    assert!(
        later["runtime_seconds"].as_f64() > first["runtime_seconds"].as_f64(),
        "{first} then {later}"
    );
    assert!(later["last_action"].is_string());

    let waited = cli(&sandbox, &["wait", "1"]);
    assert_eq!(waited.code, 0, "{}", waited.stderr);
    let result = waited.json();
    assert_eq!(result["status"], "completed");
    assert_eq!(result["result_summary"], "wrote both");
    assert!(sandbox.ws().join("first.txt").exists() && sandbox.ws().join("second.txt").exists());
    assert_eq!(status_of(&sandbox, 1)["status"], "completed");
    let table = cli(&sandbox, &["status"]);
    assert!(
        table
            .stdout
            .lines()
            .any(|l| l.starts_with("1 ") && l.contains("completed")),
        "{}",
        table.stdout
    );
}

#[test]
fn the_agent_outlives_the_shell_that_started_it() {
    let sandbox = Sandbox::new();
    let model = slow_script(&sandbox, 400);
    let spawn_line = format!(
        "{} spawn --id 1 --summary bg --task write --background --workspace {} --model {} > /dev/null",
        env!("CARGO_BIN_EXE_troupe"),
        sandbox.ws().display(),
        model
    );
    let mut shell = Command::new("sh");
    shell
        .arg("-c")
        .arg(&spawn_line)
        .process_group(0)
        .stdin(Stdio::null());
    let mut shell = shell.spawn().unwrap();
    let group = shell.id() as i32;
    assert!(shell.wait().unwrap().success());
    // What a closing terminal does to the shell's process group.
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(group),
        nix::sys::signal::Signal::SIGHUP,
    );
    let waited = cli(&sandbox, &["wait", "1", "--timeout", "60"]);
    assert_eq!(waited.code, 0, "{}", waited.stderr);
    assert_eq!(waited.json()["status"], "completed");
}

#[test]
fn terminate_keeps_partial_work_and_leaves_no_process() {
    let sandbox = Sandbox::new();
    let model = slow_script(&sandbox, 1500);
    assert_eq!(background(&sandbox, 3, &model, &[]).code, 0);
    wait_until("the first file", || sandbox.ws().join("first.txt").exists());
    let supervisor_pid = status_of(&sandbox, 3)["supervisor_pid"].as_i64().unwrap() as i32;
    let status_file = read_json(&sandbox.agent_dir(3).join(".subagent/status.json"));
    let child_pid = status_file["agent_pid"].as_i64().unwrap() as i32;
    let stopped = cli(&sandbox, &["terminate", "3"]);
    assert_eq!(stopped.code, 0, "{}", stopped.stderr);
    let answer = stopped.json();
    assert_eq!(answer["success"], true);
    assert_eq!(answer["status"], "terminated");
    assert_eq!(answer["partial_results"], true);
    assert_eq!(answer["deliverables_dir"], "sub_agent_results/agent_3");
    assert!(
        sandbox.ws().join("first.txt").exists(),
        "partial work is kept"
    );
    assert!(!sandbox.ws().join("second.txt").exists());
    assert_eq!(sandbox.transcript(3)["status"], "terminated");
    assert_eq!(status_of(&sandbox, 3)["status"], "terminated");
    wait_until("the supervisor and the agent to be gone", || {
        !alive(supervisor_pid) && !alive(child_pid)
    });

    let again = cli(&sandbox, &["terminate", "3"]);
    assert_eq!(again.code, 1);
    assert!(
        again.json()["message"]
            .as_str()
            .unwrap()
            .contains("is not running")
    );
}

#[test]
fn duplicates_the_concurrency_limit_and_shared_directories_are_refused() {
    let sandbox = Sandbox::new();
    let model = slow_script(&sandbox, 1500);
    assert_eq!(background(&sandbox, 1, &model, &[]).code, 0);

    let duplicate = background(&sandbox, 1, &model, &[]);
    assert_eq!(duplicate.code, 2);
    assert!(
        duplicate.stderr.contains("in use by agent 1"),
        "{}",
        duplicate.stderr
    );

    let shared = background(
        &sandbox,
        2,
        &model,
        &["--deliverables-dir", "sub_agent_results/agent_1"],
    );
    assert_eq!(shared.code, 2);
    assert!(
        shared.stderr.contains("in use by agent 1"),
        "{}",
        shared.stderr
    );

    let too_many = background(&sandbox, 3, &model, &["--max-concurrent", "1"]);
    assert_eq!(too_many.code, 75, "busy, not a usage error");
    assert!(
        too_many.stderr.contains("--max-concurrent 1") && too_many.stderr.contains("--queue"),
        "{}",
        too_many.stderr
    );

    let blocking = spawn_command(&sandbox, 1, "t", &model);
    let refused = run(blocking);
    assert_eq!(
        refused.code, 2,
        "a blocking spawn of a running id is refused too"
    );
    assert_eq!(cli(&sandbox, &["terminate", "1"]).code, 0);
}

#[test]
fn a_supervisor_killed_without_a_word_is_lost() {
    let sandbox = Sandbox::new();
    let model = slow_script(&sandbox, 1500);
    let started = background(&sandbox, 5, &model, &[]);
    let supervisor = started.json()["supervisor_pid"].as_i64().unwrap() as i32;
    wait_until("the agent to start working", || {
        status_of(&sandbox, 5)["last_action"] != "starting"
    });
    let before = status_of(&sandbox, 5);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(supervisor),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_until("the lock to be free", || {
        status_of(&sandbox, 5)["status"] == "lost"
    });
    let lost = status_of(&sandbox, 5);
    assert_eq!(
        lost["last_action"], before["last_action"],
        "the last known state is kept"
    );
    assert_eq!(lost["summary"], "bg");
    let waited = cli(&sandbox, &["wait", "5"]);
    assert_eq!(waited.code, 1, "a lost agent did not complete");
    assert_eq!(waited.json()["status"], "lost");
}

#[test]
fn on_finish_runs_with_the_result_file() {
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let note = sandbox.root().join("finished.txt");
    let hook = sandbox.executable(
        "hook",
        &format!("echo \"$1 $TROUPE_RESULT\" > {}", note.display()),
    );
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "done"}}]}
    ]}]}));
    let mut command = spawn_command(&sandbox, 1, "t", &model);
    command.args(["--on-finish", &format!("{} \"$1\"", hook.display())]);
    assert_eq!(run(command).code, 0);
    let written = std::fs::read_to_string(&note).unwrap();
    let result = sandbox.agent_dir(1).join(".subagent/result.json");
    let result = result.canonicalize().unwrap().display().to_string();
    assert_eq!(written.trim(), format!("{result} {result}"));

    let echoed = sandbox.root().join("echoed.txt");
    let mut command = spawn_command(&sandbox, 2, "t", &model);
    command.args(["--on-finish", &format!("echo $1 > {}", echoed.display())]);
    assert_eq!(run(command).code, 0);
    let line = std::fs::read_to_string(&echoed).unwrap();
    assert_eq!(line.split_whitespace().count(), 1, "the path once: {line}");
}

#[test]
fn show_follow_streams_a_running_agent_until_it_ends() {
    let sandbox = Sandbox::new();
    let model = slow_script(&sandbox, 400);
    assert_eq!(background(&sandbox, 6, &model, &[]).code, 0);
    let followed = cli(&sandbox, &["show", "6", "--follow"]);
    assert_eq!(followed.code, 0, "{}", followed.stderr);
    let text = followed.stdout;
    for call in ["write_file", "read_file", "finish_task"] {
        assert!(text.contains(&format!("-> {call}")), "{call} in:\n{text}");
    }
    assert!(
        text.trim_end()
            .lines()
            .any(|l| l.starts_with("agent 6 · completed")),
        "ends with the final header:\n{text}"
    );
}

#[test]
fn a_running_transcript_is_its_journal_until_it_is_sealed() {
    let sandbox = Sandbox::new();
    let model = slow_script(&sandbox, 1000);
    assert_eq!(background(&sandbox, 8, &model, &[]).code, 0);
    let subagent = sandbox.ws().join("sub_agent_results/agent_8/.subagent");
    let shown = || cli(&sandbox, &["show", "8", "--json"]);
    wait_until("a tool result in the running transcript", || {
        let out = shown();
        out.code == 0
            && out.json()["messages"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"))
    });
    let running = shown().json();
    assert_eq!(running["status"], "running", "{running}");
    assert_eq!(running["agent_id"], 8);
    assert!(subagent.join("journal.jsonl").is_file());
    assert!(
        !subagent.join("conversations.json").exists(),
        "no whole copy is rewritten while the agent runs"
    );
    assert_eq!(cli(&sandbox, &["wait", "8"]).code, 0);
    let sealed = read_json(&subagent.join("conversations.json"));
    assert_eq!(sealed["status"], "completed");
    assert!(
        !subagent.join("journal.jsonl").exists(),
        "the sealed transcript holds it all"
    );
    let messages = sealed["messages"].as_array().unwrap();
    let opening = &running["messages"].as_array().unwrap()[..];
    assert_eq!(&messages[..opening.len()], opening, "nothing rewritten");
}

// Issue 23, item 7: a script could not tell a full house from a bad flag,
// nor wait for a slot, nor for the first of its agents.
#[test]
fn a_queued_spawn_waits_for_a_slot_and_wait_takes_any_or_all() {
    let sandbox = Sandbox::new();
    let model = slow_script(&sandbox, 1500);
    assert_eq!(
        background(&sandbox, 1, &model, &["--max-concurrent", "1"]).code,
        0
    );
    let queued = background(&sandbox, 2, &model, &["--max-concurrent", "1", "--queue"]);
    assert_eq!(queued.code, 0, "{}", queued.stderr);
    assert!(
        queued.stderr.contains("--queue: waiting for a slot"),
        "{}",
        queued.stderr
    );
    assert_eq!(
        status_of(&sandbox, 1)["status"],
        "completed",
        "the queued one started once the first had ended"
    );
    let any = cli(&sandbox, &["wait", "1", "2", "--any"]);
    assert_eq!(any.code, 0, "{}", any.stderr);
    let lines: Vec<Value> = any
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "the first to end, alone: {}", any.stdout);
    assert_eq!(lines[0]["agent_id"], 1);
    let all = cli(&sandbox, &["wait", "--all", "--timeout", "60"]);
    assert_eq!(all.code, 0, "{}", all.stderr);
    assert_eq!(all.stdout.lines().count(), 2, "{}", all.stdout);
    assert_eq!(status_of(&sandbox, 2)["status"], "completed");
    // Each agent once (issue 43: it returned agent 1 every time, so a
    // script could not loop on it): 2 next, then exit 3.
    let next = cli(&sandbox, &["wait", "1", "2", "--any"]);
    assert_eq!(next.code, 0, "{}", next.stderr);
    assert_eq!(next.json()["agent_id"], 2, "{}", next.stdout);
    let none = cli(&sandbox, &["wait", "1", "2", "--any"]);
    assert_eq!(none.code, 3, "{}", none.stderr);
    assert!(
        none.stderr
            .contains("every one of these agents was returned by an earlier wait --any"),
        "{}",
        none.stderr
    );
    assert!(none.stdout.is_empty(), "{}", none.stdout);
    // A new agent at an id is new to wait --any.
    let again = slow_script(&sandbox, 0);
    assert_eq!(background(&sandbox, 2, &again, &[]).code, 0);
    let fresh = cli(&sandbox, &["wait", "1", "2", "--any", "--timeout", "60"]);
    assert_eq!(fresh.code, 0, "{}", fresh.stderr);
    assert_eq!(fresh.json()["agent_id"], 2, "{}", fresh.stdout);
}

// Issue 43: terminate took one id while status and wait take several.
#[test]
fn terminate_takes_several_ids_or_all_at_once() {
    let sandbox = Sandbox::new();
    let model = slow_script(&sandbox, 20_000);
    for id in 1..=3 {
        assert_eq!(background(&sandbox, id, &model, &[]).code, 0);
    }
    let two = cli(&sandbox, &["terminate", "1", "2", "--patience", "10"]);
    assert_eq!(two.code, 0, "{}", two.stderr);
    let answers: Vec<Value> = two
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(answers.len(), 2, "{}", two.stdout);
    for (answer, id) in answers.iter().zip([1, 2]) {
        assert_eq!(answer["agent_id"], id);
        assert_eq!(answer["success"], true, "{answer}");
    }
    assert_eq!(status_of(&sandbox, 3)["status"], "running");
    let rest = cli(&sandbox, &["terminate", "--all", "--patience", "10"]);
    assert_eq!(rest.code, 0, "{}", rest.stderr);
    assert_eq!(
        rest.json()["agent_id"],
        3,
        "only the one still running: {}",
        rest.stdout
    );
    for id in 1..=3 {
        assert_eq!(status_of(&sandbox, id)["status"], "terminated");
    }
    let none = cli(&sandbox, &["terminate", "--all"]);
    assert_eq!(none.code, 0, "{}", none.stderr);
    assert!(none.stderr.contains("is running"), "{}", none.stderr);
}

// Issue 43: `--task-file -` did not read standard input, and `--id abc`
// answered with Rust's "invalid digit found in string".
#[test]
fn a_task_comes_from_standard_input_and_a_bad_id_is_said_in_troupe_s_words() {
    let sandbox = Sandbox::new();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "done"}}]}
    ]}]}));
    let mut command = troupe();
    command
        .args([
            "spawn",
            "--id",
            "1",
            "--summary",
            "piped",
            "--task-file",
            "-",
        ])
        .arg("--workspace")
        .arg(sandbox.ws())
        .args(["--model", &model])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"the task, from a heredoc\n")
        .unwrap();
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let task = read_json(&sandbox.agent_dir(1).join(".subagent/task.json"));
    assert_eq!(task["task"], "the task, from a heredoc\n");
    let bad = cli(
        &sandbox,
        &["spawn", "--id", "abc", "--summary", "s", "--task", "t"],
    );
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(
        bad.stderr
            .contains("must be a number from 1 (the agent's directory is agent_N")
            && !bad.stderr.contains("invalid digit"),
        "{}",
        bad.stderr
    );
}
