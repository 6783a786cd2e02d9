//! The sandbox and the scrubbed environment, seen from inside a child's
//! commands. Landlock tests print why they skip where the kernel lacks it.

use serde_json::{Value, json};

use crate::common::{
    Sandbox, full_sandbox, full_sandbox_abi, present, run, spawn, spawn_command, tool_results,
};
use crate::team::{planner, step, team_run, worker_rule, worker_writes};

/// A scripted worker that runs `commands` in one turn, then finishes.
fn commands_script(sandbox: &Sandbox, commands: &[&str]) -> String {
    let calls: Vec<Value> = commands
        .iter()
        .map(|c| json!({"name": "run_command", "arguments": {"command": c}}))
        .collect();
    sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": calls},
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "ran"}}]}
    ]}]}))
}

/// One turn of `commands` through run_command, then finish; the results.
fn run_commands(sandbox: &Sandbox, commands: &[&str], extra: &[&str]) -> Vec<Value> {
    let model = commands_script(sandbox, commands);
    let run = spawn(sandbox, 1, "run commands", &model, extra);
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    let mut results = tool_results(&sandbox.transcript(1));
    results.pop();
    results
}

#[test]
fn a_worker_writes_only_inside_the_workspace() {
    if !full_sandbox("a_worker_writes_only_inside_the_workspace") {
        return;
    }
    let sandbox = Sandbox::new();
    let sibling = sandbox.root().join("sibling");
    let home = sandbox.root().join("home");
    std::fs::create_dir_all(&sibling).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let touch_sibling = format!("touch {}/escaped.txt", sibling.display());
    let commands = [
        touch_sibling.as_str(),
        "touch \"$HOME/escaped.txt\"",
        "echo fine > inside.txt && echo $TMPDIR > tmpdir.txt && touch \"$TMPDIR/scratch\"",
    ];
    let script = commands_script(&sandbox, &commands);
    let mut command = spawn_command(&sandbox, 1, "try to escape", &script);
    command.args(["--sandbox", "required"]).env("HOME", &home);
    let out = run(command);
    assert_eq!(out.code, 0, "stderr:\n{}", out.stderr);
    let results = tool_results(&sandbox.transcript(1));
    // The sibling and $HOME are in /tmp, which the agent sees empty.
    for escape in &results[..2] {
        assert_eq!(escape["success"], false, "{escape}");
        assert!(
            escape["content"]
                .as_str()
                .unwrap()
                .contains("No such file or directory"),
            "{escape}"
        );
    }
    assert_eq!(
        std::fs::read_dir(&sibling).unwrap().count(),
        0,
        "nothing in the sibling directory"
    );
    assert_eq!(
        std::fs::read_dir(&home).unwrap().count(),
        0,
        "nothing in $HOME"
    );
    assert_eq!(results[2]["success"], true, "{}", results[2]);
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("inside.txt")).unwrap(),
        "fine\n"
    );
    let tmpdir = std::fs::read_to_string(sandbox.ws().join("tmpdir.txt")).unwrap();
    assert_eq!(tmpdir.trim(), "/tmp", "the agent's own /tmp");
    assert!(
        !sandbox.root().join("scratch").exists() && !std::path::Path::new("/tmp/scratch").exists(),
        "the scratch file stayed in the agent's private /tmp"
    );
    let stats = &out.json()["stats"]["sandbox"];
    assert_eq!(stats["status"], "fully_enforced");
    assert_eq!(stats["network_denied"], true);
    for layer in ["mount", "pid", "network", "ipc"] {
        assert!(
            stats["namespaces"]
                .as_array()
                .unwrap()
                .contains(&json!(layer)),
            "{stats}"
        );
    }
    for layer in [
        "records_read_only",
        "repository_read_only",
        "host_sockets_masked",
        "seccomp",
        "scoped",
    ] {
        assert_eq!(stats[layer], true, "{layer}: {stats}");
    }
}

#[test]
fn required_mode_runs_only_where_the_kernel_enforces_everything() {
    let sandbox = Sandbox::new();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "ok"}}]}
    ]}]}));
    let run = spawn(
        &sandbox,
        1,
        "be confined",
        &model,
        &["--sandbox", "required"],
    );
    match full_sandbox_abi() {
        Some(abi) => {
            assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
            assert_eq!(run.json()["stats"]["sandbox"]["abi"], abi);
        }
        None => {
            assert_eq!(run.code, 1);
            let error = run.json()["error"].as_str().unwrap().to_string();
            assert!(error.contains("--sandbox required"), "{error}");
        }
    }
    let off = spawn(&sandbox, 2, "be free", &model, &["--sandbox", "off"]);
    assert_eq!(off.code, 0);
    assert_eq!(off.json()["stats"]["sandbox"]["status"], "off");
}

#[test]
fn a_reviewer_can_check_but_not_change_the_workspace() {
    if !full_sandbox("a_reviewer_can_check_but_not_change_the_workspace") {
        return;
    }
    let sandbox = Sandbox::new();
    let rules = vec![
        planner(json!([step("step_1", &[])])),
        worker_rule("step_1", worker_writes("step_1", 0)),
        json!({"role": "reviewer", "reply": [
            {"tool_calls": [
                {"name": "run_command", "arguments": {"command": "touch reviewer-was-here.txt"}},
                {"name": "run_command", "arguments": {"command": "cat step_1.txt && echo check > \"$TMPDIR/notes\" && cat \"$TMPDIR/notes\""}},
                {"name": "read_file", "arguments": {"path": "step_1.txt"}}
            ]},
            {"content": "{\"approved\": true, \"summary\": \"checked\"}"}
        ]}),
    ];
    let team = team_run(&sandbox, rules, &["--sandbox", "required"]);
    assert_eq!(team.run.code, 0, "stderr:\n{}", team.run.stderr);
    let review = crate::common::read_json(
        &team
            .dir
            .join("step_1/review-1/.subagent/conversations.json"),
    );
    let results = tool_results(&review);
    assert_eq!(results[0]["success"], false);
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .contains("Read-only file system"),
        "{}",
        results[0]
    );
    assert!(!sandbox.ws().join("reviewer-was-here.txt").exists());
    assert_eq!(
        results[1]["success"], true,
        "checks that write only to TMPDIR work: {}",
        results[1]
    );
    let checked = results[1]["content"].as_str().unwrap();
    assert!(
        checked.contains("step_1") && checked.contains("check"),
        "{checked}"
    );
    assert_eq!(results[2]["content"], "step_1");
    assert_eq!(
        team.record()["totals"]["sandbox"]["status"],
        "fully_enforced"
    );
    assert!(
        team.run.stderr.contains("sandbox: fully enforced"),
        "{}",
        team.run.stderr
    );
}

#[test]
fn commands_cannot_open_tcp_connections_unless_allowed() {
    let test = "commands_cannot_open_tcp_connections_unless_allowed";
    let abi = full_sandbox_abi().unwrap_or(0);
    if !present(test, "Landlock's network rules (ABI 4)", abi >= 4) {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected'");

    // The agent's network namespace has its own loopback, where nothing
    // listens on the host's port; without one, Landlock refuses.
    let sandbox = Sandbox::new();
    let results = run_commands(&sandbox, &[&connect], &[]);
    assert_eq!(results[0]["success"], false, "{}", results[0]);
    let said = results[0]["content"].as_str().unwrap();
    assert!(
        said.contains("Connection refused") || said.contains("Permission denied"),
        "{}",
        results[0]
    );
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_err(), "nothing reached the host");
    listener.set_nonblocking(false).unwrap();

    let sandbox = Sandbox::new();
    let results = run_commands(&sandbox, &[&connect], &["--allow-network"]);
    assert_eq!(results[0]["success"], true, "{}", results[0]);
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .contains("connected")
    );
    listener.set_nonblocking(true).unwrap();
    assert!(
        listener.accept().is_ok(),
        "the listener saw the allowed connection"
    );
}

#[test]
fn the_api_key_never_reaches_a_child() {
    let sandbox = Sandbox::new();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "run_command", "arguments": {"command": "env"}}]},
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "looked"}}]}
    ]}]}));
    let mut command = spawn_command(&sandbox, 1, "print env", &model);
    command
        .args(["--pass-env", "TROUPE_TEST_PASSED"])
        .env("OPENAI_API_KEY", "sk-very-secret")
        .env("TROUPE_TEST_PASSED", "visible")
        .env("SOME_OTHER_SETTING", "hidden");
    let out = run(command);
    assert_eq!(out.code, 0, "stderr:\n{}", out.stderr);
    let env = tool_results(&sandbox.transcript(1))[0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        !env.contains("sk-very-secret") && !env.contains("OPENAI_API_KEY"),
        "{env}"
    );
    assert!(
        !env.contains("SOME_OTHER_SETTING"),
        "the environment is scrubbed: {env}"
    );
    assert!(
        env.contains("TROUPE_TEST_PASSED=visible"),
        "--pass-env passes: {env}"
    );
    assert!(env.contains("TMPDIR="), "{env}");

    let mut refused = spawn_command(&sandbox, 2, "x", &model);
    refused.args(["--pass-env", "OPENAI_API_KEY"]);
    let out = run(refused);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("would hand the API key"),
        "{}",
        out.stderr
    );
}

/// `commands` run under `--read-scope scope` (and `extra`); their outputs.
fn reads_under(sandbox: &Sandbox, extra: &[&str], commands: &[&str]) -> Vec<String> {
    let model = commands_script(sandbox, commands);
    let mut command = spawn_command(sandbox, 1, "read around", &model);
    command.args(extra);
    let out = run(command);
    assert_eq!(out.code, 0, "stderr:\n{}", out.stderr);
    tool_results(&sandbox.transcript(1))
        .iter()
        .map(|r| r["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn reads_stay_in_the_read_scope() {
    if !full_sandbox("reads_stay_in_the_read_scope") {
        return;
    }
    let sandbox = Sandbox::new();
    let elsewhere = crate::common::visible_elsewhere();
    let hidden_anyway = crate::common::hidden_from_agents(elsewhere.path());
    let private = elsewhere.path().join("private");
    std::fs::create_dir_all(&private).unwrap();
    std::fs::write(private.join("notes.txt"), "private notes").unwrap();
    let in_tmp = sandbox.root().join("in-tmp");
    std::fs::create_dir_all(&in_tmp).unwrap();
    std::fs::write(in_tmp.join("notes.txt"), "notes in /tmp").unwrap();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    std::fs::write(sandbox.ws().join("mine.txt"), "workspace file").unwrap();
    let read_private = format!("cat {}/notes.txt", private.display());
    let read_in_tmp = format!("cat {}/notes.txt", in_tmp.display());
    let commands = [
        read_private.as_str(),
        "cat mine.txt",
        "head -c 5 /etc/passwd",
        read_in_tmp.as_str(),
    ];

    let system = reads_under(&sandbox, &[], &commands);
    // Denied by Landlock, or not in the view at all (the target directory
    // lies in a top-level directory no read scope but `all` opens).
    assert!(
        system[0].contains("Permission denied") || system[0].contains("No such file"),
        "{}",
        system[0]
    );
    assert!(system[1].contains("workspace file"), "{}", system[1]);
    assert!(system[2].contains("root:"), "{}", system[2]);
    assert!(system[3].contains("No such file"), "{}", system[3]);

    let allowed = reads_under(
        &sandbox,
        &[
            "--allow-read",
            private.to_str().unwrap(),
            "--allow-read",
            in_tmp.to_str().unwrap(),
        ],
        &commands,
    );
    assert!(allowed[0].contains("private notes"), "{}", allowed[0]);
    assert!(allowed[3].contains("notes in /tmp"), "{}", allowed[3]);

    // A config file's list is a list: a `:` in a path is part of it.
    let colon = elsewhere.path().join("a:b");
    std::fs::create_dir_all(&colon).unwrap();
    std::fs::write(colon.join("notes.txt"), "notes behind a colon").unwrap();
    let config = sandbox.root().join("troupe.toml");
    std::fs::write(
        &config,
        format!("allow_read = [{:?}]\n", colon.display().to_string()),
    )
    .unwrap();
    let read_colon = format!("cat '{}/notes.txt'", colon.display());
    let listed = reads_under(
        &sandbox,
        &["--config", config.to_str().unwrap()],
        &[read_colon.as_str()],
    );
    assert!(listed[0].contains("notes behind a colon"), "{}", listed[0]);

    let everything = reads_under(&sandbox, &["--read-scope", "all"], &commands);
    let private_read = match hidden_anyway {
        true => "No such file",
        false => "private notes",
    };
    assert!(everything[0].contains(private_read), "{}", everything[0]);
    assert!(everything[3].contains("No such file"), "{}", everything[3]);

    // With only the workspace readable, no program of the system runs:
    // that scope is for agents that use the file tools alone.
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [
            {"name": "read_file", "arguments": {"path": "mine.txt"}},
            {"name": "run_command", "arguments": {"command": "cat mine.txt"}}
        ]},
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "read"}}]}
    ]}]}));
    let out = spawn(
        &sandbox,
        2,
        "read only here",
        &model,
        &["--read-scope", "workspace"],
    );
    assert_eq!(out.code, 0, "stderr:\n{}", out.stderr);
    let results = tool_results(&sandbox.transcript(2));
    assert_eq!(results[0]["content"], "workspace file");
    assert_eq!(results[1]["success"], false, "{}", results[1]);

    let refused = spawn(&sandbox, 3, "x", &model, &["--allow-read", "/no/such/dir"]);
    assert_eq!(refused.code, 2);
    assert!(
        refused.stderr.contains("--allow-read /no/such/dir"),
        "{}",
        refused.stderr
    );
}
