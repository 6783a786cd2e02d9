//! The TypeScript SDK as the host: the same answers as to the Python one.

use serde_json::json;

use super::{Sdk, Transport, agents_script, host, play, serve_command};
use crate::common::Sandbox;

fn listing(transport: Transport) {
    let Some(node) = host("node listing", Sdk::Node) else {
        return;
    };
    let sandbox = Sandbox::new();
    let model = agents_script(&sandbox, &[], &[]);
    let report = play(
        node,
        "listing",
        transport,
        &serve_command(&sandbox, &model, &[]),
    );
    let names: Vec<&str> = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "create_sub_agent",
            "get_sub_agent_status",
            "wait_sub_agents",
            "terminate_sub_agent",
            "run_team",
            "get_run_status"
        ]
    );
    for tool in report["tools"].as_array().unwrap() {
        assert_eq!(tool["input_schema"]["type"], "object", "{tool}");
    }
}

#[test]
fn a_typescript_host_lists_the_tools_over_stdio() {
    listing(Transport::Stdio);
}

#[test]
fn a_typescript_host_lists_the_tools_over_http() {
    listing(Transport::Http);
}

fn blocking(transport: Transport) {
    let Some(node) = host("node blocking", Sdk::Node) else {
        return;
    };
    let sandbox = Sandbox::new();
    let model = agents_script(&sandbox, &[1], &[]);
    let report = play(
        node,
        "blocking",
        transport,
        &serve_command(&sandbox, &model, &[]),
    );
    let result = &report["created"]["structured"];
    assert_eq!(result["status"], "completed", "{report}");
    assert_eq!(result["deliverables_files"], json!(["greeting-1.txt"]));
    let progress = report["progress"].as_array().unwrap();
    assert!(
        progress
            .iter()
            .any(|p| p["message"].as_str().unwrap_or_default().contains("turn")),
        "{progress:?}"
    );
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("greeting-1.txt")).unwrap(),
        "hello"
    );
}

#[test]
fn a_typescript_host_creates_a_blocking_agent_with_progress_over_stdio() {
    blocking(Transport::Stdio);
}

#[test]
fn a_typescript_host_creates_a_blocking_agent_with_progress_over_http() {
    blocking(Transport::Http);
}

fn background(transport: Transport) {
    let Some(node) = host("node background", Sdk::Node) else {
        return;
    };
    let sandbox = Sandbox::new();
    let model = agents_script(&sandbox, &[1, 2, 3], &[]);
    let report = play(
        node,
        "background",
        transport,
        &serve_command(&sandbox, &model, &[]),
    );
    let mut returned: Vec<u64> = report["waits"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|w| w["structured"]["ended"].as_array().unwrap().clone())
        .map(|r| r["agent_id"].as_u64().unwrap())
        .collect();
    returned.sort();
    assert_eq!(returned, [1, 2, 3], "{report}");
}

#[test]
fn a_typescript_host_waits_for_background_agents_over_stdio() {
    background(Transport::Stdio);
}

#[test]
fn a_typescript_host_waits_for_background_agents_over_http() {
    background(Transport::Http);
}

fn notices(transport: Transport) {
    let Some(node) = host("node notices", Sdk::Node) else {
        return;
    };
    let sandbox = Sandbox::new();
    let model = agents_script(&sandbox, &[1], &[]);
    let report = play(
        node,
        "notices",
        transport,
        &serve_command(&sandbox, &model, &[]),
    );
    let logs = report["logs"].as_array().unwrap();
    assert_eq!(logs.len(), 1, "{report}");
    assert!(
        logs[0]
            .as_str()
            .unwrap()
            .contains("Sub-agent 1 (noticed later) ended: completed.")
    );
    let carried = report["later"]["structured"]["notices"].as_array().unwrap();
    assert_eq!(carried[0]["text"], logs[0]);
}

#[test]
fn a_typescript_host_hears_of_a_background_agents_end_over_stdio() {
    notices(Transport::Stdio);
}

#[test]
fn a_typescript_host_hears_of_a_background_agents_end_over_http() {
    notices(Transport::Http);
}

#[test]
fn a_typescript_host_terminates_a_long_agent_and_its_partial_files_stay() {
    let Some(node) = host("node terminate", Sdk::Node) else {
        return;
    };
    let sandbox = Sandbox::new();
    let model = agents_script(&sandbox, &[], &[1]);
    let report = play(
        node,
        "terminate",
        Transport::Stdio,
        &serve_command(&sandbox, &model, &["--kill-grace", "2"]),
    );
    assert_eq!(
        report["stopped"]["structured"]["status"], "terminated",
        "{report}"
    );
    assert_eq!(report["stopped"]["structured"]["partial_results"], true);
    assert_eq!(
        std::fs::read_to_string(sandbox.agent_dir(1).join("part.txt")).unwrap(),
        "half done"
    );
}

#[test]
fn a_typescript_hosts_abort_terminates_its_blocking_agent() {
    let Some(node) = host("node cancel", Sdk::Node) else {
        return;
    };
    let sandbox = Sandbox::new();
    let model = agents_script(&sandbox, &[], &[1]);
    let report = play(
        node,
        "cancel",
        Transport::Http,
        &serve_command(&sandbox, &model, &["--kill-grace", "2"]),
    );
    assert_eq!(report["final"]["status"], "terminated", "{report}");
    assert_eq!(report["still_answers"], true);
    assert_eq!(sandbox.transcript(1)["status"], "terminated");
}
