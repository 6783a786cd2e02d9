//! Issue 23, item 11: the smaller things a newcomer tripped on.

use serde_json::json;

use crate::common::{Sandbox, run, troupe};
use crate::team::{
    approving_reviewer, planner, step, two_steps_at_once, worker_rule, worker_writes,
};

#[test]
fn a_base_url_with_the_endpoint_path_is_refused_with_the_fix() {
    let sandbox = Sandbox::new();
    let mut command = troupe();
    command
        .args(["run", "a goal", "--model", "m", "--base-url"])
        .arg("http://127.0.0.1:9/v1/chat/completions")
        .arg("--workspace")
        .arg(sandbox.ws());
    let out = run(command);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "ends in /chat/completions, which troupe appends itself; give http://127.0.0.1:9/v1"
        ),
        "{}",
        out.stderr
    );
}

#[test]
fn an_apply_lists_new_files_as_added_and_changed_ones_as_modified() {
    let sandbox = Sandbox::new();
    crate::isolation::repository(&sandbox);
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &[])])),
        worker_rule("a", worker_writes("a", 0)),
        worker_rule("b", crate::isolation::writes("f.txt", "changed\n", 0)),
        approving_reviewer(),
    ];
    let team = crate::team::team_run(&sandbox, rules, &["--isolation", "worktree"]);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    assert!(
        team.run.stderr.contains("  A a.txt\n"),
        "{}",
        team.run.stderr
    );
    assert!(
        team.run.stderr.contains("  M f.txt\n"),
        "{}",
        team.run.stderr
    );
}

#[test]
fn step_ids_that_would_be_the_runs_own_records_are_refused_by_name() {
    let sandbox = Sandbox::new();
    let cases = [
        ("..", "starts with a dot"),
        (".hidden", "starts with a dot"),
        ("planner", "a name troupe's own records take"),
        ("repo.git", "a name troupe's own records take"),
        ("run.json", "a name troupe's own records take"),
        ("Bases", "a name troupe's own records take"),
    ];
    for (id, why) in cases {
        let plan = json!({"summary": "p", "steps": [
            {"id": id, "description": "d", "type": "FILE_WRITE", "dependencies": []}
        ]});
        let out = crate::team::validate(&sandbox, &plan.to_string());
        assert_eq!(out.code, 2, "{id}: {}", out.stderr);
        assert!(
            out.stderr.contains(&format!("the id `{id}`")) && out.stderr.contains(why),
            "{id}: {}",
            out.stderr
        );
    }
    let fine = json!({"summary": "p", "steps": [
        {"id": "step.1", "description": "d", "type": "FILE_WRITE", "dependencies": []}
    ]});
    assert_eq!(crate::team::validate(&sandbox, &fine.to_string()).code, 0);
}

#[test]
fn resuming_a_completed_run_changes_nothing() {
    let sandbox = Sandbox::new();
    let rules = vec![
        planner(json!([step("a", &[])])),
        worker_rule("a", worker_writes("a", 0)),
        approving_reviewer(),
    ];
    let team = crate::team::team_run(&sandbox, rules, &[]);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let before = std::fs::read_to_string(team.dir.join("run.json")).unwrap();
    let events = std::fs::read_to_string(team.dir.join("events.jsonl")).unwrap();
    let mut command = troupe();
    command
        .args(["run", "--resume", "last", "--workspace"])
        .arg(sandbox.ws());
    let out = run(command);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr.contains("completed already; nothing to resume"),
        "{}",
        out.stderr
    );
    assert_eq!(
        std::fs::read_to_string(team.dir.join("run.json")).unwrap(),
        before
    );
    assert_eq!(
        std::fs::read_to_string(team.dir.join("events.jsonl")).unwrap(),
        events,
        "no second run_finished"
    );
}

#[test]
fn status_beside_team_runs_points_to_troupe_runs() {
    let sandbox = Sandbox::new();
    let rules = vec![
        planner(json!([step("a", &[])])),
        worker_rule("a", worker_writes("a", 0)),
        approving_reviewer(),
    ];
    assert_eq!(crate::team::team_run(&sandbox, rules, &[]).run.code, 0);
    let out = crate::common::cli(&sandbox, &["status"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("no agents") && out.stdout.contains("listed by troupe runs"),
        "{}",
        out.stdout
    );
}

#[test]
fn a_cause_is_said_once() {
    let sandbox = Sandbox::new();
    let missing = sandbox.root().join("no-such-script.json");
    let mut command = troupe();
    command
        .args(["run", "a goal", "--model"])
        .arg(format!("scripted:{}", missing.display()))
        .arg("--workspace")
        .arg(sandbox.ws());
    let out = run(command);
    assert_ne!(out.code, 0);
    let line = out
        .stderr
        .lines()
        .find(|l| l.contains("cannot read the model script"))
        .unwrap_or_else(|| panic!("{}", out.stderr));
    assert_eq!(
        line.matches("No such file or directory").count(),
        1,
        "{line}"
    );
}

#[test]
fn color_never_reaches_help_and_argument_errors() {
    let said = |args: &[&str]| {
        let mut command = troupe();
        command.args(args).env_remove("NO_COLOR");
        run(command)
    };
    let bold = said(&["run", "--bogus", "--color", "always"]);
    assert!(bold.stderr.contains('\u{1b}'), "{}", bold.stderr);
    let plain = said(&["run", "--bogus", "--color", "never"]);
    assert_eq!(plain.code, 2);
    assert!(
        plain.stderr.contains("unexpected argument '--bogus'"),
        "{}",
        plain.stderr
    );
    assert!(!plain.stderr.contains('\u{1b}'), "{}", plain.stderr);
    let help = said(&["--help", "--color=never"]);
    assert!(help.stdout.contains("Usage") && !help.stdout.contains('\u{1b}'));
}

#[test]
fn clean_branches_removes_the_runs_branches_and_nothing_else() {
    let sandbox = Sandbox::new();
    crate::isolation::repository(&sandbox);
    for _ in 0..2 {
        let mut command = crate::team::team_command(&sandbox, two_steps_at_once(), &["--no-apply"]);
        command.args(["--isolation", "worktree"]);
        assert_eq!(run(command).code, 0);
    }
    let branches =
        || crate::isolation::git(&sandbox.ws(), &["branch", "--format=%(refname:short)"]);
    assert_eq!(
        branches()
            .lines()
            .filter(|b| b.starts_with("troupe/"))
            .count(),
        2
    );
    let out = crate::common::cli(&sandbox, &["clean", "--branches"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("removed 2 branches: troupe/run_"),
        "{}",
        out.stdout
    );
    assert_eq!(branches().trim(), "main");
}

#[test]
fn a_second_ctrl_c_leaves_no_agent_running_in_the_record() {
    let sandbox = Sandbox::new();
    // A worker whose command would run for minutes and shrugs off the
    // first Ctrl-C's SIGTERM, so that the second one comes in its grace.
    let rules = vec![
        planner(json!([step("a", &[])])),
        worker_rule(
            "a",
            vec![
                json!({"tool_calls": [{"name": "run_command", "arguments": {"command": "trap '' TERM INT; sleep 120"}}]}),
            ],
        ),
        approving_reviewer(),
    ];
    let mut troupe = crate::faults::start_run(&sandbox, rules, &["--isolation", "shared"]);
    crate::faults::wait_for("a's command", || {
        crate::faults::first_run(&sandbox)
            .and_then(|run| {
                std::fs::read_to_string(run.join("a/worker-1/.subagent/journal.jsonl")).ok()
            })
            .is_some_and(|journal| journal.contains("sleep 120"))
    });
    // As a kill in the middle of a transcript write leaves it.
    let worker = crate::faults::first_run(&sandbox)
        .unwrap()
        .join("a/worker-1/.subagent");
    std::fs::write(worker.join(".tmp-4242-0"), "{\"half").unwrap();
    crate::faults::signal(&troupe, "-INT");
    std::thread::sleep(std::time::Duration::from_millis(100));
    crate::faults::signal(&troupe, "-INT");
    assert_eq!(crate::faults::wait_exit(&mut troupe), 130);
    let record = crate::common::read_json(&crate::team::run_dir(&sandbox).join("run.json"));
    assert_eq!(record["status"], "interrupted");
    let worker = &record["steps"][0]["attempts"][0]["worker"];
    assert_ne!(worker["status"], "running", "{worker}");
    let shown = crate::common::cli(&sandbox, &["show", "last"]);
    assert!(!shown.stdout.contains("running"), "{}", shown.stdout);
    // No write cut short by the kills is left behind.
    let torn: Vec<String> = walkdir::WalkDir::new(sandbox.ws().join("sub_agent_results"))
        .into_iter()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp-"))
        .map(|e| e.path().display().to_string())
        .collect();
    assert!(torn.is_empty(), "{torn:?}");
}

#[test]
fn a_spawn_summary_is_one_line_of_at_most_eighty_characters() {
    let sandbox = Sandbox::new();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "done"}}]}
    ]}]}));
    let spawn = |summary: &str| {
        let mut command = troupe();
        command
            .args(["spawn", "--id", "1", "--summary", summary, "--task", "t"])
            .args(["--model", &model, "--workspace"])
            .arg(sandbox.ws());
        run(command)
    };
    let long = "x".repeat(81);
    let out = spawn(&long);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("--summary is 81 characters, more than 80; shorten it"),
        "{}",
        out.stderr
    );
    let out = spawn("two\nlines");
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("--summary holds more than one line"),
        "{}",
        out.stderr
    );
    assert!(
        !sandbox.agent_dir(1).exists(),
        "a refused spawn makes no agent"
    );
    // Eighty characters, not bytes.
    let out = spawn(&"é".repeat(80));
    assert_eq!(out.code, 0, "{}", out.stderr);
}

#[test]
fn a_workspace_the_user_cannot_write_is_named_in_the_error() {
    let root = crate::hostile::is_root();
    let setpriv = crate::common::on_path("setpriv");
    if !crate::common::present("an unwritable workspace", "setpriv", !root || setpriv) {
        return;
    }
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let model = sandbox.script(json!({"rules": []}));
    let mut command = troupe();
    command
        .args(["run", "a goal", "--model", &model, "--workspace"])
        .arg(sandbox.ws());
    let command = crate::hostile::unprivileged(&sandbox, command);
    // Read-only to its owner, who is who runs troupe now.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(sandbox.ws(), std::fs::Permissions::from_mode(0o555)).unwrap();
    let out = run(command);
    std::fs::set_permissions(sandbox.ws(), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_ne!(out.code, 0, "{}", out.stderr);
    let results = sandbox.ws().join("sub_agent_results");
    assert!(
        out.stderr.contains("Permission denied")
            && out.stderr.contains(&results.display().to_string()),
        "the error names the path it could not make: {}",
        out.stderr
    );
}
