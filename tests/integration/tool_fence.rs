//! Paths that lead out of the workspace are refused with a reason, and
//! nothing is written outside.

use serde_json::json;

use crate::common::{Sandbox, spawn, tool_results};

#[test]
fn escapes_are_refused_and_nothing_is_written_outside() {
    let sandbox = Sandbox::new();
    let outside = sandbox.root().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    std::os::unix::fs::symlink(&outside, sandbox.ws().join("exit")).unwrap();
    std::os::unix::fs::symlink(
        outside.join("made-by-link.txt"),
        sandbox.ws().join("dangling"),
    )
    .unwrap();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [
            {"name": "write_file", "arguments": {"path": "../outside/dotdot.txt", "content": "x"}},
            {"name": "write_file", "arguments": {"path": "/etc/passwd", "content": "x"}},
            {"name": "write_file", "arguments": {"path": "exit/through-link.txt", "content": "x"}},
            {"name": "write_file", "arguments": {"path": "dangling", "content": "x"}},
            {"name": "read_file", "arguments": {"path": "exit/../../outside"}},
            {"name": "list_dir", "arguments": {"path": "exit"}},
            {"name": "write_file", "arguments": {"path": "sub_agent_results/agent_1/.subagent/conversations.json", "content": "{}"}},
            {"name": "write_file", "arguments": {"path": "inside/ok.txt", "content": "fine"}}
        ]},
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "tried"}}]}
    ]}]}));
    let run = spawn(&sandbox, 1, "try to escape", &model, &[]);
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);

    let results = tool_results(&sandbox.transcript(1));
    let error = |i: usize| results[i]["error"].as_str().unwrap_or_default().to_string();
    assert!(error(0).contains("outside the workspace"), "{}", error(0));
    assert!(error(1).contains("outside the workspace"), "{}", error(1));
    assert!(error(2).contains("symlink"), "{}", error(2));
    assert!(error(3).contains("symlink"), "{}", error(3));
    assert!(error(4).contains("outside the workspace"), "{}", error(4));
    assert!(error(5).contains("symlink"), "{}", error(5));
    assert!(error(6).contains(".subagent"), "{}", error(6));
    for result in &results[..7] {
        assert_eq!(result["success"], false, "{result}");
    }
    assert_eq!(results[7]["success"], true);
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("inside/ok.txt")).unwrap(),
        "fine"
    );
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing was written outside"
    );
    assert_eq!(
        sandbox.transcript(1)["status"],
        "completed",
        "the transcript was not overwritten"
    );
}
