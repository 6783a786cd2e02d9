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
