//! `--durability`: the same agent flushes to the disk at its commit points
//! only, or after every write with `strict`, counted with strace.

use std::process::Command;

use serde_json::json;

use crate::common::{Sandbox, present, spawn_command};

/// fsync and fdatasync calls of one `troupe spawn` (both processes) of a
/// four-turn agent that completed.
fn flushes(durability: &str) -> usize {
    let sandbox = Sandbox::new();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "a.txt", "content": "1"}}]},
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "b.txt", "content": "2"}}]},
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "c.txt", "content": "3"}}]},
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "done"}}]}
    ]}]}));
    let trace = sandbox.ws().with_file_name("strace.txt");
    let mut spawn = spawn_command(&sandbox, 1, "write three files", &model);
    spawn.args(["--durability", durability]);
    let status = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=fsync,fdatasync", "-o"])
        .arg(&trace)
        .arg(spawn.get_program())
        .args(spawn.get_args())
        .envs(spawn.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .output()
        .expect("strace is installed (.ci/run installs it)");
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let written = std::fs::read_to_string(sandbox.ws().join("c.txt")).unwrap();
    assert_eq!(written, "3");
    std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .filter(|l| l.contains("fsync(") || l.contains("fdatasync("))
        .count()
}

#[test]
fn strict_flushes_every_write_and_commit_only_its_commit_points() {
    let traced = Command::new("strace").arg("-V").output().is_ok();
    if !present("durability", "strace", traced) {
        return;
    }
    let commit = flushes("commit");
    let strict = flushes("strict");
    assert!(commit > 0, "the commit points are flushed");
    assert!(
        strict > commit,
        "strict flushes more: {strict} against {commit}"
    );
}

/// fsync-family calls made by the git processes of an isolated team run
/// of one step, how many git processes ran, and troupe's flushes of the
/// file system (`syncfs`).
fn git_flushes() -> (usize, usize, usize) {
    let sandbox = Sandbox::new();
    crate::isolation::repository(&sandbox);
    let rules = vec![
        crate::team::planner(json!([crate::team::step("a", &[])])),
        crate::team::worker_rule("a", crate::team::worker_writes("a", 0)),
        crate::team::approving_reviewer(),
    ];
    let run = crate::team::team_command(&sandbox, rules, &["--isolation", "worktree"]);
    let trace = sandbox.ws().with_file_name("strace.txt");
    let out = Command::new("strace")
        .args([
            "-f",
            "-qq",
            "-e",
            "trace=execve,fsync,fdatasync,syncfs",
            "-o",
        ])
        .arg(&trace)
        .arg(run.get_program())
        .args(run.get_args())
        .envs(run.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .output()
        .expect("strace is installed (.ci/run installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&trace).unwrap();
    let pid = |line: &str| line.split_whitespace().next().map(str::to_string);
    let gits: std::collections::HashSet<String> = text
        .lines()
        .filter(|l| l.contains("execve(\"") && l.contains("/git\"") && !l.contains("= -1"))
        .filter_map(pid)
        .collect();
    let flushes = text
        .lines()
        .filter(|l| l.contains("fsync(") || l.contains("fdatasync("))
        .filter(|l| pid(l).is_some_and(|p| gits.contains(&p)))
        .count();
    let syncfs = text.lines().filter(|l| l.contains("syncfs(")).count();
    (flushes, gits.len(), syncfs)
}

#[test]
fn git_flushes_what_a_landing_writes() {
    let traced = Command::new("strace").arg("-V").output().is_ok();
    if !present("durability", "strace", traced) {
        return;
    }
    let (flushes, gits, syncfs) = git_flushes();
    assert!(gits > 5, "the run's git calls were traced: {gits}");
    assert!(
        flushes > 0,
        "git flushed the refs it moved: {flushes} in {gits} calls"
    );
    assert!(syncfs > 0, "troupe flushed the objects before the landing");
}

#[test]
fn a_new_directory_is_flushed_into_its_parent() {
    let traced = Command::new("strace").arg("-V").output().is_ok();
    if !present("durability", "strace", traced) {
        return;
    }
    let sandbox = Sandbox::new();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "done"}}]}
    ]}]}));
    let trace = sandbox.ws().with_file_name("strace.txt");
    let spawn = spawn_command(&sandbox, 1, "nothing", &model);
    let out = Command::new("strace")
        .args(["-f", "-qq", "-y", "-e", "trace=fsync", "-o"])
        .arg(&trace)
        .arg(spawn.get_program())
        .args(spawn.get_args())
        .envs(spawn.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .output()
        .expect("strace is installed (.ci/run installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results = sandbox.ws().join("sub_agent_results");
    let results = results.canonicalize().unwrap();
    let text = std::fs::read_to_string(&trace).unwrap();
    let parent = format!("<{}>)", results.display());
    assert!(
        text.lines()
            .any(|l| l.contains("fsync(") && l.contains(&parent)),
        "the results directory is flushed once agent_1 is made in it:\n{text}"
    );
}
