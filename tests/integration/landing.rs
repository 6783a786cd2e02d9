//! Where an isolated run's result lands: in the workspace at the end of a
//! completed run, whatever the isolation chose (`--no-apply` keeps it on
//! the branch); never over a path the user changed meanwhile, and not at
//! all for a run that did not complete.

use serde_json::json;

use crate::common::{Sandbox, troupe};
use crate::faults::wait_for;
use crate::isolation::{NINE, git, on_branch, repository, runs, writes};
use crate::kills::{git_wrapped, path_before};
use crate::team::{
    TeamRun, approving_reviewer, finish_team_run, planner, step, team_command, team_run,
    worker_rule, worker_writes,
};

fn run_id(team: &TeamRun) -> String {
    team.record()["run_id"].as_str().unwrap().to_string()
}

fn branch(team: &TeamRun) -> String {
    team.record()["isolation"]["branch"]
        .as_str()
        .unwrap()
        .to_string()
}

fn read(sandbox: &Sandbox, path: &str) -> Option<String> {
    std::fs::read_to_string(sandbox.ws().join(path)).ok()
}

/// Two parallel steps: `a` changes `f.txt`, `b` writes `b.txt`.
fn two_steps() -> Vec<serde_json::Value> {
    vec![
        planner(json!([step("a", &[]), step("b", &[])])),
        worker_rule("a", writes("f.txt", &NINE.replace("two", "TWO"), 0)),
        worker_rule("b", worker_writes("b", 0)),
        approving_reviewer(),
    ]
}

// Issue 21: a diamond plan under the default `auto` ran in checkouts and
// left the workspace as it was, so `troupe run ... && make test` tested
// the old tree.
#[test]
fn a_diamond_under_auto_lands_in_the_workspace_and_leaves_index_and_head() {
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let ws = sandbox.ws();
    std::fs::write(ws.join("staged.txt"), "staged\n").unwrap();
    git(&ws, &["add", "staged.txt"]);
    std::fs::write(ws.join("untracked.txt"), "mine\n").unwrap();
    let index_before = git(&ws, &["ls-files", "--stage"]);
    let head_before = git(&ws, &["rev-parse", "HEAD"]);
    let rules = vec![
        planner(json!([
            step("s1", &[]),
            step("s2", &["s1"]),
            step("s3", &["s1"]),
            step("s4", &["s2", "s3"])
        ])),
        worker_rule("s1", worker_writes("s1", 0)),
        worker_rule("s2", writes("f.txt", &NINE.replace("two", "TWO"), 0)),
        worker_rule("s3", writes("f.txt", &NINE.replace("eight", "EIGHT"), 300)),
        worker_rule("s4", worker_writes("s4", 0)),
        approving_reviewer(),
    ];
    let team = team_run(&sandbox, rules, &["--max-replans", "0"]);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    assert_eq!(team.events_of("isolation")[0]["mode"], "worktree");
    assert_eq!(
        read(&sandbox, "f.txt").unwrap(),
        NINE.replace("two", "TWO").replace("eight", "EIGHT"),
        "both parallel changes are in the workspace"
    );
    for id in ["s1", "s4"] {
        assert_eq!(read(&sandbox, &format!("{id}.txt")).unwrap(), id);
    }
    assert!(
        team.run.stderr.contains("applied branch"),
        "{}",
        team.run.stderr
    );
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
    assert_eq!(read(&sandbox, "untracked.txt").unwrap(), "mine\n");
    assert!(
        git(&ws, &["diff", "--name-only"]).contains("f.txt"),
        "the result shows as an edit in the work tree"
    );
}

#[test]
fn no_apply_keeps_the_result_on_the_branch_and_names_the_command() {
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let team = team_run(&sandbox, two_steps(), &["--max-replans", "0", "--no-apply"]);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    assert_eq!(read(&sandbox, "f.txt").unwrap(), NINE, "the workspace");
    assert_eq!(read(&sandbox, "b.txt"), None);
    assert_eq!(
        on_branch(&team, "f.txt").unwrap(),
        NINE.replace("two", "TWO")
    );
    assert_eq!(on_branch(&team, "b.txt").unwrap(), "b");
    let command = format!(
        "troupe apply {} --workspace {}",
        run_id(&team),
        sandbox.ws().display()
    );
    let last = team.run.stderr.trim_end().lines().last().unwrap_or("");
    assert!(
        last.contains(&branch(&team)) && last.ends_with(&command),
        "the last line names the branch and the apply command:\n{}",
        team.run.stderr
    );
    let both = cli_run(&sandbox, &["--apply", "--no-apply"]);
    assert_eq!(both.code, 2, "{}", both.stderr);
    assert!(
        both.stderr.contains("cannot be used with"),
        "{}",
        both.stderr
    );
}

/// `troupe run "test goal"` with `extra` and no model: for arguments
/// refused before anything runs.
fn cli_run(sandbox: &Sandbox, extra: &[&str]) -> crate::common::Run {
    let mut command = troupe();
    command
        .args(["run", "test goal", "--workspace"])
        .arg(sandbox.ws())
        .args(extra);
    crate::common::run(command)
}

/// Whether the run in the sandbox's workspace is about to land a step:
/// the intent it writes before the branch moves.
fn about_to_land(sandbox: &Sandbox) -> bool {
    crate::faults::first_run(sandbox).is_some_and(|run| {
        ["a", "b"]
            .iter()
            .any(|id| run.join(format!("{id}/landing-1.json")).is_file())
    })
}

#[test]
fn a_path_the_user_changed_during_the_run_is_not_overwritten() {
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let ws = sandbox.ws();
    // The run's first landing waits for the gate, so that the user's edit
    // is made while the run is at work, long after its snapshot.
    let gate = sandbox.root().join("gate");
    let hold = format!(
        "case \"$*\" in *\"troupe: land\"*) while [ ! -e {} ]; do sleep 0.05; done;; esac\n",
        gate.display()
    );
    let held = git_wrapped(&sandbox, &hold, "");
    let mut command = team_command(&sandbox, two_steps(), &["--max-replans", "0"]);
    command.env("PATH", path_before(&held));
    let mine = format!("{NINE}mine meanwhile\n");
    let team = std::thread::scope(|scope| {
        let run = scope.spawn(|| finish_team_run(&sandbox, command));
        wait_for("the first landing", || about_to_land(&sandbox));
        std::fs::write(ws.join("f.txt"), &mine).unwrap();
        std::fs::write(&gate, "").unwrap();
        run.join().unwrap()
    });
    assert_eq!(
        team.run.code, 1,
        "a refused apply fails the run: {}",
        team.run.stderr
    );
    assert_eq!(team.record()["status"], "completed");
    let stderr = &team.run.stderr;
    assert!(
        stderr.contains("not applied: this path changed in")
            && stderr.contains("f.txt")
            && stderr.contains(&branch(&team)),
        "names the path and the branch:\n{stderr}"
    );
    let command = format!(
        "troupe apply {} --workspace {}",
        run_id(&team),
        ws.display()
    );
    assert!(
        stderr.contains(&command),
        "says how to apply later:\n{stderr}"
    );
    assert_eq!(
        read(&sandbox, "f.txt").unwrap(),
        mine,
        "the user's edit is intact"
    );
    assert_eq!(read(&sandbox, "b.txt"), None, "nothing applied at all");
    assert_eq!(on_branch(&team, "b.txt").unwrap(), "b", "the branch stays");
}

#[test]
fn a_run_that_fails_is_not_applied() {
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &[])])),
        worker_rule("a", worker_writes("a", 0)),
        worker_rule(
            "b",
            vec![
                json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": false, "summary": "gave up"}}]}),
            ],
        ),
        approving_reviewer(),
    ];
    let team = team_run(&sandbox, rules, &["--max-replans", "0"]);
    assert_eq!(team.run.code, 1, "{}", team.run.stderr);
    assert_eq!(team.record()["status"], "failed");
    assert_eq!(on_branch(&team, "a.txt").unwrap(), "a", "a landed");
    assert_eq!(read(&sandbox, "a.txt"), None, "but is not applied");
    let command = format!(
        "troupe apply {} --workspace {}",
        run_id(&team),
        sandbox.ws().display()
    );
    assert!(
        team.run.stderr.contains(&format!(
            "not applied, the run did not complete; what landed is branch {}: {command}",
            branch(&team)
        )),
        "{}",
        team.run.stderr
    );
}

// A file name that is not UTF-8 lands under its own bytes, however its
// change lands: the first fast-forwards, and the others are merged by git,
// since troupe's records of a change hold its paths as text and would lay
// such a name on the head changed.
#[test]
fn names_that_are_not_utf8_land_as_they_are() {
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let ids: Vec<String> = (0..4).map(|n| format!("q{n}")).collect();
    let mut rules = vec![planner(json!(
        ids.iter().map(|id| step(id, &[])).collect::<Vec<_>>()
    ))];
    rules.extend(ids.iter().map(|id| {
        let command = format!("printf {id} > \"$(printf '{id}-\\377.txt')\"");
        worker_rule(id, runs(&command, 0))
    }));
    rules.push(approving_reviewer());
    let extra = [
        "--max-replans",
        "0",
        "--no-apply",
        "--isolation",
        "worktree",
    ];
    let team = finish_team_run(&sandbox, team_command(&sandbox, rules, &extra));
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let listed = std::process::Command::new("git")
        .args(["ls-tree", "-z", "--name-only", &branch(&team)])
        .current_dir(sandbox.ws())
        .output()
        .unwrap();
    assert!(listed.status.success(), "{listed:?}");
    let names: Vec<&[u8]> = listed.stdout.split(|b| *b == 0).collect();
    for id in &ids {
        let name = [id.as_bytes(), b"-\xff.txt"].concat();
        assert!(
            names.contains(&name.as_slice()),
            "{id}'s file is not on the branch under its own name: {:?}",
            String::from_utf8_lossy(&listed.stdout)
        );
    }
}

// Approvals that arrive while the branch is busy land together, one move
// of the branch for all of them (how many wait for it is the machine's
// timing): each step still gets a commit of its own on the branch and an
// intent the branch holds, and the branch's moves name every step once.
// Changes that touch nothing else landed are laid on the head as they
// are, written together by troupe, with no merge-tree.
#[test]
fn parallel_approvals_each_land_once_with_an_intent_the_branch_holds() {
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let ids: Vec<String> = (0..8).map(|n| format!("p{n}")).collect();
    let mut rules = vec![planner(json!(
        ids.iter().map(|id| step(id, &[])).collect::<Vec<_>>()
    ))];
    rules.extend(ids.iter().map(|id| worker_rule(id, worker_writes(id, 0))));
    rules.push(approving_reviewer());
    let extra = [
        "--max-replans",
        "0",
        "--no-apply",
        "--isolation",
        "worktree",
    ];
    // Written where git may write: troupe confines each git it runs.
    let merges = sandbox.ws().join(".git/merge-tree.log");
    let counted =
        "case \"$*\" in *merge-tree*) echo merge-tree >> \"$GIT_DIR/merge-tree.log\";; esac\n";
    let mut command = team_command(&sandbox, rules, &extra);
    command.env("PATH", path_before(&git_wrapped(&sandbox, counted, "")));
    let team = finish_team_run(&sandbox, command);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    assert!(
        !merges.exists(),
        "changes of new files beside each other land without merge-tree"
    );
    let ws = sandbox.ws();
    let branch = branch(&team);
    let snapshot = team.record()["isolation"]["snapshot"]
        .as_str()
        .unwrap()
        .to_string();
    let run = crate::faults::first_run(&sandbox).expect("the run directory");
    for id in &ids {
        assert_eq!(
            on_branch(&team, &format!("{id}.txt")).as_deref(),
            Some(id.as_str())
        );
        let intent: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(run.join(format!("{id}/landing-1.json")))
                .unwrap_or_else(|e| panic!("{id}'s landing intent: {e}")),
        )
        .unwrap();
        let to = intent["to"].as_str().unwrap();
        let held = std::process::Command::new("git")
            .args(["merge-base", "--is-ancestor", to, &branch])
            .current_dir(&ws)
            .status()
            .unwrap();
        assert!(held.success(), "{id}'s landing {to} is not on the branch");
    }
    let range = format!("{snapshot}..{branch}");
    let count = git(&ws, &["rev-list", "--first-parent", "--count", &range]);
    assert_eq!(count.trim(), "8", "one commit on the branch per step");
    let moves = git(&ws, &["reflog", "show", "--format=%gs", &branch]);
    let landings: Vec<&str> = moves
        .lines()
        .filter(|l| l.contains("troupe: land"))
        .collect();
    for id in &ids {
        let named = landings
            .iter()
            .filter(|l| l.contains(&format!(" {id}, attempt 1")))
            .count();
        assert_eq!(named, 1, "{id} in the branch's moves:\n{moves}");
    }
    assert!(landings.len() <= ids.len(), "{moves}");
    // Each commit on the branch is the one before it with its step's file
    // added: a merge of the step's change, or the change itself.
    let mut landed_files = Vec::new();
    let mut heads = vec![snapshot.clone()];
    let along = git(&ws, &["rev-list", "--first-parent", "--reverse", &range]);
    for commit in along.lines() {
        let parents = git(&ws, &["rev-list", "--parents", "-n", "1", commit]);
        let parents: Vec<&str> = parents.split_whitespace().skip(1).collect();
        let changed = git(
            &ws,
            &["diff-tree", "-r", "--name-status", parents[0], commit],
        );
        let file = changed
            .trim()
            .strip_prefix("A\t")
            .unwrap_or_else(|| panic!("{commit} adds one file to the commit before it: {changed}"));
        landed_files.push(file.to_string());
        if let [_, change] = parents[..] {
            let id = file.trim_end_matches(".txt");
            let message = git(&ws, &["log", "-1", "--format=%s", commit]);
            assert_eq!(message.trim(), format!("troupe: land {id}, attempt 1"));
            let made_on = git(&ws, &["rev-parse", &format!("{change}^")]);
            assert!(
                heads.iter().any(|h| h == made_on.trim()),
                "{id}'s change is on a head the branch had"
            );
            let own = git(
                &ws,
                &["diff-tree", "-r", "--name-only", "--no-commit-id", change],
            );
            assert_eq!(own.trim(), file, "{id}'s change is its file");
        }
        heads.push(commit.to_string());
    }
    landed_files.sort();
    let mut expected: Vec<String> = ids.iter().map(|id| format!("{id}.txt")).collect();
    expected.sort();
    assert_eq!(landed_files, expected);
    git(&ws, &["fsck", "--no-dangling", "--no-progress"]);
}
