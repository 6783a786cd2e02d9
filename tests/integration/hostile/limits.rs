//! Attack 6, limits that killed the wrong process: `--max-file-size` hits
//! the commands an agent runs; the agent's own writes keep to it and say
//! so.

use std::path::Path;

use serde_json::json;

use super::outputs;
use crate::common::{Sandbox, spawn};

/// Files whose name starts with `.tmp-` anywhere under `dir`.
fn temporaries(dir: &Path) -> Vec<std::path::PathBuf> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp-"))
        .map(|e| e.into_path())
        .collect()
}

// Regression: with --max-file-size 200000, a 300 KB write_file (or 300 KB
// of tool output spilled to the agent's directory) killed the agent with
// SIGXFSZ and left a 10 MB .tmp-* file.
#[test]
fn the_file_size_limit_stops_commands_and_refuses_tool_writes() {
    let sandbox = Sandbox::new();
    let big = "x".repeat(300_000);
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [
            {"name": "write_file", "arguments": {"path": "big.txt", "content": big}},
            {"name": "write_file", "arguments": {"path": "small.txt", "content": "x".repeat(1000)}},
            {"name": "edit_file", "arguments": {"path": "small.txt", "old_text": "x".repeat(1000), "new_text": big}},
            {"name": "run_command", "arguments": {"command": "head -c 300000 /dev/zero | tr '\\0' y"}},
            {"name": "run_command", "arguments": {"command": "head -c 300000 /dev/zero > command.bin"}}
        ]},
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "tried"}}]}
    ]}]}));
    let run = spawn(
        &sandbox,
        1,
        "write big files",
        &model,
        &["--max-file-size", "200000"],
    );
    assert_eq!(run.code, 0, "the agent lived to finish: {}", run.stderr);
    let out = outputs(&sandbox.transcript(1));
    assert!(
        out[0].contains("would be 300000 bytes, more than the 200000"),
        "{}",
        out[0]
    );
    assert!(!sandbox.ws().join("big.txt").exists());
    assert!(out[2].contains("would be 300000 bytes"), "{}", out[2]);
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("small.txt"))
            .unwrap()
            .len(),
        1000
    );
    assert!(
        out[3].contains("its first 200000 bytes (--max-file-size) are in"),
        "{}",
        out[3]
    );
    let spilled = sandbox.agent_dir(1).join(".subagent/outputs/call_4.txt");
    assert_eq!(std::fs::metadata(&spilled).unwrap().len(), 200_000);
    assert!(
        out[4].contains("File size limit exceeded"),
        "the command was stopped: {}",
        out[4]
    );
    assert!(
        std::fs::metadata(sandbox.ws().join("command.bin"))
            .unwrap()
            .len()
            <= 200_000
    );
    assert_eq!(
        temporaries(sandbox.root()),
        Vec::<std::path::PathBuf>::new()
    );
}
