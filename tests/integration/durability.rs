//! `--durability`: the same agent flushes to the disk at its commit points
//! only, or after every write with `strict`, counted with strace.

use std::process::Command;

use serde_json::json;

use crate::common::{Sandbox, present, spawn_command};

/// Whether strace is here; a printed skip outside CI, a failure in it.
fn strace_here() -> bool {
    let traced = Command::new("strace").arg("-V").output().is_ok();
    present("durability", "strace", traced)
}

/// `command` run to its end under `strace -f -qq` with `strace_args`; the
/// trace's text.
fn traced(command: &Command, strace_args: &[&str]) -> String {
    let trace = tempfile::NamedTempFile::new().unwrap();
    let out = Command::new("strace")
        .args(["-f", "-qq"])
        .args(strace_args)
        .arg("-o")
        .arg(trace.path())
        .arg(command.get_program())
        .args(command.get_args())
        .envs(command.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .output()
        .expect("strace is installed (.ci/run installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(trace.path()).unwrap()
}

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
    let mut spawn = spawn_command(&sandbox, 1, "write three files", &model);
    spawn.args(["--durability", durability]);
    let text = traced(&spawn, &["-e", "trace=fsync,fdatasync"]);
    let written = std::fs::read_to_string(sandbox.ws().join("c.txt")).unwrap();
    assert_eq!(written, "3");
    text.lines()
        .filter(|l| l.contains("fsync(") || l.contains("fdatasync("))
        .count()
}

#[test]
fn strict_flushes_every_write_and_commit_only_its_commit_points() {
    if !strace_here() {
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
    let text = traced(&run, &["-e", "trace=execve,fsync,fdatasync,syncfs"]);
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
    if !strace_here() {
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
    if !strace_here() {
        return;
    }
    let sandbox = Sandbox::new();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "done"}}]}
    ]}]}));
    let spawn = spawn_command(&sandbox, 1, "nothing", &model);
    let text = traced(&spawn, &["-y", "-e", "trace=fsync"]);
    let results = sandbox.ws().join("sub_agent_results");
    let results = results.canonicalize().unwrap();
    let parent = format!("<{}>)", results.display());
    assert!(
        text.lines()
            .any(|l| l.contains("fsync(") && l.contains(&parent)),
        "the results directory is flushed once agent_1 is made in it:\n{text}"
    );
}

// Issue 43: on a full disk run.json stayed `running`, every step
// `pending`, though troupe said the end could not be recorded. The run
// keeps space for its end as it starts, and writes its end there. The
// workspace is a 4 MiB tmpfs in a mount namespace of the test's own,
// which a worker fills; the records are read inside it.
#[test]
fn a_run_on_a_full_disk_ends_recorded_as_failed() {
    if !nix::unistd::geteuid().is_root() || !present("full disk", "unshare", true) {
        return;
    }
    let sandbox = Sandbox::new();
    let fs = sandbox.root().join("fs");
    std::fs::create_dir_all(&fs).unwrap();
    let ws = fs.join("ws");
    let rules = vec![
        crate::team::planner(json!([
            crate::team::step("a", &[]),
            crate::team::step("b", &["a"])
        ])),
        crate::team::worker_rule(
            "a",
            crate::hostile::running(&[
                "dd if=/dev/zero of=fill bs=64k count=1000 2>/dev/null; true",
            ]),
        ),
        crate::team::worker_rule("b", crate::team::worker_writes("b", 0)),
        crate::team::approving_reviewer(),
    ];
    let model = sandbox.script(json!({"rules": rules}));
    let troupe = env!("CARGO_BIN_EXE_troupe");
    let script = format!(
        "mount -t tmpfs -o size=4m tmpfs {fs} && mkdir {ws} && {troupe} run goal --model {model} --workspace {ws} --isolation shared --sandbox off --max-replans 0 2>{err}; echo \"exit=$?\"; cat {ws}/sub_agent_results/run_*/run.json {ws}/sub_agent_results/run_*/a/worker-1/.subagent/conversations.json",
        fs = fs.display(),
        ws = ws.display(),
        err = sandbox.root().join("err").display(),
    );
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let said = std::fs::read_to_string(sandbox.root().join("err")).unwrap_or_default();
    assert!(stdout.starts_with("exit=1\n"), "{stdout}\n{said}");
    let mut records = serde_json::Deserializer::from_str(&stdout["exit=1\n".len()..])
        .into_iter::<serde_json::Value>();
    let mut next = |what: &str| {
        records
            .next()
            .unwrap_or_else(|| panic!("no {what}\n{stdout}\n{said}"))
            .unwrap_or_else(|e| panic!("{what}: {e}\n{stdout}\n{said}"))
    };
    let record = next("run.json");
    let transcript = next("the worker's transcript");
    assert_eq!(record["status"], "failed", "{record}");
    assert!(
        record["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("the run's records could not all be written"),
        "{record}"
    );
    assert!(record["completed_at"].is_string(), "{record}");
    assert!(
        said.contains("written in the space troupe kept for it"),
        "{said}"
    );
    // The worker's transcript, which the full disk left a journal saying
    // `running`, is sealed with the end run.json gives it.
    let worker = &record["steps"][0]["attempts"][0]["worker"];
    assert_eq!(transcript["status"], worker["status"], "{transcript}");
    assert_ne!(transcript["status"], "running", "{transcript}");
    assert!(said.contains("1 agent's transcript sealed there"), "{said}");
}
