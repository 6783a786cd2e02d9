//! `troupe mcp serve`, driven by the official MCP client SDKs as a host
//! would drive it (`tests/hosts/`: Python's `mcp`, TypeScript's
//! `@modelcontextprotocol/sdk`, installed by `.ci/mcp-up`), over stdio and
//! over streamable HTTP, on the scripted model. Each test asserts on what
//! the host was answered and on the files the agents left.

mod http;
mod node;
mod python;
mod tasks;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{HANG_BOUND, Sandbox, present, run};

/// How a host reaches the server.
#[derive(Debug, Clone, Copy)]
pub enum Transport {
    Stdio,
    Http,
}

/// A host program of the SDK `sdk`, or `None` (a skip, or a failure under
/// CI) when `.ci/mcp-up` did not install it.
pub fn host(test: &str, sdk: Sdk) -> Option<Command> {
    let (variable, what) = match sdk {
        Sdk::Python => ("TROUPE_MCP_SDK_PYTHON", "the Python MCP SDK of .ci/mcp-up"),
        Sdk::Node => ("TROUPE_MCP_SDK_NPM", "the TypeScript MCP SDK of .ci/mcp-up"),
    };
    let place = std::env::var_os(variable).map(PathBuf::from);
    let here = place.as_ref().is_some_and(|p| p.exists())
        && (matches!(sdk, Sdk::Python) || crate::common::on_path("node"));
    if !present(test, &format!("{what} ({variable})"), here) {
        return None;
    }
    let hosts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hosts");
    let mut command = match sdk {
        Sdk::Python => {
            let mut command = Command::new(place?);
            command.arg(hosts.join("host.py"));
            command
        }
        Sdk::Node => {
            let mut command = Command::new("node");
            command
                .arg(hosts.join("host.mjs"))
                .env("TROUPE_MCP_SDK_NPM", place?);
            command
        }
    };
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy().to_string();
        if name.starts_with("TROUPE_") && name != "TROUPE_MCP_SDK_NPM" {
            command.env_remove(name);
        }
    }
    command
        .env("NO_COLOR", "1")
        .env("TROUPE_CONFIG", "")
        .env_remove("OPENAI_API_KEY");
    Some(command)
}

#[derive(Debug, Clone, Copy)]
pub enum Sdk {
    Python,
    Node,
}

/// `troupe mcp serve` on the sandbox's workspace with `model` and
/// `extra` flags, as its arguments (the program first).
pub fn serve_command(sandbox: &Sandbox, model: &str, extra: &[&str]) -> Vec<String> {
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let mut args = vec![
        env!("CARGO_BIN_EXE_troupe").to_string(),
        "mcp".into(),
        "serve".into(),
        "--workspace".into(),
        sandbox.ws().display().to_string(),
        "--model".into(),
        model.to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Plays `scenario` with `host` against a server started with `server`
/// (from `serve_command`), over `transport`; returns the host's report.
pub fn play(mut host: Command, scenario: &str, transport: Transport, server: &[String]) -> Value {
    host.arg(scenario);
    let report = match transport {
        Transport::Stdio => {
            host.arg("stdio").args(server);
            run(host)
        }
        Transport::Http => {
            let listening = Listening::start(server);
            host.args(["http", &listening.url, TOKEN]);
            run(host)
        }
    };
    assert_eq!(
        report.code, 0,
        "the host's {scenario} ended {}:\nstdout: {}\nstderr: {}",
        report.code, report.stdout, report.stderr
    );
    let last = report.stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| {
        panic!(
            "the host's {scenario} printed no report ({e}):\nstdout: {}\nstderr: {}",
            report.stdout, report.stderr
        )
    })
}

/// The bearer token of the HTTP tests.
pub const TOKEN: &str = "a-test-token-long-enough-0123456789";

/// A server on 127.0.0.1, an ephemeral port, stopped when dropped.
pub struct Listening {
    pub child: Child,
    pub url: String,
}

impl Listening {
    pub fn start(server: &[String]) -> Listening {
        let mut command = crate::common::troupe();
        command
            .args(&server[1..])
            .args([
                "--listen",
                "127.0.0.1:0",
                "--token-env",
                "TROUPE_TEST_TOKEN",
            ])
            .env("TROUPE_TEST_TOKEN", TOKEN)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("server: {line}");
                if let Some(at) = line.find("http://") {
                    let _ = tx.send(line[at..].split_whitespace().next().unwrap().to_string());
                }
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the server says where it listens");
        Listening { child, url }
    }

    /// Stops the server as a user would (SIGTERM) and waits for it.
    pub fn stop(&mut self) -> i32 {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(started.elapsed() < HANG_BOUND, "the server did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A worker for each agent id that writes `greeting-<id>.txt` and
/// finishes; `long` ids write `part.txt` and then wait a minute for the
/// model before they would finish.
pub fn agents_script(sandbox: &Sandbox, quick: &[u32], long: &[u32]) -> String {
    let mut rules = Vec::new();
    for id in quick {
        rules.push(json!({"role": "worker", "step": id.to_string(), "reply": [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": format!("greeting-{id}.txt"), "content": "hello"}}]},
            {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": format!("wrote greeting-{id}.txt")}}]}
        ]}));
    }
    for id in long {
        rules.push(json!({"role": "worker", "step": id.to_string(), "reply": [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": format!("sub_agent_results/agent_{id}/part.txt"), "content": "half done"}}]},
            {"delay_ms": 60000, "tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "too late"}}]}
        ]}));
    }
    sandbox.script(json!({"latency_ms": 50, "rules": rules}))
}

/// `troupe status ID --json` of the sandbox's workspace: the agent's
/// entry.
pub fn status_of(sandbox: &Sandbox, id: u32) -> Value {
    let out = crate::common::cli(sandbox, &["status", &id.to_string(), "--json"]);
    out.json()["agents"][0].clone()
}

/// Waits until agent `id` is no longer running and its supervisor wrote
/// its result (its transcript sealed before), and returns its status.
pub fn ended(sandbox: &Sandbox, id: u32) -> Value {
    let started = Instant::now();
    loop {
        let status = status_of(sandbox, id);
        let dir = PathBuf::from(status["deliverables_dir"].as_str().unwrap_or_default());
        let sealed = sandbox
            .ws()
            .join(dir)
            .join(".subagent/result.json")
            .exists();
        if status["status"] != "running" && sealed {
            return status;
        }
        assert!(
            started.elapsed() < HANG_BOUND,
            "agent {id} did not end, or left no result: {status}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `server` (from `serve_command`) as the unprivileged user `nobody`, the
/// sandbox made theirs, when the tests run as root; as it is otherwise.
/// The host stays the caller's: it is the server that must hold.
pub fn as_ordinary_user(test: &str, sandbox: &Sandbox, server: Vec<String>) -> Option<Vec<String>> {
    let root = crate::hostile::is_root();
    if !present(
        test,
        "setpriv (util-linux)",
        !root || crate::common::on_path("setpriv"),
    ) {
        return None;
    }
    let mut command = Command::new(&server[0]);
    command.args(&server[1..]);
    let wrapped = crate::hostile::unprivileged(sandbox, command);
    let program = wrapped.get_program().to_string_lossy().to_string();
    let args = wrapped.get_args().map(|a| a.to_string_lossy().to_string());
    Some(std::iter::once(program).chain(args).collect())
}
