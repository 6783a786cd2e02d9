//! A host of `troupe mcp serve` for the benchmarks: rmcp's client over
//! the server's stdio, timing `create_sub_agent` round trips against
//! `troupe spawn` of the same agent.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

/// Milliseconds of each `troupe spawn` and each blocking
/// `create_sub_agent`, taken in turn (spawn, create, spawn, ...) so that
/// neither gets the quieter half of the run; `agents` of each. The
/// server is started before the first create, as a host starts it once.
pub fn spawn_against_create(
    troupe: &str,
    ws: &Path,
    model: &str,
    agents: u32,
) -> (Vec<f64>, Vec<f64>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let mut server = tokio::process::Command::new(troupe);
        server
            .args(["mcp", "serve", "--workspace"])
            .arg(ws)
            .args(["--model", model])
            .env("TROUPE_CONFIG", "");
        let (transport, _) = TokioChildProcess::builder(server)
            .stderr(Stdio::null())
            .spawn()
            .expect("troupe mcp serve starts");
        let host = ().serve(transport).await.expect("the server answers initialize");
        let (mut spawned, mut created) = (Vec::new(), Vec::new());
        for n in 0..agents {
            let id = 2 * n + 1;
            let started = Instant::now();
            let out = Command::new(troupe)
                .args([
                    "spawn",
                    "--id",
                    &id.to_string(),
                    "--summary",
                    "bench",
                    "--task",
                    "finish",
                ])
                .arg("--workspace")
                .arg(ws)
                .args(["--model", model])
                .env("TROUPE_CONFIG", "")
                .stderr(Stdio::null())
                .output()
                .expect("troupe spawn runs");
            spawned.push(started.elapsed().as_secs_f64() * 1000.0);
            assert!(out.status.success(), "troupe spawn {id} failed");

            let mut call = CallToolRequestParams::new("create_sub_agent");
            let arguments = json!({"agent_id": id + 1, "summary": "bench", "task": "finish"});
            if let Value::Object(map) = arguments {
                call.arguments = Some(map);
            }
            let started = Instant::now();
            let result = host
                .peer()
                .call_tool(call)
                .await
                .expect("create_sub_agent answers");
            created.push(started.elapsed().as_secs_f64() * 1000.0);
            assert_ne!(
                result.is_error,
                Some(true),
                "create_sub_agent {} failed: {result:?}",
                id + 1
            );
        }
        let _ = host.cancel().await;
        (spawned, created)
    })
}
