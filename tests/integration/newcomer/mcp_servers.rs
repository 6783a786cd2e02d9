//! Item 10: MCP servers start where users install them, and `troupe mcp
//! list` lists a server only if an agent can start it. Against the real
//! servers `.ci/mcp-up` installs under root's `~/.cache`, a home directory
//! the agents' default read scope closes.

use serde_json::{Value, json};

use crate::common::{Sandbox, run, spawn_command, troupe};

/// Agent 1, a worker with the MCP server `server`, that asks it the time
/// once and finishes: its run (which must exit 0), and the tool's result.
fn ask_the_time(sandbox: &Sandbox, server: &str) -> (crate::common::Run, Value) {
    let model = asking_the_time(sandbox);
    let mut command = spawn_command(sandbox, 1, "ask the time", &model);
    command.args(["--mcp", server]);
    let out = run(command);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let result = first_tool_result(sandbox);
    (out, result)
}

/// A worker that calls the time server's `get_current_time` once, then
/// finishes.
fn asking_the_time(sandbox: &Sandbox) -> String {
    sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "mcp__time__get_current_time", "arguments": {"timezone": "UTC"}}]},
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "asked the time"}}]}
    ]}]}))
}

/// The first tool result the agent got.
fn first_tool_result(sandbox: &Sandbox) -> Value {
    let transcript = sandbox.transcript(1);
    let message = transcript["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .cloned()
        .unwrap();
    serde_json::from_str(message["content"].as_str().unwrap()).unwrap()
}

#[test]
fn a_server_installed_in_a_home_directory_starts_with_no_allow_read() {
    let Some((bin, _)) = crate::mcp::servers("mcp under a home directory") else {
        return;
    };
    let home = ["/root", "/home"].iter().any(|h| bin.starts_with(h));
    assert!(
        home || std::env::var("CI").is_err(),
        "under CI the servers are installed in a home directory: {}",
        bin.display()
    );
    let sandbox = Sandbox::new();
    let server = format!("time={}", bin.join("mcp-server-time").display());
    let (out, result) = ask_the_time(&sandbox, &server);
    assert_eq!(result["success"], true, "{result}");
    assert!(
        result["content"].as_str().unwrap().contains("UTC"),
        "{result}"
    );
    assert!(out.json()["stats"].get("mcp_unstarted").is_none());
    // Readable to it because the task file says so: the program's prefix.
    let task = std::fs::read_to_string(sandbox.agent_dir(1).join(".subagent/task.json")).unwrap();
    let task: Value = serde_json::from_str(&task).unwrap();
    let prefix = bin.parent().unwrap().display().to_string();
    assert!(
        task["sandbox"]["allow_read"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p == &json!(prefix)),
        "{}",
        task["sandbox"]
    );
}

#[test]
fn a_server_the_sandbox_stops_is_unlisted_and_named_in_the_models_tool_error() {
    let Some((bin, _)) = crate::mcp::servers("mcp list under the sandbox") else {
        return;
    };
    let sandbox = Sandbox::new();
    // A wrapper troupe can see, around a program it cannot tell from the
    // command line: outside a sandbox it starts, inside it does not.
    let tools = sandbox.root().join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    let wrapper = tools.join("time.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec {} \"$@\"\n",
            bin.join("mcp-server-time").display()
        ),
    )
    .unwrap();
    let server = format!("time=/bin/sh {}", wrapper.display());

    let mut command = troupe();
    command.args(["mcp", "list", "--mcp", &server]);
    let listed = run(command);
    assert_eq!(listed.code, 1, "{}\n{}", listed.stdout, listed.stderr);
    assert!(
        listed
            .stdout
            .contains("time: the MCP server `time` did not start"),
        "{}",
        listed.stdout
    );
    assert!(listed.stdout.contains("it said:"), "{}", listed.stdout);
    assert!(!listed.stdout.contains("mcp__time__"), "{}", listed.stdout);

    // Unconfined, as --sandbox off runs its agents, it starts.
    let mut command = troupe();
    command.args(["mcp", "list", "--sandbox", "off", "--mcp", &server]);
    let unconfined = run(command);
    assert_eq!(unconfined.code, 0, "{}", unconfined.stdout);
    assert!(
        unconfined.stdout.contains("mcp__time__get_current_time"),
        "{}",
        unconfined.stdout
    );

    let (out, result) = ask_the_time(&sandbox, &server);
    assert_eq!(result["success"], false, "{result}");
    let said = result["content"].as_str().unwrap_or_default().to_string()
        + result["error"].as_str().unwrap_or_default();
    assert!(
        said.contains("the MCP server `time`, which did not start") && said.contains("it said:"),
        "{result}"
    );
    let unstarted = &out.json()["stats"]["mcp_unstarted"];
    assert_eq!(unstarted[0]["server"], "time", "{unstarted}");
}
