//! MCP tool servers for agents, against real third-party servers from
//! PyPI and npm (installed by `.ci/mcp-up`, named by TROUPE_MCP_BIN), run
//! by the real binaries with the scripted model.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::common::{Run, Sandbox, present, run, spawn_command, troupe};

/// The servers' directory and the directories their programs load from,
/// or `None` (a skip, or a failure under CI) when `.ci/mcp-up` did not
/// run.
pub(crate) fn servers(test: &str) -> Option<(PathBuf, Vec<String>)> {
    let bin = std::env::var_os("TROUPE_MCP_BIN").map(PathBuf::from);
    let here = bin
        .as_ref()
        .is_some_and(|b| b.join("mcp-server-git").exists());
    if !present(test, "the MCP servers of .ci/mcp-up (TROUPE_MCP_BIN)", here) {
        return None;
    }
    let read = std::env::var("TROUPE_MCP_READ")
        .unwrap_or_default()
        .split(':')
        .filter(|d| !d.is_empty())
        .map(str::to_string)
        .collect();
    Some((bin?, read))
}

/// A worker that makes `calls` (name, arguments) one turn each, then
/// finishes.
fn calling(sandbox: &Sandbox, calls: &[(&str, Value)]) -> String {
    let mut reply: Vec<Value> = calls
        .iter()
        .map(|(name, arguments)| json!({"tool_calls": [{"name": name, "arguments": arguments}]}))
        .collect();
    reply.push(json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "used the servers"}}]}));
    sandbox.script(json!({"rules": [{"role": "worker", "reply": reply}]}))
}

/// `troupe spawn` of agent 1 with `extra`, the servers' directories
/// readable to it.
fn spawn_with(sandbox: &Sandbox, model: &str, read: &[String], extra: &[&str]) -> Run {
    let mut command = spawn_command(sandbox, 1, "use the tool servers", model);
    for dir in read {
        command.args(["--allow-read", dir]);
    }
    command.args(extra);
    run(command)
}

/// The content of every tool result the agent got, in order.
fn tool_results(sandbox: &Sandbox) -> Vec<Value> {
    sandbox.transcript(1)["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| serde_json::from_str(m["content"].as_str().unwrap()).unwrap())
        .collect()
}

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args:?}");
}

#[test]
fn a_worker_calls_the_git_servers_tools_and_the_record_shows_it() {
    let Some((bin, read)) = servers("mcp git") else {
        return;
    };
    let sandbox = Sandbox::new();
    let ws = sandbox.ws();
    std::fs::create_dir_all(&ws).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join("notes.txt"), "first\n").unwrap();
    git(&ws, &["add", "notes.txt"]);
    git(&ws, &["commit", "-q", "-m", "the first commit"]);
    std::fs::write(ws.join("notes.txt"), "first\nsecond\n").unwrap();
    let repo = ws.display().to_string();
    let model = calling(
        &sandbox,
        &[
            ("mcp__git__git_status", json!({"repo_path": repo})),
            (
                "mcp__git__git_log",
                json!({"repo_path": repo, "max_count": 1}),
            ),
        ],
    );
    let server = format!(
        "git={} --repository {repo}",
        bin.join("mcp-server-git").display()
    );
    let out = spawn_with(&sandbox, &model, &read, &["--mcp", &server]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let results = tool_results(&sandbox);
    assert_eq!(results[0]["success"], true, "{}", results[0]);
    let status = results[0]["content"].as_str().unwrap();
    assert!(status.contains("notes.txt"), "{status}");
    let log = results[1]["content"].as_str().unwrap();
    assert!(log.contains("the first commit"), "{log}");
    assert_eq!(out.json()["stats"]["mcp_calls"], 2);
    assert_eq!(sandbox.transcript(1)["stats"]["mcp_calls"], 2);
    let task = std::fs::read_to_string(sandbox.agent_dir(1).join(".subagent/task.json")).unwrap();
    assert!(
        task.contains("mcp-server-git"),
        "the task file names the server"
    );
    let log = sandbox.agent_dir(1).join(".subagent/mcp-git.log");
    assert!(log.exists(), "the server's stderr is kept");
}

#[test]
fn a_server_allowed_the_whole_root_still_writes_only_where_the_agent_may() {
    let Some((bin, read)) = servers("mcp filesystem") else {
        return;
    };
    let sandbox = Sandbox::new();
    // Outside /tmp, which an agent sees empty: where only Landlock stands
    // in the way.
    let elsewhere = crate::common::visible_elsewhere();
    let outside = elsewhere.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let inside = sandbox.ws().join("inside.txt").display().to_string();
    let escape = outside.join("escape.txt").display().to_string();
    let model = calling(
        &sandbox,
        &[
            (
                "mcp__fs__write_file",
                json!({"path": inside, "content": "in"}),
            ),
            (
                "mcp__fs__write_file",
                json!({"path": escape, "content": "out"}),
            ),
        ],
    );
    let server = format!("fs={} /", bin.join("mcp-server-filesystem").display());
    // The server lists the root it is given, so the agent may read
    // everything; what it may write stays the workspace.
    let out = spawn_with(
        &sandbox,
        &model,
        &read,
        &["--mcp", &server, "--read-scope", "all"],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let results = tool_results(&sandbox);
    assert_eq!(results[0]["success"], true, "{}", results[0]);
    assert_eq!(std::fs::read_to_string(&inside).unwrap(), "in");
    assert_eq!(results[1]["success"], false, "{}", results[1]);
    let said = results[1].to_string();
    let hidden = crate::common::hidden_from_agents(elsewhere.path()) && said.contains("ENOENT");
    assert!(
        said.contains("EACCES") || said.contains("ermission denied") || hidden,
        "denied by the agent's sandbox: {said}"
    );
    assert!(
        !outside.join("escape.txt").exists(),
        "nothing written outside"
    );

    // Regression: the same server run by troupe for the agents (`network =
    // true`) wrote outside the workspace for the model. It has a Landlock
    // domain of its own now.
    let config = sandbox.root().join("troupe.toml");
    let program = bin.join("mcp-server-filesystem");
    std::fs::write(
        &config,
        format!(
            "[mcp_servers.fs]\ncommand = \"{}\"\nargs = [\"/\"]\nnetwork = true\n",
            program.display()
        ),
    )
    .unwrap();
    let mut command = spawn_command(&sandbox, 2, "use the tool servers", &model);
    command.args(["--config", &config.display().to_string()]);
    let out = run(command);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let results: Vec<Value> = crate::common::tool_results(&sandbox.transcript(2))
        .iter()
        .map(|r| serde_json::from_str(r["content"].as_str().unwrap()).unwrap_or(r.clone()))
        .collect();
    assert_eq!(results[0]["success"], true, "{}", results[0]);
    assert_eq!(results[1]["success"], false, "{}", results[1]);
    assert!(results[1].to_string().contains("EACCES"), "{}", results[1]);
    assert!(
        !outside.join("escape.txt").exists(),
        "nothing written outside"
    );
}

#[test]
fn a_missing_a_quitting_and_a_hanging_server_and_a_denied_tool_are_tool_errors() {
    let Some((bin, read)) = servers("mcp failures") else {
        return;
    };
    let sandbox = Sandbox::new();
    let config = sandbox.root().join("troupe.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[mcp_servers.missing]
command = "/nonexistent/mcp-server"
tools = {{ allow = ["x"] }}

[mcp_servers.quits]
command = "true"
tools = {{ allow = ["x"] }}

[mcp_servers.hangs]
command = "sleep"
args = ["1000"]
timeout_secs = 2
tools = {{ allow = ["x"] }}

[mcp_servers.time]
command = "{}"
tools = {{ allow = ["get_current_time"] }}
"#,
            bin.join("mcp-server-time").display()
        ),
    )
    .unwrap();
    let model = calling(
        &sandbox,
        &[
            ("mcp__missing__x", json!({})),
            ("mcp__quits__x", json!({})),
            ("mcp__hangs__x", json!({})),
            (
                "mcp__time__convert_time",
                json!({"source_timezone": "UTC", "time": "12:00", "target_timezone": "UTC"}),
            ),
            ("mcp__time__get_current_time", json!({"timezone": "UTC"})),
        ],
    );
    let out = spawn_with(
        &sandbox,
        &model,
        &read,
        &["--config", &config.display().to_string()],
    );
    assert_eq!(out.code, 0, "the agent finishes: {}", out.stderr);
    let results = tool_results(&sandbox);
    let said = |i: usize| results[i].to_string();
    assert!(
        said(0).contains("did not start") && said(0).contains("no such program"),
        "{}",
        said(0)
    );
    assert!(said(1).contains("`quits` did not start"), "{}", said(1));
    assert!(
        said(2).contains("no answer to the handshake within 2 s"),
        "{}",
        said(2)
    );
    assert_eq!(results[3]["success"], false, "{}", said(3));
    assert!(said(3).contains("mcp__time__convert_time"), "{}", said(3));
    assert_eq!(results[4]["success"], true, "{}", said(4));
    assert!(said(4).contains("datetime"), "{}", said(4));
}

#[test]
fn mcp_list_prints_each_servers_tools() {
    let Some((bin, _)) = servers("mcp list") else {
        return;
    };
    let time = format!("time={}", bin.join("mcp-server-time").display());
    let mut command = troupe();
    command.args([
        "mcp",
        "list",
        "--mcp",
        &time,
        "--mcp",
        "gone=/nonexistent/x",
    ]);
    let out = run(command);
    assert_eq!(out.code, 1, "one server did not start: {}", out.stderr);
    assert!(out.stdout.contains("time ("), "{}", out.stdout);
    assert!(
        out.stdout.contains("mcp__time__get_current_time"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("gone: the MCP server `gone` did not start"),
        "{}",
        out.stdout
    );
    let mut command = troupe();
    command.args(["mcp", "list", "--json", "--mcp", &time]);
    let out = run(command);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let listed: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(listed["server"], "time");
    assert_eq!(listed["roles"], json!(["worker"]));
    assert!(
        listed["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["tool"] == "convert_time")
    );
}

/// A free port on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `server-everything` over streamable HTTP on `port`, until dropped.
struct Everything(std::process::Child);

impl Everything {
    fn start(bin: &Path, port: u16) -> Everything {
        let child = Command::new(bin.join("mcp-server-everything"))
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < give_up,
                "server-everything did not listen"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Everything(child)
    }
}

impl Drop for Everything {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// server-everything on a free port, and a config file that names it
/// with `allow` as its tools.
fn everything(sandbox: &Sandbox, bin: &Path, allow: &[&str]) -> (Everything, PathBuf) {
    let port = free_port();
    let server = Everything::start(bin, port);
    let config = sandbox.root().join("troupe.toml");
    let allow = serde_json::to_string(allow).unwrap();
    std::fs::write(
        &config,
        format!(
            "[mcp_servers.everything]\nurl = \"http://127.0.0.1:{port}/mcp\"\ntools = {{ allow = {allow} }}\n"
        ),
    )
    .unwrap();
    (server, config)
}

#[test]
fn a_remote_server_is_reached_by_troupe_for_an_agent_without_network() {
    let Some((bin, read)) = servers("mcp remote") else {
        return;
    };
    let sandbox = Sandbox::new();
    let (_server, config) = everything(&sandbox, &bin, &["echo", "get-tiny-image"]);
    let model = calling(
        &sandbox,
        &[
            ("mcp__everything__echo", json!({"message": "over the pipe"})),
            ("mcp__everything__get-sum", json!({"a": 1, "b": 2})),
            ("mcp__everything__get-tiny-image", json!({})),
        ],
    );
    let out = spawn_with(
        &sandbox,
        &model,
        &read,
        &["--config", &config.display().to_string()],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let results = tool_results(&sandbox);
    assert_eq!(
        results[0]["content"], "Echo: over the pipe",
        "{}",
        results[0]
    );
    assert_eq!(results[1]["success"], false, "not allowed: {}", results[1]);
    let image = results[2]["content"].as_str().unwrap();
    let saved = image
        .split("saved to ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("the image is saved to a file: {image}"));
    let png = std::fs::read(saved).unwrap();
    assert_eq!(&png[1..4], b"PNG", "the image itself, decoded");
    let result = out.json();
    assert_eq!(result["stats"]["sandbox"]["network_denied"], true);
    assert_eq!(result["stats"]["mcp_calls"], 2);
    let task: Value = serde_json::from_str(
        &std::fs::read_to_string(sandbox.agent_dir(1).join(".subagent/task.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(task["mcp_remote"][0]["name"], "mcp__everything__echo");
    assert!(task["mcp"].is_null(), "the agent starts no server itself");
}

#[test]
fn a_bad_server_entry_is_refused_with_the_reason() {
    let sandbox = Sandbox::new();
    let config = sandbox.root().join("troupe.toml");
    std::fs::write(
        &config,
        "[mcp_servers.both]\ncommand = \"x\"\nurl = \"http://127.0.0.1:9/mcp\"\n",
    )
    .unwrap();
    let model = calling(&sandbox, &[]);
    let mut command = spawn_command(&sandbox, 1, "t", &model);
    command.args(["--config", &config.display().to_string()]);
    let out = run(command);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("MCP server `both`: give it a `command`"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_server_that_dies_is_started_again_once() {
    let Some((bin, read)) = servers("mcp restart") else {
        return;
    };
    let sandbox = Sandbox::new();
    let time = json!({"timezone": "UTC"});
    // Only the agent's own server: it is in the agent's session, and other
    // tests run servers of the same name at the same time.
    let kill = json!({"command": "pkill -s 0 -f 'python.*mcp-server-time'; sleep 0.5"});
    let model = calling(
        &sandbox,
        &[
            ("mcp__time__get_current_time", time.clone()),
            ("run_command", kill.clone()),
            ("mcp__time__get_current_time", time.clone()),
            ("run_command", kill),
            ("mcp__time__get_current_time", time),
        ],
    );
    let server = format!("time={}", bin.join("mcp-server-time").display());
    let out = spawn_with(&sandbox, &model, &read, &["--mcp", &server]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let results = tool_results(&sandbox);
    assert_eq!(results[0]["success"], true, "{}", results[0]);
    assert_eq!(results[2]["success"], true, "started again: {}", results[2]);
    assert_eq!(results[4]["success"], false, "{}", results[4]);
    assert!(
        results[4]
            .to_string()
            .contains("was started again once already"),
        "{}",
        results[4]
    );
}

#[test]
fn a_forged_mcp_call_reaches_no_tool_the_agent_was_not_given() {
    let Some((bin, _)) = servers("mcp forged call") else {
        return;
    };
    let sandbox = Sandbox::new();
    let (_server, config) = everything(&sandbox, &bin, &["echo"]);
    // A stand-in agent that asks troupe for a tool it was not given, and
    // for a server that does not exist, and keeps the answers.
    let answers = sandbox.root().join("answers.txt");
    let agent = sandbox.executable(
        "forging-agent",
        &format!(
            r#"echo '{{"type":"hello","protocol":1,"agent_id":1,"role":"worker","pid":'$$'}}'
echo '{{"type":"mcp_call","id":1,"server":"everything","tool":"printEnv","arguments":{{}}}}'
read -r one; echo "$one" >> {answers}
echo '{{"type":"mcp_call","id":2,"server":"elsewhere","tool":"echo","arguments":{{}}}}'
read -r two; echo "$two" >> {answers}
echo '{{"type":"finished","success":true,"summary":"asked"}}'"#,
            answers = answers.display()
        ),
    );
    let model = calling(&sandbox, &[]);
    let mut command = spawn_command(&sandbox, 1, "t", &model);
    command
        .args(["--config", &config.display().to_string()])
        .arg("--agent-bin")
        .arg(&agent);
    let out = run(command);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let said = std::fs::read_to_string(&answers).unwrap();
    let lines: Vec<Value> = said
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["type"], "mcp_result");
    assert!(
        lines[0]["error"]
            .as_str()
            .unwrap()
            .contains("gives no tool `printEnv`"),
        "{said}"
    );
    assert!(lines[0]["result"].is_null());
    assert!(
        lines[1]["error"]
            .as_str()
            .unwrap()
            .contains("no MCP server `elsewhere`"),
        "{said}"
    );
}

#[test]
fn a_reviewer_gets_only_the_servers_whose_roles_name_it() {
    let Some((bin, read)) = servers("mcp roles") else {
        return;
    };
    let sandbox = Sandbox::new();
    let time = bin.join("mcp-server-time").display().to_string();
    let config = sandbox.root().join("troupe.toml");
    std::fs::write(
        &config,
        format!(
            "[mcp_servers.clock]\ncommand = \"{time}\"\nroles = [\"reviewer\"]\n\n[mcp_servers.worker_clock]\ncommand = \"{time}\"\n"
        ),
    )
    .unwrap();
    let rules = vec![
        crate::team::planner(json!([crate::team::step("a", &[])])),
        crate::team::worker_rule("a", crate::team::worker_writes("a", 0)),
        json!({"role": "reviewer", "reply": [
            {"tool_calls": [{"name": "mcp__clock__get_current_time", "arguments": {"timezone": "UTC"}}]},
            {"content": json!({"approved": true, "summary": "checked the time"}).to_string()}
        ]}),
    ];
    let mut extra = vec!["--config".to_string(), config.display().to_string()];
    for dir in &read {
        extra.extend(["--allow-read".to_string(), dir.clone()]);
    }
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let team = crate::team::team_run(&sandbox, rules, &extra);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let task = |agent: &str| -> Value {
        serde_json::from_str(
            &std::fs::read_to_string(team.dir.join(format!("a/{agent}/.subagent/task.json")))
                .unwrap(),
        )
        .unwrap()
    };
    let servers = |task: &Value| -> Vec<String> {
        task["mcp"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| s["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(servers(&task("worker-1")), ["worker_clock"]);
    assert_eq!(servers(&task("review-1")), ["clock"]);
    let review =
        std::fs::read_to_string(team.dir.join("a/review-1/.subagent/conversations.json")).unwrap();
    assert!(
        review.contains("datetime"),
        "the reviewer used its server: {review}"
    );
}

#[test]
fn a_server_troupe_started_dies_with_a_kill_of_troupe() {
    let sandbox = Sandbox::new();
    let started = sandbox.root().join("server.started");
    let config = sandbox.root().join("troupe.toml");
    // A server that never answers the handshake: troupe waits for it. It
    // runs in an agent's PID namespace, so it is found by its command
    // line, which no other process has.
    let sleep = format!("987654.{}", std::process::id());
    std::fs::write(
        &config,
        format!(
            "[mcp_servers.silent]\ncommand = \"sh\"\nargs = [\"-c\", \"touch {}; exec sleep {sleep}\"]\ntimeout_secs = 120\n",
            started.display()
        ),
    )
    .unwrap();
    let mut troupe = troupe()
        .args(["--config", &config.display().to_string(), "mcp", "list"])
        .arg("--workspace")
        .arg(sandbox.root())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let servers = || sleeping(&sleep);
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !started.exists() || servers().is_empty() {
        assert!(std::time::Instant::now() < give_up, "the server started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    troupe.kill().unwrap();
    troupe.wait().unwrap();
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !servers().is_empty() && std::time::Instant::now() < give_up {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let alive = servers();
    for pid in &alive {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    assert!(
        alive.is_empty(),
        "the server {alive:?} outlived the troupe that started it"
    );
}

/// The processes running `sleep SECS`, by /proc.
fn sleeping(secs: &str) -> Vec<i32> {
    let wanted = format!("sleep\0{secs}\0");
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            (cmdline == wanted.as_bytes()).then_some(pid)
        })
        .collect()
}
