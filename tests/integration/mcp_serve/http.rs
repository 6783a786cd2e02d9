//! The HTTP transport's door: a loopback address only, a bearer token on
//! every request; and what happens to agents when a host goes away.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::{Listening, Sdk, Transport, agents_script, ended, host, play, serve_command};
use crate::common::{Sandbox, run, troupe};

/// One POST of an `initialize` to `url`, with `authorization` if given;
/// the response's status line.
fn post(url: &str, authorization: Option<&str>) -> String {
    let address = url.trim_start_matches("http://").split('/').next().unwrap();
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let auth = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.lines().next().unwrap_or_default().to_string()
}

#[test]
fn a_request_without_the_bearer_token_is_refused() {
    let sandbox = Sandbox::new();
    let model = agents_script(&sandbox, &[], &[]);
    let listening = Listening::start(&serve_command(&sandbox, &model, &[]));
    assert!(post(&listening.url, None).contains("401"));
    assert!(post(&listening.url, Some("Bearer not-the-token")).contains("401"));
    assert!(post(&listening.url, Some(&format!("Basic {}", super::TOKEN))).contains("401"));
    assert!(post(&listening.url, Some(&format!("Bearer {}", super::TOKEN))).contains("200"));
}

#[test]
fn listen_on_an_address_that_is_not_loopback_is_refused_with_the_reason() {
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    for address in [
        "0.0.0.0:8765",
        "192.168.10.1:8765",
        "[::]:8765",
        "example.org:80",
    ] {
        let mut command = troupe();
        command
            .args([
                "mcp",
                "serve",
                "--model",
                "scripted:/nonexistent",
                "--listen",
                address,
            ])
            .arg("--workspace")
            .arg(sandbox.ws());
        let out = run(command);
        assert_eq!(out.code, 2, "{address}: {}", out.stderr);
        assert!(
            out.stderr.contains(&format!("--listen {address}")),
            "{}",
            out.stderr
        );
    }
    let mut command = troupe();
    let script = agents_script(&sandbox, &[], &[]);
    command
        .args([
            "mcp",
            "serve",
            "--model",
            &script,
            "--listen",
            "0.0.0.0:8765",
        ])
        .arg("--workspace")
        .arg(sandbox.ws());
    let out = run(command);
    assert!(out.stderr.contains("loopback"), "{}", out.stderr);
}

#[test]
fn a_short_token_in_token_env_is_refused() {
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let script = agents_script(&sandbox, &[], &[]);
    let mut command = troupe();
    command
        .args([
            "mcp",
            "serve",
            "--model",
            &script,
            "--listen",
            "127.0.0.1:0",
            "--token-env",
            "SHORT",
        ])
        .env("SHORT", "abc")
        .arg("--workspace")
        .arg(sandbox.ws());
    let out = run(command);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("--token-env SHORT"), "{}", out.stderr);
}

/// A host starts agent 1 in the background and agent 2 blocking, then
/// vanishes; returns the blocking agent's status once it ended.
fn left(transport: Transport, extra: &[&str]) -> (Sandbox, serde_json::Value) {
    let sandbox = Sandbox::new();
    let model = agents_script(&sandbox, &[], &[1, 2]);
    let mut flags = vec!["--kill-grace", "2", "--session-idle", "2"];
    flags.extend(extra);
    let python = host("leave", Sdk::Python).unwrap();
    let server = serve_command(&sandbox, &model, &flags);
    let report = match transport {
        Transport::Stdio => play(python, "leave", transport, &server),
        Transport::Http => {
            let mut listening = Listening::start(&server);
            let mut python = python;
            python.args(["leave", "http", &listening.url, super::TOKEN]);
            let out = run(python);
            let report = serde_json::from_str(out.stdout.lines().last().unwrap()).unwrap();
            // The blocking agent ends with the session, once idle.
            let two = ended(&sandbox, 2);
            assert_eq!(listening.stop(), 0);
            assert_eq!(two["status"], "terminated");
            report
        }
    };
    assert_eq!(report["started"]["structured"]["status"], "running");
    let blocking = ended(&sandbox, 2);
    (sandbox, blocking)
}

#[test]
fn a_host_that_leaves_ends_its_blocking_agent_and_keeps_its_background_one() {
    if host("leave", Sdk::Python).is_none() {
        return;
    }
    let (sandbox, blocking) = left(Transport::Stdio, &[]);
    assert_eq!(blocking["status"], "terminated");
    assert_eq!(sandbox.transcript(2)["status"], "terminated");
    // The background agent runs on, as a `spawn --background` agent does.
    let one = super::status_of(&sandbox, 1);
    assert_eq!(one["status"], "running", "{one}");
    crate::common::cli(&sandbox, &["terminate", "1", "--patience", "5"]);
}

#[test]
fn on_disconnect_terminate_ends_the_background_agents_too() {
    if host("leave", Sdk::Python).is_none() {
        return;
    }
    let (sandbox, blocking) = left(Transport::Stdio, &["--on-disconnect", "terminate"]);
    assert_eq!(blocking["status"], "terminated");
    assert_eq!(ended(&sandbox, 1)["status"], "terminated");
    assert_eq!(
        std::fs::read_to_string(sandbox.agent_dir(1).join("part.txt")).unwrap(),
        "half done"
    );
}

#[test]
fn an_http_session_left_idle_ends_like_a_closed_stdin() {
    if host("leave", Sdk::Python).is_none() {
        return;
    }
    let (sandbox, blocking) = left(Transport::Http, &["--on-disconnect", "terminate"]);
    assert_eq!(blocking["status"], "terminated");
    assert_eq!(ended(&sandbox, 1)["status"], "terminated");
}

#[test]
fn a_server_killed_outright_leaves_no_agent_of_a_blocking_call_running() {
    let Some(mut python) = host("hold", Sdk::Python) else {
        return;
    };
    let sandbox = Sandbox::new();
    let model = agents_script(&sandbox, &[], &[1]);
    let server = serve_command(&sandbox, &model, &["--kill-grace", "2"]);
    let mut held = python
        .args(["hold", "stdio"])
        .args(&server)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let part = sandbox.agent_dir(1).join("part.txt");
    let started = std::time::Instant::now();
    while !part.exists() {
        assert!(
            started.elapsed() < crate::common::HANG_BOUND,
            "agent 1 never wrote its file"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let marker = format!("mcp serve --workspace {}", sandbox.ws().display());
    // The host's own command line holds the server's: the server is the
    // one that is troupe.
    let servers: Vec<i32> = crate::common::processes_with(&marker)
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "troupe")
        })
        .collect();
    assert_eq!(servers.len(), 1, "{servers:?}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(servers[0]),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    // Its supervisor is told (SIGTERM at the server's death), stops the
    // agent and keeps what it wrote.
    assert_eq!(ended(&sandbox, 1)["status"], "terminated");
    assert_eq!(std::fs::read_to_string(&part).unwrap(), "half done");
    assert_eq!(sandbox.transcript(1)["status"], "terminated");
    let _ = held.kill();
    let _ = held.wait();
}
