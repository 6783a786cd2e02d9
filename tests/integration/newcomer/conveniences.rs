//! The conventions of the CLIs people already use: a list of runs and
//! `last`, close matches, JSON lines, completions, a manual page, colour
//! on request, examples in --help, and following a run as it goes.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::common::{Sandbox, cli, run, spawn, troupe};
use crate::team::{
    approving_reviewer, planner, step, team_command, team_run, worker_rule, worker_writes,
};

/// A plan of one step `a`, whose worker takes `delay_ms` to write a.txt.
fn one_step(delay_ms: u64) -> Vec<Value> {
    vec![
        planner(json!([step("a", &[])])),
        worker_rule("a", worker_writes("a", delay_ms)),
        approving_reviewer(),
    ]
}

#[test]
fn runs_lists_the_runs_and_last_names_the_newest() {
    let sandbox = Sandbox::new();
    let first = team_run(&sandbox, one_step(0), &[]);
    assert_eq!(first.run.code, 0, "{}", first.run.stderr);
    let first_id = first.record()["run_id"].as_str().unwrap().to_string();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let second = run(team_command(&sandbox, one_step(0), &[]));
    assert_eq!(second.code, 0);

    let listed = cli(&sandbox, &["runs"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    let lines: Vec<&str> = listed.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "a header and two runs: {}", listed.stdout);
    assert!(lines[0].starts_with("run ") && lines[0].contains("goal"));
    assert!(
        lines[2].starts_with(&first_id),
        "newest first: {}",
        listed.stdout
    );
    assert!(lines[1].contains("completed") && lines[1].contains("1/1"));

    let json_lines = cli(&sandbox, &["runs", "--json"]);
    let records: Vec<Value> = json_lines
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 2);
    let newest = records[0]["run_id"].as_str().unwrap();

    let shown = cli(&sandbox, &["show", "last"]);
    assert!(shown.stdout.contains(newest), "{}", shown.stdout);
    let step = cli(&sandbox, &["show", "last/a", "--json"]);
    assert_eq!(step.json()["id"], "a");
    let dot = cli(&sandbox, &["show", "last/a", "--format", "dot"]);
    assert_eq!(dot.code, 2);
    assert!(
        dot.stderr.contains("--format dot draws a run's plan"),
        "{}",
        dot.stderr
    );

    let typo = &first_id[..first_id.len() - 1];
    let missed = cli(&sandbox, &["show", typo]);
    assert_eq!(missed.code, 2);
    assert!(
        missed.stderr.contains("did you mean") && missed.stderr.contains(&first_id),
        "{}",
        missed.stderr
    );
}

#[test]
fn follow_tails_a_run_until_it_ends() {
    let sandbox = Sandbox::new();
    let mut running = team_command(&sandbox, one_step(1500), &[]);
    let child = running
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let results = sandbox.ws().join("sub_agent_results");
    let started = std::time::Instant::now();
    while crate::common::present("follow", "a run", true)
        && !std::fs::read_dir(&results).is_ok_and(|mut d| {
            d.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("run_")))
        })
    {
        assert!(started.elapsed().as_secs() < 30, "the run never started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let followed = cli(&sandbox, &["show", "last", "--follow"]);
    let mut child = child;
    assert!(child.wait().unwrap().success());
    assert_eq!(followed.code, 0, "{}", followed.stderr);
    // The run's own lines (issue 43: it printed `key=value` events).
    let lines: Vec<&str> = followed.stdout.lines().collect();
    assert!(
        lines.iter().any(|l| l.ends_with("a  started (attempt 1)")),
        "{}",
        followed.stdout
    );
    assert!(
        lines
            .last()
            .unwrap()
            .contains("] run completed: 1 completed, 0 failed"),
        "{}",
        followed.stdout
    );
    assert!(!followed.stdout.contains("step="), "{}", followed.stdout);
    // --json gives the events themselves.
    let events = cli(&sandbox, &["show", "last", "--follow", "--json"]);
    let last: Value = serde_json::from_str(events.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "run_finished");
}

#[test]
fn wait_prints_json_lines() {
    let sandbox = Sandbox::new();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "done"}}]}
    ]}]}));
    assert_eq!(spawn(&sandbox, 1, "t", &model, &[]).code, 0);
    assert_eq!(spawn(&sandbox, 2, "t", &model, &[]).code, 0);
    let waited = cli(&sandbox, &["wait", "1", "2"]);
    assert_eq!(waited.code, 0, "{}", waited.stderr);
    let lines: Vec<Value> = waited
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("one object a line"))
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["agent_id"], 2);
}

#[test]
fn completions_man_colour_and_examples() {
    for (shell, marker) in [
        ("bash", "complete -F _troupe"),
        ("zsh", "#compdef troupe"),
        ("fish", "complete -c troupe"),
    ] {
        let mut command = troupe();
        command.args(["completions", shell]);
        let out = run(command);
        assert_eq!(out.code, 0);
        assert!(
            out.stdout.contains(marker) && out.stdout.contains("runs"),
            "{shell}"
        );
    }
    let mut command = troupe();
    command.args(["completions", "bash"]);
    let script = run(command).stdout;
    let sourced = Command::new("bash")
        .args(["-c", "source /dev/stdin; complete -p troupe"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(script.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(
        String::from_utf8_lossy(&sourced.stdout).contains("_troupe"),
        "bash takes the script"
    );

    let mut command = troupe();
    command.arg("man");
    let page = run(command).stdout;
    assert!(
        page.contains(".TH troupe 1") && page.contains("SUBCOMMANDS"),
        "{}",
        &page[..200.min(page.len())]
    );
    let dir = tempfile::tempdir().unwrap();
    let mut command = troupe();
    command.args(["man", "--dir"]).arg(dir.path());
    assert_eq!(run(command).code, 0);
    assert!(dir.path().join("troupe-run.1").is_file());

    let mut command = troupe();
    command.args([
        "--color",
        "always",
        "runs",
        "--workspace",
        "/nonexistent-troupe-ws",
    ]);
    assert_eq!(run(command).code, 0);

    for sub in [
        "run", "spawn", "plan", "validate", "status", "wait", "show", "report", "runs",
    ] {
        let mut command = troupe();
        command.args([sub, "--help"]);
        let help = run(command).stdout;
        assert!(
            help.contains("Examples:\n  troupe "),
            "{sub} --help has examples"
        );
        assert!(
            !help.contains("seed"),
            "{sub} --help speaks the user's words"
        );
    }
    let mut command = troupe();
    command.arg("--help");
    assert!(run(command).stdout.contains("130 interrupted"));
}

#[test]
fn colour_is_on_request_and_off_in_pipes() {
    let sandbox = Sandbox::new();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "done"}}]}
    ]}]}));
    assert_eq!(spawn(&sandbox, 1, "t", &model, &[]).code, 0);
    let plain = cli(&sandbox, &["show", "1"]);
    assert!(!plain.stdout.contains('\x1b'), "no colour into a pipe");
    let painted = cli(&sandbox, &["--color", "always", "show", "1"]);
    assert!(
        painted.stdout.contains("\x1b["),
        "--color always paints a pipe too"
    );
}

#[test]
fn a_scripted_model_in_the_config_file_is_relative_to_the_file() {
    let sandbox = Sandbox::new();
    let script = json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "configured"}}]}
    ]}]});
    let conf = sandbox.root().join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(conf.join("script.json"), script.to_string()).unwrap();
    std::fs::write(
        conf.join("troupe.toml"),
        "model = \"scripted:script.json\"\n",
    )
    .unwrap();
    let mut command = troupe();
    command
        .args(["spawn", "--id", "1", "--summary", "s", "--task", "t"])
        .arg("--workspace")
        .arg(sandbox.ws())
        .env("TROUPE_CONFIG", conf.join("troupe.toml"))
        .current_dir(sandbox.root());
    let out = run(command);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.json()["result_summary"], "configured");
}

/// The README's first command, the offline demo: its result lands in the
/// workspace, the reviewer's fix included.
#[test]
fn the_readme_demo_leaves_the_whole_project_in_the_workspace() {
    let sandbox = Sandbox::new();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/team");
    let mut command = troupe();
    command
        .arg("run")
        .arg("--goal-file")
        .arg(examples.join("goal.txt"))
        .arg("--workspace")
        .arg(sandbox.ws())
        .arg("--model")
        .arg(format!(
            "scripted:{}",
            examples.join("script.json").display()
        ));
    let out = run(command);
    assert_eq!(out.code, 0, "{}", out.stderr);
    crate::team::assert_demo_project(&sandbox.ws(), &out.stderr);
}

// Issue 23, item 3: the resume hint said `--resume RUN`, which then
// wanted `--model` and `--workspace` again.
#[test]
fn a_run_resumes_from_its_directory_alone_with_its_own_models() {
    let sandbox = Sandbox::new();
    let slow = vec![
        planner(json!([step("a", &[]), step("b", &["a"])])),
        worker_rule("a", worker_writes("a", 0)),
        worker_rule("b", worker_writes("b", 30_000)),
        approving_reviewer(),
    ];
    let mut started = team_command(&sandbox, slow, &["--isolation", "shared"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    crate::faults::wait_for("b's worker", || {
        crate::faults::first_run(&sandbox)
            .is_some_and(|run| run.join("b/worker-1/.subagent").is_dir())
    });
    started.kill().unwrap();
    crate::faults::wait_exit(&mut started);
    let dir = crate::team::run_dir(&sandbox);
    let record = crate::common::read_json(&dir.join("run.json"));
    let model = record["models"]["TROUPE_WORKER_MODEL"].as_str().unwrap();
    assert!(model.starts_with("scripted:/"), "{model}");
    assert!(
        !record.to_string().contains("sk-"),
        "no key, only its variable's name"
    );

    // From elsewhere, with the run's directory and nothing else; the
    // script's rules are what the run started with (b is slow there, and
    // is given a fast one now by the same file).
    let script = model.strip_prefix("scripted:").unwrap();
    let fast = json!({"rules": [
        planner(json!([step("a", &[]), step("b", &["a"])])),
        worker_rule("a", worker_writes("a", 0)),
        worker_rule("b", worker_writes("b", 0)),
        approving_reviewer(),
    ]});
    std::fs::write(script, fast.to_string()).unwrap();
    let mut resume = troupe();
    resume
        .args(["run", "--resume"])
        .arg(&dir)
        .current_dir(sandbox.root());
    let out = run(resume);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("troupe: resume: with the run's own models"),
        "{}",
        out.stderr
    );
    let record = crate::common::read_json(&dir.join("run.json"));
    assert_eq!(record["status"], "completed");
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("b.txt")).unwrap(),
        "b"
    );
}

// Issue 43, friction 3: `--json` had no quiet form; every line of
// progress still went to stderr.
#[test]
fn quiet_leaves_stderr_to_warnings_and_errors() {
    let sandbox = Sandbox::new();
    crate::isolation::repository(&sandbox);
    let quiet = run(team_command(
        &sandbox,
        one_step(0),
        &["--json", "-q", "--isolation", "worktree"],
    ));
    assert_eq!(quiet.code, 0, "{}", quiet.stderr);
    assert_eq!(quiet.stderr, "", "nothing but warnings and errors");
    let events: Vec<Value> = quiet
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The apply is an event too, after the run's end (friction 4).
    let n = events.len();
    assert_eq!(events[n - 2]["type"], "run_finished");
    let applied = &events[n - 1];
    assert_eq!(applied["type"], "applied", "{applied}");
    assert_eq!(applied["state"], "applied", "{applied}");
    assert_eq!(applied["written"], json!(["a.txt"]), "{applied}");
    assert!(
        applied["branch"]
            .as_str()
            .unwrap()
            .starts_with("troupe/run_")
    );
    let journal =
        std::fs::read_to_string(crate::team::run_dir(&sandbox).join("events.jsonl")).unwrap();
    assert!(
        journal
            .trim_end()
            .ends_with(&quiet.stdout.trim_end().lines().last().unwrap().to_string())
    );
    assert!(sandbox.ws().join("a.txt").is_file(), "applied all the same");
    let loud = cli(&sandbox, &["run", "--resume", "last"]);
    assert!(loud.stderr.contains("nothing to resume"), "{}", loud.stderr);
    let both = cli(&sandbox, &["run", "goal", "-q", "-v"]);
    assert_eq!(both.code, 2, "{}", both.stderr);
}
