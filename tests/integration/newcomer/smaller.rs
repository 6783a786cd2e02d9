//! Issue 23, item 11: the smaller things a newcomer tripped on.

use serde_json::json;

use crate::common::{Sandbox, run, troupe};
use crate::team::{approving_reviewer, planner, step, worker_rule, worker_writes};

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
