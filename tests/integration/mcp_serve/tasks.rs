//! MCP tasks, with rmcp's own client as the host (the Python SDK has no
//! tasks, and the TypeScript one speaks the 2025-11-25 form rmcp does not
//! serve): a create run as a task is polled to its result, and another is
//! cancelled, its partial results kept.

use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig,
    GetTaskParams, Implementation, TaskPayload, TaskStatus,
};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

use super::{agents_script, serve_command};
use crate::common::{HANG_BOUND, Sandbox};

fn arguments(value: Value) -> CallToolRequestParams {
    let mut call = CallToolRequestParams::new("create_sub_agent");
    if let Value::Object(map) = value {
        call.arguments = Some(map);
    }
    call
}

#[test]
fn a_host_with_tasks_polls_a_create_to_its_result_and_cancels_another() {
    let sandbox = Sandbox::new();
    let model = agents_script(&sandbox, &[1], &[2]);
    let server = serve_command(&sandbox, &model, &["--kill-grace", "2"]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut command = tokio::process::Command::new(&server[0]);
        command
            .args(&server[1..])
            .env("NO_COLOR", "1")
            .env("TROUPE_CONFIG", "");
        let (transport, _) = TokioChildProcess::builder(command)
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let host = ClientConfig::new(
            ClientCapabilities::builder().enable_tasks().build(),
            Implementation::new("troupe-test-host", "1.0.0"),
        )
        .serve(transport)
        .await
        .unwrap();

        let created = host
            .peer()
            .call_tool_once(arguments(
                json!({"agent_id": 1, "summary": "as a task", "task": "write a file"}),
            ))
            .await
            .unwrap();
        let CallToolResponse::Task(created) = created else {
            panic!("a create of a host with tasks is a task: {created:?}");
        };
        let started = Instant::now();
        let result = loop {
            let got = host
                .peer()
                .get_task(GetTaskParams::new(created.task.task_id.clone()))
                .await
                .unwrap();
            match got.task.payload {
                TaskPayload::Completed { result } => break result,
                TaskPayload::Working => {}
                other => panic!("task 1 ended {other:?}"),
            }
            assert!(started.elapsed() < HANG_BOUND, "task 1 did not end");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let structured = &result["structuredContent"];
        assert_eq!(structured["status"], "completed", "{result:?}");
        assert_eq!(structured["deliverables_files"], json!(["greeting-1.txt"]));

        let long = host
            .peer()
            .call_tool_once(arguments(
                json!({"agent_id": 2, "summary": "cancelled task", "task": "think"}),
            ))
            .await
            .unwrap();
        let CallToolResponse::Task(long) = long else {
            panic!("{long:?}");
        };
        let id = long.task.task_id.clone();
        // The status message is the agent's last line: once it wrote its
        // file, the host cancels.
        loop {
            let got = host
                .peer()
                .get_task(GetTaskParams::new(id.clone()))
                .await
                .unwrap();
            let said = got.task.task.status_message.unwrap_or_default();
            if said.starts_with("write_file") {
                break;
            }
            assert!(
                started.elapsed() < HANG_BOUND,
                "task 2 never wrote its file: {said}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        host.peer()
            .cancel_task(CancelTaskParams::new(id.clone()))
            .await
            .unwrap();
        loop {
            let got = host
                .peer()
                .get_task(GetTaskParams::new(id.clone()))
                .await
                .unwrap();
            if got.task.task.status == TaskStatus::Cancelled {
                break;
            }
            assert!(started.elapsed() < HANG_BOUND, "task 2 was not cancelled");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = host.cancel().await;
    });
    assert_eq!(super::ended(&sandbox, 2)["status"], "terminated");
    assert_eq!(
        std::fs::read_to_string(sandbox.agent_dir(2).join("part.txt")).unwrap(),
        "half done"
    );
    assert_eq!(sandbox.transcript(2)["status"], "terminated");
}
