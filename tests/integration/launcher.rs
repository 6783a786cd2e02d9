//! `--launcher`, with a stand-in launcher that logs its argv and then runs
//! the rest: placeholders, no shell, stdio through it, and the lifecycle.

use std::time::Duration;

use serde_json::json;

use crate::common::{Sandbox, read_json, spawn};
use crate::team::{approving_reviewer, planner, step, team_run, worker_rule, worker_writes};

/// A launcher that appends its arguments, one per line, to `log`, drops
/// its own words up to `--`, and execs what follows.
fn logging_launcher(sandbox: &Sandbox) -> (std::path::PathBuf, std::path::PathBuf) {
    let log = sandbox.root().join("launcher.log");
    let script = sandbox.executable(
        "launch",
        &format!(
            "for word in \"$@\"; do printf '%s\\n' \"$word\" >> {log}; done\necho '--end--' >> {log}\n\
             while [ \"$1\" != \"--\" ]; do shift; done\nshift\nexec \"$@\"",
            log = log.display()
        ),
    );
    (script, log)
}

#[test]
fn placeholders_are_filled_no_shell_runs_and_stdio_passes() {
    let sandbox = Sandbox::new();
    let (launch, log) = logging_launcher(&sandbox);
    let launcher = format!(
        "{} --job=troupe-{{step_id}}-{{role}}-{{attempt}} --run={{run_id}} --agent={{agent_id}} '$HOME;echo pwned' --",
        launch.display()
    );
    let rules = vec![
        planner(json!([step("step_1", &[])])),
        worker_rule("step_1", worker_writes("step_1", 0)),
        approving_reviewer(),
    ];
    let team = team_run(&sandbox, rules, &["--launcher", &launcher]);
    assert_eq!(team.run.code, 0, "stderr:\n{}", team.run.stderr);
    let run_id = team.dir.file_name().unwrap().to_str().unwrap().to_string();
    let logged = std::fs::read_to_string(&log).unwrap();
    let calls: Vec<Vec<&str>> = logged
        .split("--end--\n")
        .filter(|c| !c.is_empty())
        .map(|c| c.lines().collect())
        .collect();
    assert_eq!(
        calls.len(),
        2,
        "a worker and a reviewer went through the launcher: {logged}"
    );
    let worker = &calls[0];
    assert_eq!(worker[0], "--job=troupe-step_1-worker-1");
    assert_eq!(worker[1], format!("--run={run_id}"));
    assert_eq!(worker[2], "--agent=step_1/worker-1");
    assert_eq!(
        worker[3], "$HOME;echo pwned",
        "the word reaches the launcher as written: no shell"
    );
    assert_eq!(worker[4], "--");
    assert!(worker[5].ends_with("troupe-agent"), "{worker:?}");
    assert_eq!(worker[6], "--task");
    assert!(worker[7].ends_with("step_1/worker-1/.subagent/task.json"));
    assert_eq!(calls[1][0], "--job=troupe-step_1-reviewer-1");
    assert!(!sandbox.ws().join("pwned").exists());
}

#[test]
fn a_launcher_that_cannot_start_is_an_agent_error_that_names_it() {
    let sandbox = Sandbox::new();
    let model = sandbox.script(json!({"rules": [{"reply": [{"content": "x"}]}]}));
    let run = spawn(
        &sandbox,
        1,
        "launch",
        &model,
        &["--launcher", "/nonexistent/srun --ntasks=1 --"],
    );
    assert_eq!(run.code, 1);
    let error = run.json()["error"].as_str().unwrap().to_string();
    assert!(
        error.contains("cannot start the launcher `/nonexistent/srun --ntasks=1 --`"),
        "{error}"
    );
    assert!(error.contains("No such file"), "{error}");
    let unbalanced = spawn(&sandbox, 2, "launch", &model, &["--launcher", "srun 'oops"]);
    assert_eq!(unbalanced.code, 2);
    assert!(
        unbalanced.stderr.contains("unclosed quote"),
        "{}",
        unbalanced.stderr
    );
}

#[test]
fn an_agent_that_never_starts_fails_with_the_launchers_stderr() {
    let sandbox = Sandbox::new();
    let queued = sandbox.executable(
        "queued",
        "echo 'job 42 queued: waiting for resources' >&2\nexec sleep 30",
    );
    let model = sandbox.script(json!({"rules": [{"reply": [{"content": "x"}]}]}));
    let launcher = format!("{} --", queued.display());
    let run = spawn(
        &sandbox,
        1,
        "wait",
        &model,
        &[
            "--launcher",
            &launcher,
            "--launch-timeout",
            "1",
            "--kill-grace",
            "1",
        ],
    );
    assert_eq!(run.code, 1);
    assert!(run.elapsed < Duration::from_secs(30), "{:?}", run.elapsed);
    let error = run.json()["error"].as_str().unwrap().to_string();
    assert!(
        error.contains("did not start through the launcher"),
        "{error}"
    );
    assert!(error.contains("within 1 s (--launch-timeout)"), "{error}");
    assert!(
        error.contains("waiting for resources"),
        "the launcher's stderr is shown: {error}"
    );
}

#[test]
fn a_stuck_agent_gets_sigterm_through_its_launcher_before_sigkill() {
    let sandbox = Sandbox::new();
    let marker = sandbox.root().join("terminated");
    let launcher = sandbox.executable(
        "forwarding",
        &format!(
            "while [ \"$1\" != \"--\" ]; do shift; done\nshift\n\"$@\" &\nchild=$!\n\
             trap 'echo forwarded > {}; kill $child; exit 143' TERM\nwait $child",
            marker.display()
        ),
    );
    let stuck = sandbox.executable(
        "stuck-agent",
        r#"echo '{"type":"hello","protocol":1,"agent_id":1,"role":"worker","pid":'$$'}'
trap '' TERM
exec sleep 60"#,
    );
    let model = sandbox.script(json!({"rules": [{"reply": [{"content": "x"}]}]}));
    let launcher = format!("{} --", launcher.display());
    let run = spawn(
        &sandbox,
        1,
        "hang",
        &model,
        &[
            "--launcher",
            &launcher,
            "--agent-bin",
            stuck.to_str().unwrap(),
            "--timeout",
            "1",
            "--kill-grace",
            "1",
        ],
    );
    assert_eq!(run.code, 1);
    assert_eq!(run.json()["status"], "timeout");
    assert!(marker.exists(), "the launcher got SIGTERM to pass on");
    assert!(run.elapsed < Duration::from_secs(30));
}

#[test]
fn results_on_tmpfs_are_warned_about() {
    let test = "results_on_tmpfs_are_warned_about";
    if !crate::common::present(
        test,
        "a tmpfs at /dev/shm",
        std::path::Path::new("/dev/shm").is_dir(),
    ) {
        return;
    }
    let ws = tempfile::tempdir_in("/dev/shm").unwrap();
    let sandbox = Sandbox::new();
    let (launch, _) = logging_launcher(&sandbox);
    let model = sandbox.script(json!({"rules": [{"reply": [
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "ok"}}]}
    ]}]}));
    let mut command = crate::common::troupe();
    command
        .args([
            "spawn",
            "--id",
            "1",
            "--summary",
            "s",
            "--task",
            "t",
            "--model",
            &model,
        ])
        .args(["--launcher", &format!("{} --", launch.display())])
        .arg("--workspace")
        .arg(ws.path());
    let out = crate::common::run(command);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("is on tmpfs, which other nodes cannot see"),
        "{}",
        out.stderr
    );
    let result = read_json(
        &ws.path()
            .join("sub_agent_results/agent_1/.subagent/result.json"),
    );
    assert_eq!(result["status"], "completed");
}
