//! `--isolation worktree` with real git and the real binaries: each step
//! attempt in a checkout of its own, merged on approval, conflicts sent
//! back, the user's workspace untouched until the result is applied.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::common::{Sandbox, cli, read_json, troupe};
use crate::faults::{has_event, signal, start_run, team_run_resume, wait_exit, wait_for};
use crate::hostile::unprivileged;
use crate::team::{
    TeamRun, approving_reviewer, finish_team_run, planner, step, team_command, team_run,
    two_steps_at_once, verdict, worker_rule, worker_writes,
};

/// git in `dir`, with an identity; its stdout, or a panic with stderr.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git is installed");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Nine numbered lines, `f.txt`'s first content.
pub const NINE: &str = "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\n";

/// The sandbox's workspace as a git repository with one commit of `f.txt`.
pub fn repository(sandbox: &Sandbox) {
    let ws = sandbox.ws();
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("f.txt"), NINE).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    git(&ws, &["add", "f.txt"]);
    git(&ws, &["commit", "-q", "-m", "start"]);
}

/// A worker that writes `path` with `content` (after `delay_ms`), then
/// finishes.
pub fn writes(path: &str, content: &str, delay_ms: u64) -> Vec<Value> {
    vec![
        json!({"delay_ms": delay_ms, "tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": content}}]}),
        json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": format!("wrote {path}")}}]}),
    ]
}

/// A worker that runs `command` (after `delay_ms`), then finishes.
pub fn runs(command: &str, delay_ms: u64) -> Vec<Value> {
    vec![
        json!({"delay_ms": delay_ms, "tool_calls": [{"name": "run_command", "arguments": {"command": command}}]}),
        json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "ran it"}}]}),
    ]
}

fn isolated(sandbox: &Sandbox, rules: Vec<Value>, extra: &[&str]) -> TeamRun {
    let mut args = vec!["--isolation", "worktree", "--max-replans", "0"];
    args.extend(extra);
    team_run(sandbox, rules, &args)
}

/// `path` as the run's integration branch has it, or `None`.
pub fn on_branch(team: &TeamRun, path: &str) -> Option<String> {
    let isolation = &team.record()["isolation"];
    let git_dir = isolation["git_dir"]
        .as_str()
        .expect("run.json has isolation");
    let branch = isolation["branch"].as_str().unwrap();
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .args(["show", &format!("{branch}:{path}")])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn attempt(team: &TeamRun, step: &str, n: usize) -> Value {
    team.step(step)["attempts"][n].clone()
}

#[test]
fn parallel_changes_to_one_file_both_land() {
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &[])])),
        worker_rule("a", writes("f.txt", &NINE.replace("two", "TWO"), 0)),
        worker_rule("b", writes("f.txt", &NINE.replace("eight", "EIGHT"), 300)),
        approving_reviewer(),
    ];
    let team = isolated(&sandbox, rules, &["--no-apply"]);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let merged = on_branch(&team, "f.txt").unwrap();
    assert!(
        merged.contains("TWO") && merged.contains("EIGHT"),
        "{merged}"
    );
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("f.txt")).unwrap(),
        NINE,
        "with --no-apply the workspace stays as it was"
    );
    for id in ["a", "b"] {
        let change = &attempt(&team, id, 0)["change"];
        assert_eq!(change["files"], json!(["f.txt"]), "{change}");
        assert!(change["merge"].is_string(), "{change}");
        assert!(change["stat"].as_str().unwrap().contains("f.txt"));
    }
    assert!(
        team.run.stderr.contains("troupe apply "),
        "the run ends with the command that applies it:\n{}",
        team.run.stderr
    );
    assert!(
        !team.dir.join("a/checkout-1").exists(),
        "a landed checkout is removed"
    );
    let run_id = team.record()["run_id"].as_str().unwrap().to_string();
    let diff = cli(&sandbox, &["show", &format!("{run_id}/b"), "--diff"]);
    assert_eq!(diff.code, 0, "{}", diff.stderr);
    assert!(diff.stdout.contains("-eight\n+EIGHT"), "{}", diff.stdout);
    let text = cli(&sandbox, &["show", &format!("{run_id}/b")]);
    assert!(text.stdout.contains("landed: head"), "{}", text.stdout);
    let page = sandbox.root().join("report.html");
    let report = cli(
        &sandbox,
        &["report", &run_id, "-o", &page.display().to_string()],
    );
    assert_eq!(report.code, 0, "{}", report.stderr);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("<h2>Changes</h2>") && html.contains("troupe/run_"));
    // Issue 43, friction 8: each change's diff (collapsed) and the
    // Planner's conversation.
    assert!(
        html.contains("<details class=\"diff\"><summary>diff</summary><pre>")
            && html.contains("-eight\n+EIGHT"),
        "{html}"
    );
    assert!(html.contains("<h2>Planner</h2>"), "{html}");
}

#[test]
fn a_failed_steps_checkout_is_kept_until_clean() {
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &[])])),
        worker_rule(
            "a",
            vec![
                json!({"tool_calls": [{"name": "write_file", "arguments": {"path": "half.txt", "content": "half"}}]}),
                json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": false, "summary": "gave up"}}]}),
            ],
        ),
        worker_rule("b", worker_writes("b", 0)),
        approving_reviewer(),
    ];
    let team = isolated(&sandbox, rules, &[]);
    assert_eq!(team.run.code, 1, "{}", team.run.stderr);
    let kept = team.dir.join("a/checkout-1");
    assert_eq!(
        std::fs::read_to_string(kept.join("half.txt")).unwrap(),
        "half"
    );
    assert!(
        team.run.stderr.contains("troupe clean"),
        "{}",
        team.run.stderr
    );
    assert!(
        team.run
            .stderr
            .contains("1 checkout of steps that did not complete kept (a/checkout-1)"),
        "the checkout, not its git directory too: {}",
        team.run.stderr
    );
    let run_id = team.record()["run_id"].as_str().unwrap().to_string();
    let cleaned = cli(&sandbox, &["clean", &run_id]);
    assert_eq!(cleaned.code, 0, "{}", cleaned.stderr);
    assert!(!kept.exists());
    let worktrees = git(&sandbox.ws(), &["worktree", "list"]);
    assert_eq!(
        worktrees.lines().count(),
        1,
        "only the workspace: {worktrees}"
    );
    assert!(on_branch(&team, "b.txt").is_some(), "the branch stays");
}

// Regression: a rejected attempt's 300 MB stayed in the user's .git
// objects (fourth trial: 20,000 files, 158 MB). What only a completed
// step's rejected attempts wrote goes as the run ends; a failed step's
// stays for a resume to continue on, and `troupe clean` prunes it.
#[test]
fn what_only_rejected_attempts_wrote_leaves_the_repository() {
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let rejected = "only-the-rejected-attempt-wrote-this-7c1d\n";
    let landed = "the-second-attempt-landed-this-44e2\n";
    let failed = "the-failed-step-wrote-this-93ab\n";
    let gave_up = "a-worker-that-gave-up-wrote-this-5d0f\n";
    let mut gives_up = writes("c.txt", gave_up, 0);
    gives_up[1] = json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": false, "summary": "gave up"}}]});
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &[]), step("c", &[])])),
        // More objects than git packs rather than writes loose.
        json!({"role": "worker", "step": "a", "attempt": 1, "reply": runs(&format!("printf '{}' > big.txt && mkdir many && for i in $(seq 150); do echo $i-7c1d > many/$i; done", rejected.trim_end()), 0)}),
        // A retry goes on from the rejected attempt's work.
        json!({"role": "worker", "step": "a", "attempt": 2, "reply": runs(&format!("rm -r many && printf '{}\\n' > big.txt", landed.trim_end()), 0)}),
        worker_rule("b", writes("b.txt", failed, 0)),
        worker_rule("c", gives_up),
        json!({"role": "reviewer", "step": "a", "attempt": 1, "reply": [verdict(json!(false), "not this")]}),
        json!({"role": "reviewer", "step": "b", "reply": [verdict(json!(false), "never this")]}),
        approving_reviewer(),
    ];
    let team = isolated(&sandbox, rules, &[]);
    assert_eq!(team.run.code, 1, "{}", team.run.stderr);
    assert_eq!(team.step("a")["status"], "completed");
    assert_eq!(team.step("b")["status"], "failed");
    assert_eq!(team.step("c")["status"], "failed");
    let id = |text: &str| {
        let out = Command::new("git")
            .args(["hash-object", "--stdin"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child.stdin.take().unwrap().write_all(text.as_bytes())?;
                child.wait_with_output()
            })
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let exists = |blob: &str| {
        Command::new("git")
            .args(["cat-file", "-e", blob])
            .current_dir(sandbox.ws())
            .status()
            .unwrap()
            .success()
    };
    let (gone, kept, left, given_up) =
        (id(rejected.trim_end()), id(landed), id(failed), id(gave_up));
    // A copy-on-write checkout kept for a look is written out by a commit
    // of its own, which names what the worker wrote.
    let kept_commit = team.dir.join("c/kept-1.commit");
    if kept_commit.exists() {
        assert!(
            exists(&given_up),
            "the kept attempt's checkout is there to see"
        );
    }
    for blob in [gone, id("150-7c1d\n")] {
        assert!(
            !exists(&blob),
            "the completed step's rejected attempt is pruned: {blob}"
        );
    }
    assert!(exists(&kept), "what landed stays");
    assert!(exists(&left), "the failed step's attempts stay");
    let run_id = team.record()["run_id"].as_str().unwrap().to_string();
    let cleaned = cli(&sandbox, &["clean", &run_id]);
    assert_eq!(cleaned.code, 0, "{}", cleaned.stderr);
    assert!(
        cleaned.stdout.contains("of its unlanded attempts pruned"),
        "{}",
        cleaned.stdout
    );
    assert!(!exists(&left), "the failed step's attempts are pruned");
    assert!(
        !exists(&given_up),
        "what only the kept checkout's commit held is pruned with it"
    );
    assert!(!team.dir.join("c/checkout-1").exists());
    assert!(exists(&kept), "what landed stays");
    git(&sandbox.ws(), &["fsck", "--no-dangling"]);
}

#[test]
fn the_same_lines_conflict_and_the_retry_lands_on_the_new_head() {
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let both = NINE
        .replace("two", "TWO from a")
        .replace("five", "FIVE from b");
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &[])])),
        worker_rule("a", writes("f.txt", &NINE.replace("two", "TWO from a"), 0)),
        json!({"role": "worker", "step": "b", "attempt": 1, "reply": writes("f.txt", &NINE.replace("two", "TWO from b"), 800)}),
        json!({"role": "worker", "step": "b", "attempt": 2, "reply": writes("f.txt", &both, 0)}),
        approving_reviewer(),
    ];
    let team = isolated(&sandbox, rules, &[]);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let first = attempt(&team, "b", 0);
    assert_eq!(first["change"]["conflicts"], json!(["f.txt"]), "{first}");
    assert!(first["change"]["merge"].is_null());
    let conflicted = team.events_of("change_conflicted");
    assert_eq!(conflicted.len(), 1, "{conflicted:?}");
    assert_eq!(conflicted[0]["step"], "b");
    let second = attempt(&team, "b", 1);
    let base = second["change"]["base"].as_str().unwrap();
    let a_landed = attempt(&team, "a", 0)["change"]["merge"].clone();
    assert_eq!(
        json!(base),
        a_landed,
        "the retry starts from the head a left"
    );
    let brief = read_json(&team.dir.join("b/worker-2/.subagent/task.json"));
    let task = brief["task"].as_str().unwrap();
    assert!(
        task.contains("conflicts") && task.contains("f.txt") && task.contains("<<<<<<<"),
        "the conflict, with its hunks, is the retry's feedback:\n{task}"
    );
    assert!(
        task.contains("accepted, but troupe could not land its change")
            && !task.contains("reviewer rejected"),
        "the brief says who sent it back:\n{task}"
    );
    assert_eq!(team.events_of("step_retry")[0]["sent_back_by"], "landing");
    assert_eq!(on_branch(&team, "f.txt").unwrap(), both);
}

// A change that only adds, landing beside one that moved its directory:
// git finds the rename and says where the new file should go, so troupe
// merges it with git rather than laying its file where it was made.
#[test]
fn a_file_added_in_a_directory_moved_meanwhile_is_a_conflict_git_names() {
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let ws = sandbox.ws();
    std::fs::create_dir(ws.join("d")).unwrap();
    std::fs::write(ws.join("d/x.txt"), NINE).unwrap();
    std::fs::write(ws.join("d/y.txt"), "y\n").unwrap();
    git(&ws, &["add", "d"]);
    git(&ws, &["commit", "-q", "-m", "d"]);
    let rules = vec![
        planner(json!([step("mv", &[]), step("add", &[])])),
        worker_rule("mv", runs("mkdir e && mv d/x.txt d/y.txt e/", 0)),
        json!({"role": "worker", "step": "add", "attempt": 1, "reply": writes("d/new.txt", "new\n", 800)}),
        json!({"role": "worker", "step": "add", "attempt": 2, "reply": writes("e/new.txt", "new\n", 0)}),
        approving_reviewer(),
    ];
    let team = isolated(&sandbox, rules, &["--no-apply"]);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    assert!(
        team.at("change_landed", "mv") < team.at("review_approved", "add"),
        "mv landed first"
    );
    let first = attempt(&team, "add", 0);
    let conflicts = first["change"]["conflicts"].to_string();
    assert!(conflicts.contains("new.txt"), "{first}");
    assert!(first["change"]["merge"].is_null(), "{first}");
    assert_eq!(team.events_of("change_conflicted")[0]["step"], "add");
    assert_eq!(on_branch(&team, "e/new.txt").as_deref(), Some("new\n"));
    assert_eq!(on_branch(&team, "d/new.txt"), None);
    assert_eq!(on_branch(&team, "e/x.txt").as_deref(), Some(NINE));
    // The conflicted attempt's blob is the landed one's too: the prune as
    // the run ended kept it (it once went, with the branch broken).
    git(&ws, &["fsck", "--no-dangling"]);
}

#[test]
fn a_dependent_step_sees_its_dependency_and_not_a_running_sibling() {
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &[]), step("c", &["a"])])),
        worker_rule("a", worker_writes("a", 0)),
        worker_rule("b", worker_writes("b", 2500)),
        worker_rule("c", runs("ls > seen.txt", 0)),
        approving_reviewer(),
    ];
    let team = isolated(&sandbox, rules, &[]);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    assert!(
        team.at("step_started", "c") < team.at("change_landed", "b"),
        "c started while b was still at work"
    );
    let seen = on_branch(&team, "seen.txt").unwrap();
    assert!(seen.contains("a.txt"), "{seen}");
    assert!(!seen.contains("b.txt"), "{seen}");
    assert!(on_branch(&team, "b.txt").is_some(), "b landed after");
}

/// A later head's checkout shows what landed since the snapshot and
/// nothing else: the edit, and neither the file nor the directory the
/// dependency deleted (copy-on-write, its base is a thin layer of those
/// over the workspace); its index agrees with its files.
fn a_dependent_sees_the_files_its_dependency_changed_and_deleted(as_user: bool) {
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let ws = sandbox.ws();
    for (path, content) in [
        ("gone.txt", "gone\n"),
        ("old/x.txt", "x\n"),
        ("old/deeper/y.txt", "y\n"),
        ("keep/z.txt", "z\n"),
    ] {
        std::fs::create_dir_all(ws.join(path).parent().unwrap()).unwrap();
        std::fs::write(ws.join(path), content).unwrap();
    }
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-q", "-m", "more"]);
    let rules = vec![
        planner(json!([step("a", &[]), step("c", &["a"])])),
        worker_rule(
            "a",
            runs(
                "printf 'edited\\n' > f.txt && rm gone.txt && rm -r old && mkdir new && echo n > new/n.txt",
                0,
            ),
        ),
        worker_rule(
            "c",
            runs(
                "{ cat f.txt new/n.txt; ls -A; test -e old && echo OLD; git status --porcelain; } > seen.txt 2>&1",
                0,
            ),
        ),
        approving_reviewer(),
    ];
    let mut command = team_command(
        &sandbox,
        rules,
        &["--isolation", "worktree", "--max-replans", "0"],
    );
    if as_user {
        command = unprivileged(&sandbox, command);
        command.env("HOME", sandbox.root());
    }
    let team = finish_team_run(&sandbox, command);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let seen = on_branch(&team, "seen.txt").expect("c wrote seen.txt");
    assert_eq!(
        seen, "edited\nn\n.git\nf.txt\nkeep\nnew\nseen.txt\n?? seen.txt\n",
        "what c saw in its checkout"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("f.txt")).unwrap(),
        "edited\n"
    );
    assert!(!ws.join("old").exists(), "the run's deletion was applied");
}

#[test]
fn a_dependent_sees_the_files_its_dependency_changed_and_deleted_as_the_caller() {
    a_dependent_sees_the_files_its_dependency_changed_and_deleted(false);
}

#[test]
fn a_dependent_sees_the_files_its_dependency_changed_and_deleted_as_an_ordinary_user() {
    a_dependent_sees_the_files_its_dependency_changed_and_deleted(true);
}

/// A worker of `a` that tries to write the user's workspace and the
/// checkout of its sibling `b`, which is still at work.
fn escape_rules(ws: &Path) -> Vec<Value> {
    let ws = ws.display();
    let sibling = r#"$PWD/../../b/checkout-1"#;
    let command = format!(
        r#"test -d {sibling} && echo sibling-there; echo x > {ws}/escaped.txt; echo x > {sibling}/escaped.txt; echo done"#
    );
    vec![
        planner(json!([step("a", &[]), step("b", &[])])),
        worker_rule(
            "a",
            vec![
                json!({"delay_ms": 300, "tool_calls": [{"name": "run_command", "arguments": {"command": command}}]}),
                json!({"tool_calls": [{"name": "write_file", "arguments": {"path": format!("{ws}/escaped-too.txt"), "content": "x"}}]}),
                json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "tried"}}]}),
            ],
        ),
        worker_rule("b", worker_writes("b", 2000)),
        approving_reviewer(),
    ]
}

fn assert_contained(sandbox: &Sandbox, team: &TeamRun) {
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    for name in ["escaped.txt", "escaped-too.txt"] {
        assert!(!sandbox.ws().join(name).exists(), "{name} in the workspace");
    }
    let transcript = read_json(&team.dir.join("a/worker-1/.subagent/conversations.json"));
    let results: Vec<String> = transcript["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect();
    // The run's workspace is not in the worker's view: an empty tmpfs
    // holds what it works in, put back, and nothing else; a write there
    // lands in nothing real, or is refused where that path is root's. The
    // sibling's checkout is not there at all.
    assert!(!results[0].contains("sibling-there"), "{}", results[0]);
    assert!(
        results[0].contains("b/checkout-1/escaped.txt: Directory nonexistent"),
        "{}",
        results[0]
    );
    assert!(results[1].contains("outside"), "{}", results[1]);
    assert_eq!(
        on_branch(team, "escaped.txt"),
        None,
        "nothing reached b's checkout"
    );
    assert_eq!(
        team.record()["steps"][0]["attempts"][0]["worker"]["stats"]["sandbox"]["status"],
        "fully_enforced"
    );
}

#[test]
fn writes_outside_the_checkout_are_denied() {
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let team = isolated(&sandbox, escape_rules(&sandbox.ws()), &[]);
    assert_contained(&sandbox, &team);
}

#[test]
fn writes_outside_the_checkout_are_denied_as_an_ordinary_user() {
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let command = team_command(
        &sandbox,
        escape_rules(&sandbox.ws()),
        &["--isolation", "worktree", "--max-replans", "0"],
    );
    let mut command = unprivileged(&sandbox, command);
    command.env("HOME", sandbox.root());
    let team = finish_team_run(&sandbox, command);
    assert_contained(&sandbox, &team);
}

#[test]
fn the_users_changes_survive_untouched_and_are_in_the_snapshot() {
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let ws = sandbox.ws();
    std::fs::write(ws.join("staged.txt"), "staged\n").unwrap();
    git(&ws, &["add", "staged.txt"]);
    std::fs::write(ws.join("f.txt"), format!("{NINE}ten (not committed)\n")).unwrap();
    std::fs::write(ws.join("untracked.txt"), "untracked\n").unwrap();
    std::fs::write(ws.join(".gitignore"), "ignored.txt\n").unwrap();
    std::fs::write(ws.join("ignored.txt"), "ignored\n").unwrap();
    // The run's records appear in the workspace, as in any run.
    let status = |ws: &Path| {
        git(ws, &["status", "--porcelain"])
            .lines()
            .filter(|l| !l.contains("sub_agent_results"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let status_before = status(&ws);
    let index_before = git(&ws, &["ls-files", "--stage"]);
    let head_before = git(&ws, &["rev-parse", "HEAD"]);
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &[])])),
        worker_rule(
            "a",
            runs(
                "cat f.txt untracked.txt staged.txt > seen.txt; ls ignored.txt >> seen.txt 2>&1",
                0,
            ),
        ),
        worker_rule("b", worker_writes("b", 0)),
        approving_reviewer(),
    ];
    let team = isolated(&sandbox, rules, &["--no-apply"]);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let seen = on_branch(&team, "seen.txt").unwrap();
    for expected in ["ten (not committed)", "untracked", "staged"] {
        assert!(
            seen.contains(expected),
            "{expected} in the snapshot: {seen}"
        );
    }
    assert!(
        seen.contains("No such file"),
        "ignored files stay out: {seen}"
    );
    assert_eq!(status(&ws), status_before);
    assert_eq!(
        git(&ws, &["ls-files", "--stage"]),
        index_before,
        "the index"
    );
    assert_eq!(git(&ws, &["rev-parse", "HEAD"]), head_before);
    assert_eq!(
        git(&ws, &["symbolic-ref", "HEAD"]).trim(),
        "refs/heads/main"
    );
    let snapshot = team.record()["isolation"]["snapshot"]
        .as_str()
        .unwrap()
        .to_string();
    let parent = git(&ws, &["rev-parse", &format!("{snapshot}^")]);
    assert_eq!(parent, head_before, "the snapshot is a child of HEAD");
}

/// A step whose first attempt is rejected: the retry starts with what it
/// wrote, rebased on the head (which `b` moved meanwhile), and fixes it.
fn a_rejected_attempt_is_carried_into_the_retry(checkouts: &str) {
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &[])])),
        json!({"role": "worker", "step": "a", "attempt": 1, "reply": runs("printf 'half done' > junk.txt && rm f.txt", 0)}),
        json!({"role": "worker", "step": "a", "attempt": 2, "reply": runs("cat junk.txt > state.txt; test -e f.txt || printf ', f gone' >> state.txt; printf done > junk.txt", 0)}),
        json!({"role": "reviewer", "step": "a", "attempt": 1, "reply": [
            {"tool_calls": [{"name": "run_command", "arguments": {"command": "cat ../change-1.diff"}}]},
            verdict(json!(false), "junk")
        ]}),
        worker_rule("b", worker_writes("b", 0)),
        approving_reviewer(),
    ];
    let model = sandbox.script(json!({"rules": rules}));
    let mut command = troupe();
    command
        .args(["run", "test goal", "--model", &model, "--workspace"])
        .arg(sandbox.ws())
        .args([
            "--isolation",
            "worktree",
            "--max-replans",
            "0",
            "--no-apply",
        ])
        .env("TROUPE_CHECKOUTS", checkouts);
    let team = crate::team::finish_team_run(&sandbox, command);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    if checkouts == "auto" && crate::overlay::overlays_work() {
        let isolation = &team.events_of("isolation")[0];
        assert_eq!(isolation["note"], "copy-on-write checkouts", "{isolation}");
    }
    assert_eq!(on_branch(&team, "state.txt").unwrap(), "half done, f gone");
    assert_eq!(on_branch(&team, "junk.txt").unwrap(), "done");
    assert_eq!(
        on_branch(&team, "f.txt"),
        None,
        "the deletion was carried too"
    );
    assert!(on_branch(&team, "b.txt").is_some());
    assert!(
        !team.dir.join("a/checkout-1").exists(),
        "the rejected checkout is gone"
    );
    let diff = std::fs::read_to_string(team.dir.join("a/change-1.diff")).unwrap();
    assert!(
        diff.contains("junk.txt"),
        "the rejected diff is kept: {diff}"
    );
    let task = read_json(&team.dir.join("a/worker-2/.subagent/task.json"));
    let brief = task.to_string();
    assert!(
        brief.contains(
            "Its changes are in your workspace, on the project as it stands now (f.txt, junk.txt)"
        ),
        "{brief}"
    );
}

#[test]
fn a_rejected_attempt_is_carried_into_the_retry_on_its_own_layer() {
    a_rejected_attempt_is_carried_into_the_retry("auto");
}

#[test]
fn a_rejected_attempt_is_carried_into_the_retry_in_a_full_checkout() {
    a_rejected_attempt_is_carried_into_the_retry("full");
}

#[test]
fn a_workspace_that_is_not_a_repository_gets_a_private_one_and_apply_brings_the_result() {
    let sandbox = Sandbox::new();
    let ws = sandbox.ws();
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("notes.txt"), "mine\n").unwrap();
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &[])])),
        worker_rule("a", worker_writes("a", 0)),
        worker_rule("b", writes("notes.txt", "mine\nand b's\n", 0)),
        approving_reviewer(),
    ];
    let team = isolated(&sandbox, rules, &[]);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    assert!(
        !ws.join(".git").exists(),
        "the workspace is not made a repository"
    );
    let isolation = team.record()["isolation"].clone();
    assert_eq!(isolation["private"], true);
    assert!(team.dir.join("repo.git").is_dir());
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "a");
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.txt")).unwrap(),
        "mine\nand b's\n"
    );
    assert!(
        team.run.stderr.contains("applied branch"),
        "{}",
        team.run.stderr
    );
}

#[test]
fn apply_refuses_a_path_changed_meanwhile_and_changes_nothing() {
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &[])])),
        worker_rule("a", writes("f.txt", &NINE.replace("two", "TWO"), 0)),
        worker_rule("b", worker_writes("b", 0)),
        approving_reviewer(),
    ];
    let team = isolated(&sandbox, rules, &["--no-apply"]);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let ws = sandbox.ws();
    let mine = format!("{NINE}mine meanwhile\n");
    std::fs::write(ws.join("f.txt"), &mine).unwrap();
    let run_id = team.record()["run_id"].as_str().unwrap().to_string();
    let apply = |sandbox: &Sandbox| {
        let mut command = troupe();
        command
            .args(["apply", &run_id])
            .arg("--workspace")
            .arg(sandbox.ws());
        crate::common::run(command)
    };
    let refused = apply(&sandbox);
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("f.txt") && refused.stderr.contains("since the run began"),
        "{}",
        refused.stderr
    );
    assert_eq!(std::fs::read_to_string(ws.join("f.txt")).unwrap(), mine);
    assert!(!ws.join("b.txt").exists(), "nothing applied at all");
    std::fs::write(ws.join("f.txt"), NINE).unwrap();
    let applied = apply(&sandbox);
    assert_eq!(applied.code, 0, "{}", applied.stderr);
    assert_eq!(
        std::fs::read_to_string(ws.join("f.txt")).unwrap(),
        NINE.replace("two", "TWO")
    );
    assert_eq!(std::fs::read_to_string(ws.join("b.txt")).unwrap(), "b");
    let again = apply(&sandbox);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(
        again.stderr.contains("nothing to apply"),
        "{}",
        again.stderr
    );
}

// Issue 23, item 4: the refusal's advice (commit, or merge the branch)
// did not work; --3way merges the run's change into the user's version.
#[test]
fn apply_3way_merges_the_runs_change_into_a_path_changed_meanwhile() {
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &[])])),
        worker_rule("a", writes("f.txt", &NINE.replace("two", "TWO"), 0)),
        worker_rule("b", worker_writes("b", 0)),
        approving_reviewer(),
    ];
    let team = isolated(&sandbox, rules, &["--no-apply"]);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let ws = sandbox.ws();
    let run_id = team.record()["run_id"].as_str().unwrap().to_string();
    let apply = |extra: &[&str]| {
        let mut command = troupe();
        command
            .args(["apply", &run_id])
            .args(extra)
            .arg("--workspace")
            .arg(sandbox.ws());
        crate::common::run(command)
    };
    // Apart from the run's line: merged cleanly.
    std::fs::write(ws.join("f.txt"), NINE.replace("eight", "EIGHT")).unwrap();
    let refused = apply(&[]);
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("apply with --3way"),
        "{}",
        refused.stderr
    );
    let merged = apply(&["--3way"]);
    assert_eq!(merged.code, 0, "{}", merged.stderr);
    assert!(
        merged.stderr.contains("M f.txt (merged with yours)"),
        "{}",
        merged.stderr
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("f.txt")).unwrap(),
        NINE.replace("two", "TWO").replace("eight", "EIGHT")
    );
    assert_eq!(std::fs::read_to_string(ws.join("b.txt")).unwrap(), "b");

    // On the run's line: written with conflict markers, named, exit 1.
    std::fs::remove_file(ws.join("b.txt")).unwrap();
    std::fs::write(ws.join("f.txt"), NINE.replace("two", "deux")).unwrap();
    let conflicted = apply(&["--3way"]);
    assert_eq!(conflicted.code, 1, "{}", conflicted.stderr);
    assert!(
        conflicted.stderr.contains(
            "this path has conflict markers where your changes and the run's overlap: f.txt"
        ),
        "{}",
        conflicted.stderr
    );
    let text = std::fs::read_to_string(ws.join("f.txt")).unwrap();
    assert!(
        text.contains("<<<<<<< f.txt (yours)\ndeux\n=======\nTWO\n>>>>>>> f.txt (the run's)"),
        "{text}"
    );
    assert_eq!(std::fs::read_to_string(ws.join("b.txt")).unwrap(), "b");
}

#[test]
fn an_interrupted_isolated_run_resumes_on_its_branch() {
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let plan = planner(json!([step("quick", &[]), step("slow", &[])]));
    let slow = vec![
        plan.clone(),
        worker_rule("quick", worker_writes("quick", 0)),
        worker_rule("slow", worker_writes("slow", 30_000)),
        approving_reviewer(),
    ];
    let mut run = start_run(
        &sandbox,
        slow,
        &["--isolation", "worktree", "--max-replans", "0"],
    );
    wait_for("quick to land", || {
        has_event(&sandbox, "change_landed", "quick")
    });
    signal(&run, "-INT");
    assert_eq!(wait_exit(&mut run), 130);
    assert!(
        !sandbox.ws().join("quick.txt").exists(),
        "a run that did not complete is not applied"
    );
    let dir = crate::team::run_dir(&sandbox);
    let run_id = dir.file_name().unwrap().to_string_lossy().into_owned();
    let fast = vec![
        plan,
        worker_rule("quick", worker_writes("quick", 0)),
        worker_rule("slow", worker_writes("slow", 0)),
        approving_reviewer(),
    ];
    let resumed = team_run_resume(&sandbox, fast, &run_id);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    let team = TeamRun {
        run: resumed,
        dir: dir.clone(),
    };
    assert_eq!(on_branch(&team, "quick.txt").unwrap(), "quick");
    assert_eq!(on_branch(&team, "slow.txt").unwrap(), "slow");
    assert_eq!(
        team.step("quick")["attempts"].as_array().unwrap().len(),
        1,
        "not redone"
    );
    let slow = attempt(&team, "slow", 0);
    assert!(slow["change"]["merge"].is_string(), "{slow}");
    assert_eq!(
        slow["attempt"], 1,
        "the interrupted attempt done again: {slow}"
    );
    assert_eq!(slow["cut_short"][0]["status"], "terminated", "{slow}");
    for id in ["quick", "slow"] {
        assert_eq!(
            std::fs::read_to_string(sandbox.ws().join(format!("{id}.txt"))).unwrap(),
            id,
            "the resumed run applies its result at its end, as a fresh one does"
        );
    }
}

#[test]
fn without_git_auto_shares_the_workspace_and_worktree_fails_the_run() {
    let sandbox = Sandbox::new();
    let mut command = team_command(&sandbox, two_steps_at_once(), &["--max-replans", "0"]);
    command.env("PATH", "/nonexistent");
    let shared = finish_team_run(&sandbox, command);
    assert_eq!(shared.run.code, 0, "{}", shared.run.stderr);
    assert!(
        shared
            .run
            .stderr
            .contains("isolation: shared (no checkouts: cannot run git"),
        "{}",
        shared.run.stderr
    );
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("a.txt")).unwrap(),
        "a"
    );
    assert!(shared.record()["isolation"].is_null());

    let sandbox = Sandbox::new();
    let mut command = team_command(
        &sandbox,
        two_steps_at_once(),
        &["--isolation", "worktree", "--max-replans", "0"],
    );
    command.env("PATH", "/nonexistent");
    let refused = finish_team_run(&sandbox, command);
    assert_eq!(refused.run.code, 1, "{}", refused.run.stderr);
    assert!(
        refused
            .run
            .stderr
            .contains("--isolation worktree: cannot run git"),
        "{}",
        refused.run.stderr
    );
    assert_eq!(refused.record()["status"], "failed");
    assert!(!sandbox.ws().join("a.txt").exists(), "no step ran");
}

#[test]
fn one_step_at_a_time_shares_the_workspace_under_auto() {
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &["a"])])),
        worker_rule("a", worker_writes("a", 0)),
        worker_rule("b", worker_writes("b", 0)),
        approving_reviewer(),
    ];
    let team = team_run(&sandbox, rules, &["--max-replans", "0"]);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let chosen = team.events_of("isolation");
    assert_eq!(chosen[0]["mode"], "shared", "{chosen:?}");
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("b.txt")).unwrap(),
        "b"
    );
}

#[test]
fn the_reviewer_reads_the_start_of_a_large_diff_and_where_the_rest_is() {
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let small = "a small change\n";
    let large: String = (0..2_000)
        .map(|n| format!("line {n} of a large file\n"))
        .collect();
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &[])])),
        worker_rule("a", writes("small.txt", small, 0)),
        worker_rule("b", writes("large.txt", &large, 0)),
        approving_reviewer(),
    ];
    let team = isolated(&sandbox, rules, &[]);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let brief = |step: &str| {
        let task = read_json(
            &team
                .dir
                .join(format!("{step}/review-1/.subagent/task.json")),
        );
        task["task"].as_str().unwrap().to_string()
    };
    let whole = brief("a");
    assert!(whole.contains("+a small change"), "{whole}");
    assert!(!whole.contains("the diff is cut here"), "{whole}");
    let cut = brief("b");
    assert!(cut.contains("+line 0 of a large file"), "{cut}");
    assert!(!cut.contains("line 1999 of a large file"), "cut: {cut}");
    let whole_size = std::fs::metadata(team.dir.join("b/change-1.diff"))
        .unwrap()
        .len();
    assert!(
        cut.contains("the diff is cut here: these are its first ")
            && cut.contains(&format!(" of {whole_size} bytes; all of it is in "))
            && cut.contains("b/change-1.diff"),
        "{cut}"
    );
    // Whole lines: the last line shown is one the worker wrote.
    let shown = cut.split("\n(the diff is cut here").next().unwrap();
    let last = shown.lines().last().unwrap();
    assert!(
        last.starts_with("+line ") && last.ends_with(" of a large file"),
        "{last}"
    );
}

// Issue 43: a run killed after run.json said `completed` and before its
// apply ended was "completed already; nothing to resume", its result on
// the branch and not in the workspace. The apply is now due from the
// moment the run chose checkouts (`apply.state: pending` in run.json),
// and a resume finishes it. Here another troupe holds the workspace as
// the run ends, which leaves the apply pending as a kill would.
#[test]
fn a_completed_run_whose_apply_did_not_happen_is_resumed_into_the_workspace() {
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let ws = sandbox.ws();
    let rules = vec![
        planner(json!([step("a", &[])])),
        worker_rule("a", writes("a.txt", "from a\n", 0)),
        approving_reviewer(),
    ];
    let held = std::fs::File::open(&ws).unwrap();
    let held = nix::fcntl::Flock::lock(held, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|(_, e)| e)
        .unwrap();
    let team = team_run(&sandbox, rules, &["--isolation", "worktree"]);
    drop(held);
    assert_eq!(team.run.code, 1, "{}", team.run.stderr);
    assert_eq!(team.record()["status"], "completed");
    assert_eq!(
        team.record()["apply"]["state"],
        "pending",
        "{}",
        team.record()
    );
    assert!(!ws.join("a.txt").exists());
    let run_id = team.record()["run_id"].as_str().unwrap().to_string();
    let shown = cli(&sandbox, &["show", &run_id]);
    assert!(
        shown.stdout.contains(&format!(
            "not applied yet: the result is branch troupe/{run_id}; troupe run --resume {run_id} brings it into the workspace"
        )),
        "{}",
        shown.stdout
    );
    let listed = cli(&sandbox, &["runs"]);
    assert!(
        listed.stdout.contains("not applied yet"),
        "{}",
        listed.stdout
    );
    let page = cli(&sandbox, &["report", &run_id]).stdout;
    assert!(
        page.contains("<p class=\"apply\">not applied yet"),
        "{page}"
    );

    let resumed = cli(&sandbox, &["run", "--resume", &run_id]);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert!(
        resumed
            .stderr
            .contains("its result is not in the workspace yet: applying it"),
        "{}",
        resumed.stderr
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).unwrap(),
        "from a\n"
    );
    let apply = &team.record()["apply"];
    assert_eq!(apply["state"], "applied", "{apply}");
    assert_eq!(apply["written"], json!(["a.txt"]));
    assert_eq!(apply["added"], json!(["a.txt"]));
    let shown = cli(&sandbox, &["show", &run_id]);
    assert!(
        shown
            .stdout
            .contains("applied to the workspace: 1 path written (1 new), 0 removed"),
        "{}",
        shown.stdout
    );
    let again = cli(&sandbox, &["run", "--resume", &run_id]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(
        again.stderr.contains("nothing to resume"),
        "{}",
        again.stderr
    );
}
