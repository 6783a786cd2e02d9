//! `kill -9` of troupe inside the windows where the disk or the branch is
//! ahead of run.json, then a resume: it must end where an uninterrupted
//! run ends, and say what it repaired.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::common::{Sandbox, read_json, troupe};
use crate::faults::{team_run_resume, team_run_resume_with, wait_exit, wait_for};
use crate::isolation::{git, repository};
use crate::team::{approving_reviewer, planner, run_dir, step, worker_rule};

/// When the held `git` sleeps: before its call is made, or after.
#[derive(Clone, Copy, PartialEq)]
enum Hold {
    Before,
    After,
}

/// A directory holding a `git` that runs the real one and, for a call
/// whose words hold `window`, sleeps before or after: the window stays
/// open for a kill.
fn git_holding(sandbox: &Sandbox, window: &str, hold: Hold) -> PathBuf {
    let wait = format!("case \"$*\" in *\"{window}\"*) sleep 60;; esac\n");
    let (before, after) = match hold {
        Hold::Before => (wait.as_str(), ""),
        Hold::After => ("", wait.as_str()),
    };
    git_wrapped(sandbox, before, after)
}

/// A directory holding a `git` that runs the shell lines `before`, the
/// real git, then `after`, and exits as the real one did.
pub(crate) fn git_wrapped(sandbox: &Sandbox, before: &str, after: &str) -> PathBuf {
    let real = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v git"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let dir = sandbox.root().join("held-git");
    std::fs::create_dir_all(&dir).unwrap();
    let script = format!(
        "#!/bin/sh\n{before}{} \"$@\"\ncode=$?\n{after}exit $code\n",
        real.trim()
    );
    let path = dir.join("git");
    std::fs::write(&path, script).unwrap();
    let mut permissions = std::fs::metadata(&path).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&path, permissions).unwrap();
    dir
}

/// PATH with `first` before it.
pub(crate) fn path_before(first: &Path) -> String {
    format!(
        "{}:{}",
        first.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// An isolated run of two steps writing `a.txt` and `b.txt`, run to its
/// end with its result left on the branch; its directory and id.
fn landed_run(sandbox: &Sandbox) -> (PathBuf, String) {
    with_log(sandbox);
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &[])])),
        worker_rule("a", crate::team::worker_writes("a", 0)),
        worker_rule("b", crate::team::worker_writes("b", 0)),
        approving_reviewer(),
    ];
    let team = crate::team::team_run(sandbox, rules, &["--isolation", "worktree", "--no-apply"]);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let run_id = run_id_of(&team.dir);
    (team.dir, run_id)
}

/// `troupe apply RUN`, with `first` before PATH when given.
fn apply_command(sandbox: &Sandbox, run_id: &str, first: Option<&Path>) -> Command {
    let mut command = troupe();
    command
        .args(["apply", run_id, "--workspace"])
        .arg(sandbox.ws());
    if let Some(first) = first {
        command.env("PATH", path_before(first));
    }
    command
}

/// `troupe run` in the background with `path_first` before PATH.
fn start_with_path(sandbox: &Sandbox, rules: Vec<Value>, path_first: &Path) -> std::process::Child {
    start_in_temp(sandbox, rules, path_first, &std::env::temp_dir())
}

/// `start_with_path` with `temp` as troupe's temp directory.
fn start_in_temp(
    sandbox: &Sandbox,
    rules: Vec<Value>,
    path_first: &Path,
    temp: &Path,
) -> std::process::Child {
    let model = sandbox.script(json!({"rules": rules}));
    let path = path_before(path_first);
    troupe()
        .env("TMPDIR", temp)
        .args(["run", "test goal", "--model", &model])
        .arg("--workspace")
        .arg(sandbox.ws())
        .args(["--isolation", "worktree", "--max-replans", "0"])
        .env("PATH", path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn appends(text: &str, delay_ms: u64) -> Vec<Value> {
    vec![
        json!({"delay_ms": delay_ms, "tool_calls": [{"name": "run_command", "arguments": {"command": format!("printf '{text}|' >> log.txt")}}]}),
        json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "appended"}}]}),
    ]
}

/// The repository with `log.txt` holding `start|`.
fn with_log(sandbox: &Sandbox) {
    repository(sandbox);
    std::fs::write(sandbox.ws().join("log.txt"), "start|").unwrap();
    git(&sandbox.ws(), &["add", "log.txt"]);
    git(&sandbox.ws(), &["commit", "-q", "-m", "log"]);
}

fn on_branch(sandbox: &Sandbox, run_id: &str, path: &str) -> Option<String> {
    let out = Command::new("git")
        .args(["show", &format!("troupe/{run_id}:{path}")])
        .current_dir(sandbox.ws())
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn run_id_of(dir: &Path) -> String {
    dir.file_name().unwrap().to_string_lossy().into_owned()
}

#[test]
fn a_landing_cut_off_before_the_record_is_found_and_never_landed_twice() {
    let sandbox = Sandbox::new();
    with_log(&sandbox);
    let rules = vec![
        planner(json!([step("s2", &[])])),
        worker_rule("s2", appends("appended-by-s2", 0)),
        approving_reviewer(),
    ];
    let held = git_holding(&sandbox, "troupe: land", Hold::After);
    let mut troupe = start_with_path(&sandbox, rules.clone(), &held);
    wait_for("the branch to move", || {
        crate::faults::first_run(&sandbox)
            .and_then(|run| on_branch(&sandbox, &run_id_of(run.as_path()), "log.txt"))
            .is_some_and(|log| log.contains("appended-by-s2"))
    });
    troupe.kill().unwrap();
    wait_exit(&mut troupe);
    let dir = run_dir(&sandbox);
    let run_id = run_id_of(&dir);
    let before = read_json(&dir.join("run.json"));
    let status = before["steps"][0]["status"].as_str().unwrap().to_string();
    assert_ne!(status, "completed", "the kill came before the record");

    let resumed = team_run_resume_with(&sandbox, rules, &run_id, &["--no-apply"]);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert!(
        resumed
            .stderr
            .contains("resume: s2's landing of attempt 1 was found in the branch and recorded"),
        "{}",
        resumed.stderr
    );
    assert_eq!(
        on_branch(&sandbox, &run_id, "log.txt").unwrap(),
        "start|appended-by-s2|",
        "landed once, as an uninterrupted run lands it"
    );
    assert!(!dir.join("s2/worker-2").exists(), "not run again");
    let record = read_json(&dir.join("run.json"));
    assert_eq!(record["status"], "completed");
    assert_eq!(record["steps"][0]["status"], "completed");
    assert!(record["steps"][0]["attempts"][0]["change"]["merge"].is_string());
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("log.txt")).unwrap(),
        "start|",
        "the user's workspace is untouched"
    );
}

/// The tree `diamond` ends with when nothing cuts it short.
fn uninterrupted_diamond() -> String {
    let clean = Sandbox::new();
    with_log(&clean);
    let team = crate::team::team_run(&clean, diamond(), &["--max-replans", "0", "--no-apply"]);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    branch_tree(&clean, &run_id_of(&team.dir))
}

/// Where troupe keeps the thin layers of the run in `run`, with the
/// temp directory this test has (docs/checkouts.md).
fn thin_layers_of(run: &Path) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(run).unwrap();
    let temp = std::env::temp_dir().canonicalize().unwrap();
    temp.join(format!("troupe-layers-{:x}-{:x}", meta.dev(), meta.ino()))
}

/// A temp directory on another file system than the sandbox's, where
/// troupe writes a new head's base whole; `None` (a skip, a failure under
/// `CI=true`) where there is none.
fn temp_elsewhere(sandbox: &Sandbox, test: &str) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let shm = Path::new("/dev/shm");
    let dev = |path: &Path| std::fs::metadata(path).ok().map(|m| m.dev());
    let here = dev(shm).is_some() && dev(shm) != dev(sandbox.root());
    crate::common::present(
        test,
        "/dev/shm on another file system than the temp directory",
        here,
    )
    .then(|| shm.to_path_buf())
}

#[test]
fn a_base_cut_off_while_git_wrote_it_is_written_again_on_resume() {
    if !crate::overlay::overlays_work() {
        return;
    }
    let sandbox = Sandbox::new();
    let test = "a_base_cut_off_while_git_wrote_it_is_written_again_on_resume";
    let Some(elsewhere) = temp_elsewhere(&sandbox, test) else {
        return;
    };
    let expected = uninterrupted_diamond();

    with_log(&sandbox);
    // s2, s3 and s4 start from s1's head: its base is written then.
    let held = git_holding(&sandbox, "read-tree --reset -u", Hold::Before);
    let mut troupe = start_in_temp(&sandbox, diamond(), &held, &elsewhere);
    wait_for("the base of s1's head", || {
        crate::faults::first_run(&sandbox)
            .and_then(|run| std::fs::read_dir(run.join("bases")).ok())
            .is_some_and(|mut bases| bases.any(|b| b.is_ok_and(|b| b.path().is_dir())))
    });
    troupe.kill().unwrap();
    wait_exit(&mut troupe);
    let dir = run_dir(&sandbox);
    // As a kill inside git leaves it: its index lock, a file begun.
    let base = std::fs::read_dir(dir.join("bases"))
        .unwrap()
        .map(|b| b.unwrap().path())
        .find(|b| b.is_dir())
        .unwrap();
    let mut lock = base.clone().into_os_string();
    lock.push(".index.lock");
    std::fs::write(&lock, "").unwrap();
    std::fs::write(base.join("log.txt"), "sta").unwrap();

    let run_id = run_id_of(&dir);
    let resumed = team_run_resume_with(&sandbox, diamond(), &run_id, &["--no-apply"]);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert_eq!(branch_tree(&sandbox, &run_id), expected);
    assert!(!dir.join("bases").exists(), "the bases go with the run");
}

/// s1's head gets a thin layer over the workspace, in the temp
/// directory; a troupe killed while git writes it leaves it begun, and
/// the resumed run (which writes its bases whole: the workspace may have
/// changed) ends with the uninterrupted result and removes it.
#[test]
fn a_thin_layer_cut_off_while_git_wrote_it_goes_and_the_resume_ends_as_uninterrupted() {
    if !crate::overlay::overlays_work() {
        return;
    }
    let expected = uninterrupted_diamond();

    let sandbox = Sandbox::new();
    with_log(&sandbox);
    let held = git_holding(&sandbox, "read-tree -m -u", Hold::Before);
    let mut troupe = start_with_path(&sandbox, diamond(), &held);
    wait_for("the thin layer of s1's head", || {
        crate::faults::first_run(&sandbox)
            .and_then(|run| std::fs::read_dir(thin_layers_of(&run)).ok())
            .is_some_and(|mut layers| layers.any(|l| l.is_ok_and(|l| l.path().is_dir())))
    });
    troupe.kill().unwrap();
    wait_exit(&mut troupe);
    let dir = run_dir(&sandbox);
    let thin = thin_layers_of(&dir);
    let layer = std::fs::read_dir(&thin)
        .unwrap()
        .map(|l| l.unwrap().path())
        .find(|l| l.is_dir())
        .unwrap();
    std::fs::write(layer.join("s1.txt"), "be").unwrap();

    let run_id = run_id_of(&dir);
    let resumed = team_run_resume_with(&sandbox, diamond(), &run_id, &["--no-apply"]);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert_eq!(branch_tree(&sandbox, &run_id), expected);
    assert!(!thin.exists(), "the thin layers go with the run");
    assert!(!dir.join("bases").exists(), "the bases go with the run");
}

#[test]
fn an_attempt_the_record_does_not_name_is_done_again_under_its_number() {
    let sandbox = Sandbox::new();
    with_log(&sandbox);
    let slow = vec![
        planner(json!([step("s1", &[])])),
        worker_rule("s1", appends("by-s1", 30_000)),
        approving_reviewer(),
    ];
    let mut troupe = crate::faults::start_run(
        &sandbox,
        slow,
        &["--isolation", "worktree", "--max-replans", "0"],
    );
    wait_for("attempt 1's worker", || {
        crate::faults::first_run(&sandbox)
            .is_some_and(|run| run.join("s1/worker-1/.subagent").is_dir())
    });
    troupe.kill().unwrap();
    wait_exit(&mut troupe);
    let dir = run_dir(&sandbox);
    // The record as it stands when troupe is killed within the 50 ms it
    // may lag: the attempt's checkout and worker exist, the record names
    // neither.
    let mut record = read_json(&dir.join("run.json"));
    record["steps"][0]["attempts"] = json!([]);
    record["steps"][0]["status"] = json!("pending");
    std::fs::write(dir.join("run.json"), record.to_string()).unwrap();
    assert!(dir.join("s1/checkout-1.git").is_dir());

    let fast = vec![
        planner(json!([step("s1", &[])])),
        worker_rule("s1", appends("by-s1", 0)),
        approving_reviewer(),
    ];
    let resumed = team_run_resume(&sandbox, fast, &run_id_of(&dir));
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    let said = resumed
        .stderr
        .lines()
        .find(|l| l.contains("resume: s1's attempt 1 was cut off before run.json named it; it is done again, and what it left is kept in "))
        .unwrap_or_else(|| panic!("{}", resumed.stderr));
    for kept in [
        "s1/checkout-1.cut-1",
        "s1/checkout-1.cut-1.git",
        "s1/worker-1.cut-1",
    ] {
        assert!(said.contains(kept), "{said}");
    }
    let record = read_json(&dir.join("run.json"));
    assert_eq!(record["status"], "completed");
    let attempts: Vec<u64> = record["steps"][0]["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["attempt"].as_u64().unwrap())
        .collect();
    assert_eq!(attempts, [1]);
    let cut = &record["steps"][0]["attempts"][0]["cut_short"][0];
    assert!(
        cut["dir"].as_str().unwrap().ends_with("s1/worker-1.cut-1"),
        "{cut}"
    );
    assert!(dir.join("s1/worker-1.cut-1/.subagent").is_dir());
    assert!(dir.join("s1/worker-1/.subagent/result.json").is_file());
    assert_eq!(
        on_branch(&sandbox, &run_id_of(&dir), "log.txt").unwrap(),
        "start|by-s1|"
    );
}

#[test]
fn a_step_end_in_the_journal_ahead_of_run_json_is_recorded_and_never_run_again() {
    let sandbox = Sandbox::new();
    with_log(&sandbox);
    // s1 returns a typed result, which its replayed end keeps.
    let mut s1_step = step("s1", &[]);
    s1_step["output_schema"] = json!({"type": "object", "required": ["lines"]});
    let mut s1_work = appends("by-s1", 0);
    s1_work[1] = json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "appended", "result": {"lines": 1}}}]});
    let slow = vec![
        planner(json!([s1_step.clone(), step("s2", &["s1"])])),
        worker_rule("s1", s1_work.clone()),
        worker_rule("s2", appends("by-s2", 30_000)),
        approving_reviewer(),
    ];
    let mut troupe = crate::faults::start_run(
        &sandbox,
        slow,
        &["--isolation", "shared", "--max-replans", "0"],
    );
    // run.json too must hold s1's review, which the test takes back out
    // below: under load it is written a moment after the journal's line
    // (it once was not there yet, and the test indexed a null).
    wait_for(
        "s2's worker, and s1's end in the journal and run.json",
        || {
            crate::faults::first_run(&sandbox).is_some_and(|run| {
                let journal = std::fs::read_to_string(run.join("events.jsonl")).unwrap_or_default();
                let record: serde_json::Value = std::fs::read_to_string(run.join("run.json"))
                    .ok()
                    .and_then(|text| serde_json::from_str(&text).ok())
                    .unwrap_or_default();
                run.join("s2/worker-1/.subagent").is_dir()
                    && journal.contains(r#""type":"step_completed","step":"s1""#)
                    && record["steps"][0]["attempts"][0]["reviews"][0].is_object()
            })
        },
    );
    troupe.kill().unwrap();
    wait_exit(&mut troupe);
    let dir = run_dir(&sandbox);
    let journal = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    assert!(
        journal.contains(r#""type":"step_completed","step":"s1""#),
        "{journal}"
    );
    // The record as a kill leaves it between the journal's line and
    // run.json's write: s1 still under review, its worker's end not in.
    let mut record = read_json(&dir.join("run.json"));
    let live = record["steps"][0]["attempts"][0].clone();
    let s1 = &mut record["steps"][0];
    s1["status"] = json!("reviewing");
    s1["attempts"][0]["worker"]["status"] = json!("running");
    s1["attempts"][0]["worker"]["summary"] = json!("");
    s1["attempts"][0]["reviews"][0]["status"] = json!("running");
    s1.as_object_mut().unwrap().remove("result");
    s1["attempts"][0]["worker"]
        .as_object_mut()
        .unwrap()
        .remove("result");
    record["steps"][1]["status"] = json!("pending");
    record["steps"][1]["attempts"] = json!([]);
    std::fs::write(dir.join("run.json"), record.to_string()).unwrap();
    // troupe is gone, but s2's agent may not be yet: it finds its pipe
    // closed, writes its transcript and ends, maybe while the directory
    // is being removed.
    let s2 = dir.join("s2");
    wait_for("s2's agent to end", || !an_agent_works_in(&s2));
    std::fs::remove_dir_all(&s2).unwrap();

    let fast = vec![
        planner(json!([s1_step, step("s2", &["s1"])])),
        worker_rule("s1", s1_work),
        worker_rule("s2", appends("by-s2", 0)),
        approving_reviewer(),
    ];
    let resumed = team_run_resume(&sandbox, fast, &run_id_of(&dir));
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert!(
        resumed.stderr.contains(
            "resume: s1's end (completed) was found in events.jsonl ahead of run.json and recorded; it is not run again"
        ),
        "{}",
        resumed.stderr
    );
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("log.txt")).unwrap(),
        "start|by-s1|by-s2|",
        "s1 ran once"
    );
    let record = read_json(&dir.join("run.json"));
    assert_eq!(record["status"], "completed");
    let s1 = &record["steps"][0];
    assert_eq!(s1["status"], "completed");
    assert_eq!(s1["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(s1["attempts"][0]["worker"]["status"], "completed");
    assert_eq!(
        s1["attempts"][0]["worker"]["summary"], "appended",
        "the worker's record is read back from its sealed result"
    );
    assert_eq!(s1["attempts"][0]["reviews"][0]["status"], "completed");
    assert_eq!(
        s1["result"],
        json!({"lines": 1}),
        "its checked result is kept"
    );
    // Agent for agent, the records read back are those the live run
    // wrote: the reviewer's verdict, the worker's claim and its changing
    // calls included.
    let replayed = &s1["attempts"][0];
    assert_eq!(replayed["worker"], live["worker"]);
    assert_eq!(replayed["reviews"][0], live["reviews"][0]);
    assert_eq!(live["reviews"][0]["verdict"]["approved"], true, "{live}");
    assert_eq!(live["worker"]["success_claimed"], true, "{live}");
}

#[test]
fn a_run_killed_before_its_branch_was_made_resumes_isolated_and_keeps_its_mode() {
    let sandbox = Sandbox::new();
    with_log(&sandbox);
    let rules = vec![
        planner(json!([step("s1", &[])])),
        worker_rule("s1", appends("by-s1", 0)),
        approving_reviewer(),
    ];
    let held = git_holding(
        &sandbox,
        "troupe: the workspace as the run found it",
        Hold::Before,
    );
    let mut killed = start_with_path(&sandbox, rules.clone(), &held);
    wait_for("the isolation record", || {
        crate::faults::first_run(&sandbox)
            .and_then(|run| std::fs::read_to_string(run.join("run.json")).ok())
            .is_some_and(|text| text.contains("\"isolation_mode\""))
    });
    killed.kill().unwrap();
    wait_exit(&mut killed);
    let dir = run_dir(&sandbox);
    let run_id = run_id_of(&dir);
    assert!(
        on_branch(&sandbox, &run_id, "log.txt").is_none(),
        "no branch yet"
    );

    let model = sandbox.script(json!({"rules": rules}));
    let mut other_mode = troupe();
    other_mode
        .args(["run", "--resume", &run_id, "--model", &model])
        .args(["--isolation", "shared", "--workspace"])
        .arg(sandbox.ws());
    let refused = crate::common::run(other_mode);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused
            .stderr
            .contains("its workers ran with --isolation worktree; a resume goes on the same way"),
        "{}",
        refused.stderr
    );

    let resumed = team_run_resume_with(&sandbox, rules, &run_id, &["--no-apply"]);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert_eq!(
        on_branch(&sandbox, &run_id, "log.txt").unwrap(),
        "start|by-s1|"
    );
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("log.txt")).unwrap(),
        "start|",
        "the step did not run in the user's workspace"
    );
}

/// A run killed while it planned, as its records may stand: `plan.json`
/// written or not, run.json without steps.
fn killed_while_planning(keep_plan: bool) {
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &["a"])])),
        worker_rule("a", crate::team::worker_writes("a", 0)),
        worker_rule("b", crate::team::worker_writes("b", 0)),
        approving_reviewer(),
    ];
    let first = crate::team::team_run(&sandbox, rules.clone(), &["--isolation", "shared"]);
    assert_eq!(first.run.code, 0, "{}", first.run.stderr);
    let mut record = first.record();
    record["steps"] = json!([]);
    record["status"] = json!("planning");
    record["isolation_mode"] = Value::Null;
    std::fs::write(first.dir.join("run.json"), record.to_string()).unwrap();
    // Nothing of a step is made before its plan reaches run.json.
    for step in ["a", "b"] {
        std::fs::remove_dir_all(first.dir.join(step)).unwrap();
    }
    if !keep_plan {
        std::fs::remove_file(first.dir.join("plan.json")).unwrap();
    }
    let resumed = team_run_resume(&sandbox, rules, &run_id_of(&first.dir));
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    let record = first.record();
    assert_eq!(record["status"], "completed");
    let ids: Vec<&str> = record["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a", "b"]);
    assert!(first.dir.join("plan.json").is_file());
}

#[test]
fn a_run_killed_after_writing_its_plan_resumes_from_it() {
    killed_while_planning(true);
}

#[test]
fn a_run_killed_while_it_planned_plans_again() {
    killed_while_planning(false);
}

#[test]
fn an_apply_cut_short_is_finished_by_the_next_one() {
    let sandbox = Sandbox::new();
    let (dir, run_id) = landed_run(&sandbox);
    let apply = |first: Option<&Path>| apply_command(&sandbox, &run_id, first);
    let held = git_holding(&sandbox, "checkout-index", Hold::Before);
    let mut cut = apply(Some(&held))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the apply's journal", || dir.join("apply.json").is_file());
    cut.kill().unwrap();
    wait_exit(&mut cut);
    // As a kill in the middle of writing leaves it: one file begun, and
    // git's lock of troupe's scratch index.
    std::fs::write(sandbox.ws().join("a.txt"), "").unwrap();
    std::fs::write(dir.join("apply-check.index.lock"), "").unwrap();

    let again = crate::common::run(apply(None));
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("a.txt")).unwrap(),
        "a"
    );
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("b.txt")).unwrap(),
        "b"
    );
    assert!(!dir.join("apply.json").exists(), "finished");
    assert!(!dir.join("apply-check.index.lock").exists());

    // As a kill after the last write leaves it: the scratch index, with
    // nothing left for the next apply to write.
    std::fs::write(dir.join("apply-head.index"), "").unwrap();
    let done = crate::common::run(apply(None));
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert!(!dir.join("apply-head.index").exists(), "scratch cleared");
}

#[test]
fn a_path_edited_after_an_apply_was_cut_short_is_the_users() {
    let sandbox = Sandbox::new();
    let (dir, run_id) = landed_run(&sandbox);
    let held = git_holding(&sandbox, "checkout-index", Hold::Before);
    let mut cut = apply_command(&sandbox, &run_id, Some(&held))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the apply's journal", || dir.join("apply.json").is_file());
    cut.kill().unwrap();
    wait_exit(&mut cut);
    let journal = read_json(&dir.join("apply.json"));
    let a = journal["paths"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["path"] == "a.txt")
        .cloned()
        .unwrap();
    assert!(a["old"].is_null(), "a.txt is new: {journal}");
    assert_eq!(a["new"].as_str().unwrap().len(), 40, "{journal}");
    // The apply had begun b.txt (a prefix of the run's version); the user
    // then wrote a.txt, which the journal names but troupe never wrote so.
    std::fs::write(sandbox.ws().join("a.txt"), "the user's a").unwrap();
    std::fs::write(sandbox.ws().join("b.txt"), "").unwrap();

    let again = crate::common::run(apply_command(&sandbox, &run_id, None));
    assert_eq!(again.code, 1, "{}", again.stderr);
    assert!(
        again.stderr.contains("this path changed in") && again.stderr.contains(": a.txt;"),
        "{}",
        again.stderr
    );
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("a.txt")).unwrap(),
        "the user's a"
    );
    assert!(dir.join("apply.json").is_file(), "kept for the next apply");

    std::fs::remove_file(sandbox.ws().join("a.txt")).unwrap();
    let last = crate::common::run(apply_command(&sandbox, &run_id, None));
    assert_eq!(last.code, 0, "{}", last.stderr);
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("b.txt")).unwrap(),
        "b"
    );
}

#[test]
fn a_run_still_running_is_neither_applied_nor_cleaned() {
    let sandbox = Sandbox::new();
    with_log(&sandbox);
    let slow = vec![
        planner(json!([step("s1", &[])])),
        worker_rule("s1", appends("by-s1", 30_000)),
        approving_reviewer(),
    ];
    let mut running = crate::faults::start_run(
        &sandbox,
        slow,
        &["--isolation", "worktree", "--max-replans", "0"],
    );
    wait_for("s1's worker", || {
        crate::faults::first_run(&sandbox)
            .is_some_and(|run| run.join("s1/worker-1/.subagent").is_dir())
    });
    let run_id = run_id_of(&run_dir(&sandbox));
    let apply = crate::common::run(apply_command(&sandbox, &run_id, None));
    let mut clean = troupe();
    clean
        .args(["clean", &run_id, "--workspace"])
        .arg(sandbox.ws());
    let clean = crate::common::run(clean);
    running.kill().unwrap();
    wait_exit(&mut running);
    assert_eq!(apply.code, 1, "{}", apply.stderr);
    assert!(
        apply.stderr.contains(&format!(
            "{run_id} is still being run (it is held by pid {})",
            running.id()
        )),
        "{}",
        apply.stderr
    );
    assert!(!run_dir(&sandbox).join("apply.json").exists());
    assert_eq!(clean.code, 1, "{}", clean.stderr);
    assert!(
        clean
            .stderr
            .contains(&format!("not cleaned: run {run_id} is still being run")),
        "{}",
        clean.stderr
    );
    assert!(
        run_dir(&sandbox).join("s1/checkout-1").is_dir(),
        "the running attempt's checkout stays"
    );
}

#[test]
fn one_writer_of_a_workspace_at_a_time() {
    let sandbox = Sandbox::new();
    let (dir, run_id) = landed_run(&sandbox);
    let apply = || apply_command(&sandbox, &run_id, None);
    // An apply held inside its write: a second apply, and a run whose
    // workers would share the workspace, are refused, naming it.
    let held = git_holding(&sandbox, "checkout-index", Hold::Before);
    let mut first = apply_command(&sandbox, &run_id, Some(&held))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the first apply's journal", || {
        dir.join("apply.json").is_file()
    });
    let holder = format!("pid {}, run {run_id}", first.id());
    let second = crate::common::run(apply());
    assert_eq!(second.code, 1, "{}", second.stderr);
    assert!(
        second.stderr.contains("is being written by another troupe")
            && second.stderr.contains(&holder),
        "{}",
        second.stderr
    );
    let shared = vec![
        planner(json!([step("c", &[])])),
        worker_rule("c", crate::team::worker_writes("c", 0)),
        approving_reviewer(),
    ];
    let model = sandbox.script(json!({"rules": shared}));
    let mut command = troupe();
    command
        .args(["run", "another goal", "--model", &model])
        .args(["--isolation", "shared", "--workspace"])
        .arg(sandbox.ws());
    let run = crate::common::run(command);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains(&holder), "{}", run.stderr);
    assert!(
        !sandbox.ws().join("c.txt").exists(),
        "the refused run wrote nothing"
    );
    first.kill().unwrap();
    wait_exit(&mut first);

    let again = crate::common::run(apply());
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("a.txt")).unwrap(),
        "a"
    );
}

/// The plan of the kill loop: a diamond (so `auto` isolates it), one step
/// appending to a file every step's change is merged with.
fn diamond() -> Vec<Value> {
    vec![
        planner(json!([
            step("s1", &[]),
            step("s2", &["s1"]),
            step("s3", &["s1"]),
            step("s4", &["s1"]),
            step("s5", &["s2", "s3", "s4"])
        ])),
        worker_rule("s1", crate::team::worker_writes("s1", 20)),
        worker_rule("s2", appends("appended-by-s2", 20)),
        worker_rule("s3", crate::team::worker_writes("s3", 20)),
        worker_rule("s4", crate::team::worker_writes("s4", 20)),
        worker_rule("s5", crate::team::worker_writes("s5", 20)),
        approving_reviewer(),
    ]
}

/// The tree of the run's branch.
fn branch_tree(sandbox: &Sandbox, run_id: &str) -> String {
    git(
        &sandbox.ws(),
        &["rev-parse", &format!("troupe/{run_id}^{{tree}}")],
    )
    .trim()
    .to_string()
}

#[test]
fn kills_at_random_moments_resume_to_the_uninterrupted_result() {
    let kills: u64 = std::env::var("TROUPE_KILLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(50);
    let clean = Sandbox::new();
    with_log(&clean);
    let started = std::time::Instant::now();
    let team = crate::team::team_run(&clean, diamond(), &["--max-replans", "0"]);
    let span = started.elapsed().as_millis() as u64;
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let expected = branch_tree(&clean, &run_id_of(&team.dir));
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut outcomes = Vec::new();
    for kill in 0..kills {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let after = 30 + seed % span.max(31);
        let sandbox = Sandbox::new();
        with_log(&sandbox);
        let head = git(&sandbox.ws(), &["rev-parse", "HEAD"]);
        let model = sandbox.script(json!({"rules": diamond()}));
        // What is compared is the branch, and the workspace left as it
        // was: the result stays on the branch (--no-apply).
        let mut troupe = troupe()
            .args(["run", "test goal", "--model", &model, "--max-replans", "0"])
            .arg("--no-apply")
            .arg("--workspace")
            .arg(sandbox.ws())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(after));
        let _ = troupe.kill();
        wait_exit(&mut troupe);
        let results = sandbox.ws().join("sub_agent_results");
        let Some(dir) = std::fs::read_dir(&results)
            .ok()
            .and_then(|mut runs| runs.find_map(|r| r.ok()))
            .map(|r| r.path())
        else {
            continue;
        };
        let run_id = run_id_of(&dir);
        let resumed = team_run_resume_with(&sandbox, diamond(), &run_id, &["--no-apply"]);
        let tree = (resumed.code == 0).then(|| branch_tree(&sandbox, &run_id));
        let consistent = tree.as_deref() == Some(expected.as_str())
            && git(&sandbox.ws(), &["rev-parse", "HEAD"]) == head
            && git(
                &sandbox.ws(),
                &["status", "--porcelain", "--untracked-files=no"],
            )
            .is_empty();
        if !consistent {
            let log = git(
                &sandbox.ws(),
                &["log", "--format=%h %s", &format!("troupe/{run_id}")],
            );
            let landings: Vec<String> = ["s1", "s2", "s3", "s4", "s5"]
                .iter()
                .flat_map(|s| (1..4).map(move |n| (s, n)))
                .filter_map(|(s, n)| {
                    std::fs::read_to_string(dir.join(format!("{s}/landing-{n}.json")))
                        .ok()
                        .map(|t| format!("{s}/{n}: {t}"))
                })
                .collect();
            outcomes.push(format!(
                "kill {kill} after {after} ms: exit {}, tree {tree:?}\nbranch:\n{log}\nintents: {landings:?}\n{}",
                resumed.code, resumed.stderr
            ));
        }
    }
    assert!(
        outcomes.is_empty(),
        "inconsistent:\n{}",
        outcomes.join("\n---\n")
    );
}

/// The state of `paths` in the workspace: each one's content, or `None`
/// when it is not there.
fn contents(sandbox: &Sandbox, paths: &[String]) -> Vec<(String, Option<Vec<u8>>)> {
    paths
        .iter()
        .map(|p| (p.clone(), std::fs::read(sandbox.ws().join(p)).ok()))
        .collect()
}

#[test]
fn applies_killed_at_random_moments_end_as_one_clean_apply() {
    let sandbox = Sandbox::new();
    with_log(&sandbox);
    for i in 0..40 {
        std::fs::write(sandbox.ws().join(format!("old{i}.txt")), "old").unwrap();
    }
    git(&sandbox.ws(), &["add", "."]);
    git(&sandbox.ws(), &["commit", "-q", "-m", "old files"]);
    // 400 new files of 8 KiB, 40 removed, one changed: an apply long
    // enough to be cut anywhere.
    let command = "for i in $(seq 400); do head -c 8192 /dev/zero | tr '\\0' x > new$i.txt; done; rm old*.txt; printf 'changed|' > log.txt";
    let rules = vec![
        planner(json!([step("s1", &[])])),
        worker_rule(
            "s1",
            vec![
                json!({"tool_calls": [{"name": "run_command", "arguments": {"command": command}}]}),
                json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "many files"}}]}),
            ],
        ),
        approving_reviewer(),
    ];
    let team = crate::team::team_run(&sandbox, rules, &["--isolation", "worktree", "--no-apply"]);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let run_id = run_id_of(&team.dir);
    let changed: Vec<String> = git(
        &sandbox.ws(),
        &[
            "diff",
            "--name-only",
            &format!("troupe/{run_id}~1"),
            &format!("troupe/{run_id}"),
        ],
    )
    .lines()
    .map(str::to_string)
    .collect();
    assert_eq!(changed.len(), 441, "{changed:?}");
    let expected: Vec<(String, Option<Vec<u8>>)> = changed
        .iter()
        .map(|p| {
            let out = Command::new("git")
                .args(["show", &format!("troupe/{run_id}:{p}")])
                .current_dir(sandbox.ws())
                .output()
                .unwrap();
            (p.clone(), out.status.success().then_some(out.stdout))
        })
        .collect();
    let head = git(&sandbox.ws(), &["rev-parse", "HEAD"]);

    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut cut_short = 0;
    for round in 0..6 {
        // The workspace as before any apply.
        git(&sandbox.ws(), &["checkout", "-q", "HEAD", "--", "."]);
        for i in 1..=400 {
            let _ = std::fs::remove_file(sandbox.ws().join(format!("new{i}.txt")));
        }
        let mut cuts = Vec::new();
        for _ in 0..2 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let after = seed % 100;
            let mut apply = apply_command(&sandbox, &run_id, None);
            std::os::unix::process::CommandExt::process_group(&mut apply, 0);
            let mut apply = apply
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(after));
            // The whole group, git's children with troupe.
            let pgid = nix::unistd::Pid::from_raw(-(apply.id() as i32));
            let _ = nix::sys::signal::kill(pgid, nix::sys::signal::Signal::SIGKILL);
            let status = apply.wait().unwrap();
            // Its git children too, which die a moment after it.
            wait_for("the apply's process group to end", || {
                nix::sys::signal::kill(pgid, None).is_err()
            });
            assert!(
                status.success() || status.code().is_none(),
                "round {round}: an apply is cut short or done, never refused: {status:?}"
            );
            cut_short += usize::from(status.code().is_none());
            cuts.push(format!("{after} ms: {status:?}"));
        }
        let last = crate::common::run(apply_command(&sandbox, &run_id, None));
        assert_eq!(
            last.code, 0,
            "round {round}, after {cuts:?}: {}",
            last.stderr
        );
        assert!(
            contents(&sandbox, &changed) == expected,
            "round {round}, after {cuts:?}: the workspace is not the run's result"
        );
        assert!(!team.dir.join("apply.json").exists());
        let left: Vec<String> = std::fs::read_dir(&team.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("apply"))
            .collect();
        assert!(left.is_empty(), "troupe's scratch left: {left:?}");
    }
    assert!(cut_short > 0, "no apply was cut short");
    assert_eq!(git(&sandbox.ws(), &["rev-parse", "HEAD"]), head);
}

/// Whether a live process was started on a task file under `dir` (its
/// command line names it): an agent of that step.
fn an_agent_works_in(dir: &Path) -> bool {
    let dir = dir.to_string_lossy().into_owned();
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return false;
    };
    processes.filter_map(Result::ok).any(|process| {
        std::fs::read(process.path().join("cmdline")).is_ok_and(|line| {
            line.split(|b| *b == 0)
                .any(|arg| String::from_utf8_lossy(arg).starts_with(&dir))
        })
    })
}
