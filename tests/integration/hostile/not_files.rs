//! Attack 5, files that are not files: FIFOs and devices where troupe or a
//! tool expects a file, links swapped in while a file is opened, and hard
//! links to files outside.

use std::time::Duration;

use nix::sys::stat::Mode;

use crate::common::{Sandbox, cli};
use crate::team::{approving_reviewer, planner, step, team_run, worker_rule, worker_writes};

// Regression: `troupe report` and `show` blocked forever on a FIFO planted
// as a transcript, and ate memory on a link to /dev/zero.
#[test]
fn show_and_report_refuse_fifos_and_links_planted_as_records() {
    let sandbox = Sandbox::new();
    let rules = vec![
        planner(serde_json::json!([step("a", &[])])),
        worker_rule("a", worker_writes("a", 0)),
        approving_reviewer(),
    ];
    let team = team_run(&sandbox, rules, &[]);
    assert_eq!(team.run.code, 0, "stderr:\n{}", team.run.stderr);
    let worker = team.dir.join("a/worker-1/.subagent/conversations.json");
    let review = team.dir.join("a/review-1/.subagent/conversations.json");
    std::fs::remove_file(&worker).unwrap();
    nix::unistd::mkfifo(&worker, Mode::from_bits_truncate(0o666)).unwrap();
    std::fs::remove_file(&review).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &review).unwrap();
    let run_id = team.dir.file_name().unwrap().to_str().unwrap().to_string();

    let page = sandbox.root().join("report.html");
    let report = cli(&sandbox, &["report", &run_id, "-o", page.to_str().unwrap()]);
    assert_eq!(report.code, 0, "{}", report.stderr);
    assert!(
        report.elapsed < Duration::from_secs(30),
        "{:?}",
        report.elapsed
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("it is a FIFO, not a regular file"), "{html}");
    assert!(html.contains("symbolic link"), "{html}");

    for planted in ["a/worker-1", "a/review-1"] {
        let shown = cli(&sandbox, &["show", &format!("{run_id}/{planted}")]);
        assert_eq!(shown.code, 2, "{}", shown.stderr);
        assert!(shown.elapsed < Duration::from_secs(30));
    }
    let summary = cli(&sandbox, &["show", &run_id]);
    assert_eq!(
        summary.code, 0,
        "the run itself still shows: {}",
        summary.stderr
    );
    std::fs::remove_file(team.dir.join("run.json")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", team.dir.join("run.json")).unwrap();
    let refused = cli(&sandbox, &["show", &run_id, "--json"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
}

fn call(name: &str, arguments: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"name": name, "arguments": arguments})
}

/// One turn of `calls`, then finish_task; the tool results' text.
fn calls_then_finish(sandbox: &Sandbox, calls: Vec<serde_json::Value>) -> Vec<String> {
    let model = sandbox.script(serde_json::json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": calls},
        {"tool_calls": [call("finish_task", serde_json::json!({"success": true, "summary": "done"}))]}
    ]}]}));
    let out = crate::common::spawn(sandbox, 1, "read odd files", &model, &[]);
    assert_eq!(out.code, 0, "the agent went on to finish: {}", out.stderr);
    super::outputs(&sandbox.transcript(1))
}

// Regression: read_file of a FIFO blocked the agent, and of a device grew
// it to gigabytes; write_file and edit_file changed an outside file through
// a hard link that was in the workspace before the run.
#[test]
fn file_tools_take_regular_files_with_one_name_only() {
    let sandbox = Sandbox::new();
    let ws = sandbox.ws();
    std::fs::create_dir_all(&ws).unwrap();
    nix::unistd::mkfifo(&ws.join("pipe"), Mode::from_bits_truncate(0o666)).unwrap();
    std::os::unix::fs::symlink("/dev/zero", ws.join("zeros")).unwrap();
    let outside = super::outside(&sandbox);
    std::fs::hard_link(outside.join("keep.txt"), ws.join("linked.txt")).unwrap();
    let device = super::is_root()
        && nix::sys::stat::mknod(
            &ws.join("zero-device"),
            nix::sys::stat::SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(1, 5),
        )
        .is_ok();
    let mut calls = vec![
        call("read_file", serde_json::json!({"path": "pipe"})),
        call("search_workspace", serde_json::json!({"pattern": "x"})),
        call("read_file", serde_json::json!({"path": "zeros"})),
        call(
            "write_file",
            serde_json::json!({"path": "pipe", "content": "x"}),
        ),
        call(
            "write_file",
            serde_json::json!({"path": "linked.txt", "content": "changed\n"}),
        ),
        call(
            "edit_file",
            serde_json::json!({"path": "linked.txt", "old_text": "untouched", "new_text": "changed"}),
        ),
    ];
    if device {
        calls.push(call(
            "read_file",
            serde_json::json!({"path": "zero-device"}),
        ));
    }
    let out = calls_then_finish(&sandbox, calls);
    assert!(
        out[0].contains("it is a FIFO, not a regular file"),
        "{}",
        out[0]
    );
    assert!(
        out[1].contains("no matches"),
        "the search skips the FIFO: {}",
        out[1]
    );
    assert!(out[2].contains("symlink to /dev/zero"), "{}", out[2]);
    assert!(
        out[3].contains("it is a FIFO, not a regular file"),
        "{}",
        out[3]
    );
    for hard_link in &out[4..6] {
        assert!(hard_link.contains("it has 2 hard links"), "{hard_link}");
    }
    if device {
        assert!(out[6].contains("it is a character device"), "{}", out[6]);
    } else {
        eprintln!(
            "the device part of file_tools_take_regular_files_with_one_name_only needs root: skipped"
        );
    }
    super::assert_untouched(&outside);
}

// Regression: a symlink swapped in between the fence's check and the open
// let read_file return an outside file (18 of 192 tries).
#[test]
fn a_link_swapped_in_while_a_file_is_opened_is_never_followed() {
    const TRIES: usize = 300;
    let sandbox = Sandbox::new();
    let ws = sandbox.ws();
    std::fs::create_dir_all(&ws).unwrap();
    let secret = sandbox.root().join("secret.txt");
    std::fs::write(&secret, "SECRET-OUTSIDE").unwrap();
    std::fs::write(ws.join("target.txt"), "inside").unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (ws, secret, done) = (ws.clone(), secret.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::fs::remove_file(ws.join(".swap-link"));
                std::os::unix::fs::symlink(&secret, ws.join(".swap-link")).unwrap();
                std::fs::rename(ws.join(".swap-link"), ws.join("target.txt")).unwrap();
                std::fs::write(ws.join(".swap-file"), "inside").unwrap();
                std::fs::rename(ws.join(".swap-file"), ws.join("target.txt")).unwrap();
            }
        })
    };
    // Each call differs a little, so that they are not stagnation.
    let calls = (0..TRIES)
        .map(|i| {
            call(
                "read_file",
                serde_json::json!({"path": "target.txt", "limit": 100 + i}),
            )
        })
        .collect();
    let out = calls_then_finish(&sandbox, calls);
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
    assert_eq!(out.len(), TRIES + 1);
    assert!(
        out.iter().all(|o| !o.contains("SECRET-OUTSIDE")),
        "an outside file was read: {:?}",
        out.iter().find(|o| o.contains("SECRET"))
    );
    let read_inside = out.iter().filter(|o| o.contains(" inside")).count();
    eprintln!("{read_inside} of {TRIES} reads saw the file, the rest a link and were refused");
}
