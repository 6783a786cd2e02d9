//! Prompts a provider's cache can serve (issue 46, item 4): every agent of
//! a role begins its requests with the same tools and the same system
//! prompt, and what differs per agent (its workspace, the time) comes
//! after them, in its first user message.

use std::time::Duration;

use serde_json::Value;

use crate::common::rate_limited::RateLimited;
use crate::common::{Sandbox, run, troupe};

#[test]
fn every_agent_of_a_role_opens_with_the_same_tools_and_system_prompt() {
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let plan = sandbox.root().join("plan.json");
    std::fs::write(&plan, crate::rate::fan_out(4).to_string()).unwrap();
    let endpoint = RateLimited::start(1000, Duration::ZERO);
    let mut command = troupe();
    command
        .args(["run", "--plan"])
        .arg(&plan)
        .arg("--workspace")
        .arg(sandbox.ws())
        .args(["--model", "test-model", "--base-url", &endpoint.url])
        .args(["--api-key-env", "TEST_KEY_VAR", "--max-parallel", "4"])
        .args(["--isolation", "worktree"]);
    let run = run(command);
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    let requests = endpoint.requests();
    let worker = |r: &&Value| {
        r["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["function"]["name"] == "finish_task"))
    };
    let first: Vec<&Value> = requests
        .iter()
        .filter(|r| r["messages"].as_array().is_some_and(|m| m.len() == 2))
        .collect();
    let (workers, reviewers): (Vec<&Value>, Vec<&Value>) = first.into_iter().partition(worker);
    assert_eq!((workers.len(), reviewers.len()), (4, 4), "{requests:?}");
    for role in [&workers, &reviewers] {
        let opening = |r: &Value| (r["tools"].clone(), r["messages"][0].clone());
        let shared = opening(role[0]);
        for request in role.iter() {
            assert_eq!(opening(request), shared, "the same tools and system prompt");
        }
        let system = shared.1["content"].as_str().unwrap();
        assert!(
            !system.contains(&*sandbox.ws().to_string_lossy()) && !system.contains("Current time"),
            "nothing of one agent in the system prompt: {system}"
        );
        for request in role.iter() {
            let task = request["messages"][1]["content"].as_str().unwrap();
            assert!(
                task.contains("Workspace: /") && task.contains("Current time: "),
                "the agent's own workspace and time follow, in its task: {task}"
            );
        }
    }
}
