//! A run that nobody runs any more: `troupe run` killed with SIGKILL
//! leaves run.json saying `running`; every reader says `died`, with the
//! command that resumes it, and a run that is still being run is not
//! resumed a second time.

use std::path::Path;
use std::process::{Child, Stdio};

use serde_json::{Value, json};

use crate::common::{Sandbox, cli, read_json, troupe};
use crate::faults::{has_event, signal, start_run, team_run_resume, wait_exit, wait_for};
use crate::team::{approving_reviewer, planner, run_dir, step, worker_rule, worker_writes};

/// `first`, then `slow`, whose worker takes `slow_ms` before it writes.
fn rules(slow_ms: u64) -> Vec<Value> {
    vec![
        planner(json!([step("first", &[]), step("slow", &["first"])])),
        worker_rule("first", worker_writes("first", 0)),
        worker_rule("slow", worker_writes("slow", slow_ms)),
        approving_reviewer(),
    ]
}

/// `troupe run --resume RUN` started in the background, its output
/// discarded.
fn start_resume(sandbox: &Sandbox, rules: Vec<Value>, run_id: &str) -> Child {
    let model = sandbox.script(json!({"rules": rules}));
    let mut command = troupe();
    command
        .args(["run", "--resume", run_id, "--model", &model])
        .arg("--workspace")
        .arg(sandbox.ws())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command.spawn().expect("start troupe run --resume")
}

/// Whether the run in `dir` started attempt `attempt` of `step`.
/// How many times the journal says `step`'s worker started.
fn starts(dir: &Path, step: &str) -> usize {
    std::fs::read_to_string(dir.join("events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| e["type"] == "step_started" && e["step"] == step)
        .count()
}

/// A troupe killed while a step runs, its run left saying `running`.
fn killed_run(sandbox: &Sandbox) -> (String, std::path::PathBuf) {
    let mut run = start_run(sandbox, rules(30_000), &[]);
    wait_for("the slow step to start", || {
        has_event(sandbox, "step_started", "slow")
    });
    signal(&run, "-KILL");
    wait_exit(&mut run);
    let dir = run_dir(sandbox);
    let run_id = dir.file_name().unwrap().to_str().unwrap().to_string();
    (run_id, dir)
}

#[test]
fn a_killed_run_is_shown_as_died_with_its_resume_and_resume_completes_it() {
    let sandbox = Sandbox::new();
    let (run_id, dir) = killed_run(&sandbox);
    let record = read_json(&dir.join("run.json"));
    assert_eq!(record["status"], "running", "the killed run said nothing");
    let resume = format!(
        "`troupe run --resume {run_id} --workspace {}`",
        record["workspace"].as_str().unwrap()
    );

    let runs = cli(&sandbox, &["runs"]);
    assert_eq!(runs.code, 0, "{}", runs.stderr);
    let row = runs
        .stdout
        .lines()
        .find(|l| l.starts_with(&run_id))
        .unwrap();
    assert!(row.contains("died") && !row.contains("running"), "{row}");
    assert!(runs.stdout.contains(&resume), "{}", runs.stdout);

    let listed = cli(&sandbox, &["runs", "--json"]).json();
    assert_eq!(listed["status"], "died", "{listed}");
    assert_eq!(listed["recorded_status"], "running");

    let shown = cli(&sandbox, &["show", &run_id]);
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    assert!(
        shown.stdout.contains(&format!("run {run_id} · died")),
        "{}",
        shown.stdout
    );
    assert!(shown.stdout.contains(&resume), "{}", shown.stdout);
    let raw = cli(&sandbox, &["show", &run_id, "--json"]).json();
    assert_eq!(raw["status"], "died", "{raw}");
    assert_eq!(raw["recorded_status"], "running");
    assert_eq!(raw["run_id"], run_id.as_str());

    // Regression: --follow waited for the end of a dead run forever.
    let followed = cli(&sandbox, &["show", &run_id, "--follow"]);
    assert_eq!(followed.code, 1, "{}", followed.stderr);
    assert!(
        followed.stdout.contains("started (attempt 1)") && followed.stdout.contains("the run died"),
        "{}",
        followed.stdout
    );
    assert!(followed.stdout.contains(&resume), "{}", followed.stdout);
    let json_follow = cli(&sandbox, &["show", &run_id, "--follow", "--json"]);
    assert_eq!(json_follow.code, 1);
    assert!(
        json_follow
            .stdout
            .lines()
            .all(|l| serde_json::from_str::<Value>(l).is_ok()),
        "stdout stays events: {}",
        json_follow.stdout
    );
    assert!(
        json_follow.stderr.contains(&resume),
        "{}",
        json_follow.stderr
    );

    let page = cli(&sandbox, &["report", &run_id]).stdout;
    assert!(
        page.contains("<span class=\"status died\">died</span>"),
        "{page}"
    );

    assert_eq!(
        read_json(&dir.join("run.json"))["status"],
        "running",
        "readers only report: run.json is the run's"
    );

    let resumed = team_run_resume(&sandbox, rules(0), &run_id);
    assert_eq!(resumed.code, 0, "stderr:\n{}", resumed.stderr);
    assert_eq!(read_json(&dir.join("run.json"))["status"], "completed");
    let runs = cli(&sandbox, &["runs"]).stdout;
    assert!(
        runs.contains("completed") && !runs.contains("died"),
        "{runs}"
    );
    // Issue 43, friction 8: the report says it was taken up again.
    let page = cli(&sandbox, &["report", &run_id]).stdout;
    assert!(
        page.contains("<p class=\"resumed\">interrupted and resumed once</p>"),
        "{page}"
    );
}

#[test]
fn a_run_that_is_being_run_is_not_resumed_again_and_the_refusal_names_its_pid() {
    let sandbox = Sandbox::new();
    let mut first = start_run(&sandbox, rules(30_000), &[]);
    wait_for("the slow step to start", || {
        has_event(&sandbox, "step_started", "slow")
    });
    let dir = run_dir(&sandbox);
    let run_id = dir.file_name().unwrap().to_str().unwrap().to_string();
    let runs = cli(&sandbox, &["runs"]).stdout;
    assert!(
        runs.contains("running") && !runs.contains("died"),
        "a live run is running: {runs}"
    );
    let refused = team_run_resume(&sandbox, rules(0), &run_id);
    assert_eq!(refused.code, 2, "stderr:\n{}", refused.stderr);
    assert!(
        refused
            .stderr
            .contains(&format!("troupe (pid {}) is running it", first.id())),
        "{}",
        refused.stderr
    );

    signal(&first, "-KILL");
    wait_exit(&mut first);
    let mut again = start_resume(&sandbox, rules(30_000), &run_id);
    wait_for("the resumed slow step to start", || {
        starts(&dir, "slow") == 2
    });
    let refused = team_run_resume(&sandbox, rules(0), &run_id);
    assert_eq!(refused.code, 2, "stderr:\n{}", refused.stderr);
    assert!(
        refused
            .stderr
            .contains(&format!("troupe (pid {}) is running it", again.id())),
        "{}",
        refused.stderr
    );
    let shown = cli(&sandbox, &["show", &run_id]).stdout;
    assert!(
        shown.contains(&format!("run {run_id} · running")),
        "{shown}"
    );

    signal(&again, "-INT");
    assert_eq!(wait_exit(&mut again), 130);
    assert_eq!(read_json(&dir.join("run.json"))["status"], "interrupted");
}

#[test]
fn following_a_resumed_run_goes_on_past_its_first_end() {
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let failing = vec![
        planner(json!([step("a", &[])])),
        worker_rule(
            "a",
            vec![
                json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": false, "summary": "not yet"}}]}),
            ],
        ),
        approving_reviewer(),
    ];
    let first = crate::team::team_run(&sandbox, failing, &["--max-replans", "0"]);
    assert_eq!(first.run.code, 1, "{}", first.run.stderr);
    let run_id = first
        .dir
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let fixed = vec![
        planner(json!([step("a", &[])])),
        worker_rule("a", worker_writes("a", 0)),
        approving_reviewer(),
    ];
    let resumed = team_run_resume(&sandbox, fixed, &run_id);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    let followed = cli(&sandbox, &["show", &run_id, "--follow", "--json"]);
    assert_eq!(followed.code, 0, "{}", followed.stderr);
    let kinds: Vec<String> = followed
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|e| e["type"].as_str().map(str::to_string))
        .collect();
    let ends = kinds.iter().filter(|k| *k == "run_finished").count();
    assert_eq!(ends, 2, "both ends, the resume between: {kinds:?}");
    assert!(kinds.iter().any(|k| k == "run_resumed"), "{kinds:?}");
}
