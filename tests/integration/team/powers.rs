//! Per-step powers (issue 24): a step's `powers` narrow what its worker
//! may do, within the run's ceiling, and the sandbox and troupe hold it
//! to them; a plan that asks for more than the ceiling is refused by
//! name.

use serde_json::{Value, json};

use super::{approving_reviewer, planner, team_command, team_run, validate, worker_rule};
use crate::common::{Sandbox, read_json, run, troupe};

fn with_powers(id: &str, powers: Value) -> Value {
    json!({"id": id, "description": format!("do {id}"), "type": "FILE_WRITE", "dependencies": [], "powers": powers})
}

fn finish() -> Value {
    json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "done"}}]})
}

fn writes(path: &str) -> Value {
    json!({"tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": "x"}}]})
}

/// What each tool call of the worker's transcript came back with.
fn tool_results(dir: &std::path::Path) -> Vec<Value> {
    crate::common::tool_results(&read_json(&dir.join(".subagent/conversations.json")))
}

#[test]
fn a_plan_that_asks_for_more_than_the_run_gives_is_refused_with_the_step_and_the_power() {
    let cases = [
        (
            json!({"mcp": ["git"]}),
            &[][..],
            "powers.mcp names `git`, a server the run does not give workers",
        ),
        (
            json!({"max_turns": 80}),
            &[][..],
            "powers.max_turns is 80, more than the run's --max-turns 50",
        ),
        (
            json!({"timeout": 30}),
            &["--timeout", "20"][..],
            "powers.timeout is 30, more than the run's --timeout 20",
        ),
        (
            json!({"max_tokens": 900}),
            &["--max-agent-tokens", "500"][..],
            "powers.max_tokens is 900, more than the run's --max-agent-tokens 500",
        ),
        (
            json!({"read": ["/root/secrets"]}),
            &[][..],
            "powers.read names /root/secrets, which the run's agents may not read",
        ),
        (
            json!({"network": ["127.0.0.1:8080"]}),
            &[][..],
            "powers.network asks for 127.0.0.1:8080",
        ),
        (
            json!({"write": ["docs"]}),
            &["--sandbox", "off"][..],
            "powers.write is enforced by the sandbox, and the run's is off",
        ),
    ];
    for (powers, flags, said) in cases {
        let sandbox = Sandbox::new();
        let plan = json!({"steps": [with_powers("narrow", powers.clone())]});
        let path = sandbox.root().join("plan.json");
        std::fs::write(&path, plan.to_string()).unwrap();
        let mut command = troupe();
        command.arg("validate").arg(&path).args(flags);
        let checked = run(command);
        assert_eq!(checked.code, 2, "{powers}: {}", checked.stderr);
        assert!(
            checked
                .stderr
                .contains("step `narrow` asks for more than the run gives its workers")
                && checked.stderr.contains(said),
            "{powers}: {}",
            checked.stderr
        );
        // The same plan from the Planner is an invalid plan, never run.
        let mut command = team_command(
            &sandbox,
            vec![planner(json!([with_powers("narrow", powers.clone())]))],
            flags,
        );
        command.args(["--max-replans", "0"]);
        let ran = run(command);
        assert_eq!(ran.code, 2, "{powers}: {}", ran.stderr);
        assert!(ran.stderr.contains(said), "{powers}: {}", ran.stderr);
    }
    let sandbox = Sandbox::new();
    let out = validate(
        &sandbox,
        &json!({"steps": [with_powers("ok", json!({"max_turns": 5, "tools": ["read_file"]}))]})
            .to_string(),
    );
    assert_eq!(out.code, 0, "within the ceiling: {}", out.stderr);
    assert!(
        out.stdout
            .contains("powers: tools read_file (and finish_task); max_turns 5"),
        "validate shows them: {}",
        out.stdout
    );
}

#[test]
fn a_step_without_write_tools_cannot_write_and_is_told_so() {
    let sandbox = Sandbox::new();
    let rules = vec![
        planner(json!([with_powers(
            "look",
            json!({"tools": ["read_file", "list_dir"], "max_turns": 4})
        )])),
        worker_rule("look", vec![writes("a.txt"), finish()]),
        approving_reviewer(),
    ];
    let team = team_run(
        &sandbox,
        rules,
        &["--max-replans", "0", "--isolation", "shared"],
    );
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let worker = team.dir.join("look/worker-1");
    let results = tool_results(&worker);
    assert_eq!(results[0]["success"], false, "{}", results[0]);
    let error = results[0]["error"].as_str().unwrap();
    assert!(
        error.contains("`write_file` is not among this step's tools")
            && error.contains("read_file, list_dir, finish_task"),
        "{error}"
    );
    assert!(!sandbox.ws().join("a.txt").exists());
    let task = read_json(&worker.join(".subagent/task.json"));
    assert_eq!(task["tools"], json!(["read_file", "list_dir"]));
    assert_eq!(
        task["limits"]["max_turns"], 4,
        "max_turns narrows the worker's"
    );
    let review = read_json(&team.dir.join("look/review-1/.subagent/task.json"));
    assert!(
        review.get("tools").is_none(),
        "the reviewer keeps its own tools"
    );
}

fn writes_docs_then_src(sandbox: &Sandbox) -> Vec<Value> {
    std::fs::create_dir_all(sandbox.ws().join("src")).unwrap();
    vec![
        planner(json!([with_powers("docs", json!({"write": ["docs"]}))])),
        worker_rule(
            "docs",
            vec![
                writes("docs/guide.md"),
                writes("src/main.rs"),
                json!({"tool_calls": [{"name": "run_command", "arguments": {"command": "echo x > src/lib.rs; echo y > docs/cmd.md"}}]}),
                finish(),
            ],
        ),
        approving_reviewer(),
    ]
}

fn check_docs_only(sandbox: &Sandbox, team: &super::TeamRun) {
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let results = tool_results(&team.dir.join("docs/worker-1"));
    assert_eq!(
        results[0]["success"], true,
        "docs/ is the step's: {}",
        results[0]
    );
    assert_eq!(results[1]["success"], false, "src/ is not: {}", results[1]);
    assert!(sandbox.ws().join("docs/guide.md").is_file());
    assert!(
        sandbox.ws().join("docs/cmd.md").is_file(),
        "its commands write docs/ too"
    );
    assert!(!sandbox.ws().join("src/main.rs").exists());
    assert!(
        !sandbox.ws().join("src/lib.rs").exists(),
        "nor do its commands write src/"
    );
}

#[test]
fn a_step_that_may_write_docs_cannot_write_src() {
    let sandbox = Sandbox::new();
    let rules = writes_docs_then_src(&sandbox);
    let team = team_run(
        &sandbox,
        rules,
        &["--max-replans", "0", "--isolation", "shared"],
    );
    check_docs_only(&sandbox, &team);
}

#[test]
fn a_step_that_may_write_docs_cannot_write_src_as_an_ordinary_user() {
    let root = crate::hostile::is_root();
    if !crate::common::present(
        "powers as an ordinary user",
        "setpriv",
        !root || crate::common::on_path("setpriv"),
    ) {
        return;
    }
    let sandbox = Sandbox::new();
    let rules = writes_docs_then_src(&sandbox);
    let command = team_command(
        &sandbox,
        rules,
        &["--max-replans", "0", "--isolation", "shared"],
    );
    let command = crate::hostile::unprivileged(&sandbox, command);
    let team = super::finish_team_run(&sandbox, command);
    check_docs_only(&sandbox, &team);
}

#[test]
fn a_link_planted_where_a_step_may_write_is_refused() {
    let sandbox = Sandbox::new();
    let outside = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    std::os::unix::fs::symlink(outside.path(), sandbox.ws().join("docs")).unwrap();
    let rules = vec![
        planner(json!([with_powers(
            "docs",
            json!({"write": ["notes/new", "docs"]})
        )])),
        worker_rule("docs", vec![writes("docs/escape.md"), finish()]),
        approving_reviewer(),
    ];
    let team = team_run(
        &sandbox,
        rules,
        &["--max-replans", "0", "--isolation", "shared"],
    );
    assert_eq!(team.run.code, 1, "{}", team.run.stderr);
    assert!(
        team.run.stderr.contains("powers.write names") && team.run.stderr.contains("is a link"),
        "{}",
        team.run.stderr
    );
    assert!(!outside.path().join("escape.md").exists());
    // The step did not run, and nothing was made for its other path: not
    // by troupe before the sandbox held it, nor by the agent.
    assert!(!sandbox.ws().join("notes").exists());
}

#[test]
fn a_step_that_may_write_docs_lands_only_docs_from_its_checkout() {
    let sandbox = Sandbox::new();
    crate::isolation::repository(&sandbox);
    let rules = writes_docs_then_src(&sandbox);
    let team = team_run(
        &sandbox,
        rules,
        &["--max-replans", "0", "--isolation", "worktree"],
    );
    check_docs_only(&sandbox, &team);
    let change = &team.step("docs")["attempts"][0]["change"]["files"];
    let files = change.to_string();
    assert!(
        files.contains("docs/guide.md") && !files.contains("src/"),
        "{files}"
    );
}

/// A server on 127.0.0.1 that answers every request with `body`; its port.
fn http_server(body: &'static str) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let answer = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    port
}

/// A command that fetches `url` with the proxy its environment names, and
/// prints the body, or the refusal's status and body.
fn fetch(url: &str) -> Value {
    let script = format!(
        "import urllib.request as u, urllib.error as e\ntry:\n    print('got', u.urlopen('{url}', timeout=20).read().decode())\nexcept e.HTTPError as r:\n    print('refused', r.code, r.read().decode())\nexcept Exception as x:\n    print('failed', x)\n"
    );
    json!({"tool_calls": [{"name": "run_command", "arguments": {"command": format!("python3 -c \"{}\"", script.replace('"', "\\\""))}}]})
}

#[test]
fn a_step_reaches_the_hosts_its_powers_name_through_troupe_and_no_other() {
    if !crate::common::present(
        "the connection broker",
        "python3",
        std::path::Path::new("/usr/bin/python3").exists(),
    ) {
        return;
    }
    let sandbox = Sandbox::new();
    let allowed = http_server("hello from the allowed host");
    let other = http_server("hello from another host");
    let allowed_url = format!("http://127.0.0.1:{allowed}/");
    let other_url = format!("http://127.0.0.1:{other}/");
    let host = format!("127.0.0.1:{allowed}");
    let rules = vec![
        planner(json!([
            with_powers("online", json!({"network": [host]})),
            {"id": "offline", "description": "do offline", "type": "COMMAND", "dependencies": []}
        ])),
        worker_rule(
            "online",
            vec![fetch(&allowed_url), fetch(&other_url), finish()],
        ),
        worker_rule("offline", vec![fetch(&allowed_url), finish()]),
        approving_reviewer(),
    ];
    let team = team_run(
        &sandbox,
        rules,
        &[
            "--max-replans",
            "0",
            "--isolation",
            "shared",
            "--allow-host",
            &host,
        ],
    );
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let said = |step: &str, n: usize| {
        tool_results(&team.dir.join(format!("{step}/worker-1")))[n]["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let reached = said("online", 0);
    assert!(
        reached.contains("got hello from the allowed host"),
        "{reached}"
    );
    let refused = said("online", 1);
    assert!(
        refused.contains("refused 403")
            && refused.contains(&format!(
                "troupe refused 127.0.0.1:{other}: it is not among this step's powers.network"
            )),
        "{refused}"
    );
    let log =
        std::fs::read_to_string(team.dir.join("online/worker-1/.subagent/network.log")).unwrap();
    assert!(log.contains(&format!("127.0.0.1:{other}")), "{log}");
    let offline = said("offline", 0);
    assert!(
        offline.contains("failed"),
        "a step without network reaches nothing: {offline}"
    );
    let brief = read_json(&team.dir.join("online/worker-1/.subagent/task.json"));
    assert!(
        brief["task"]
            .as_str()
            .unwrap()
            .contains("only through troupe's HTTP proxy")
    );
}

/// Regression (the fourth adversarial trial): `powers.read:
/// ["/proc/2/root"]` passed the ceiling as `nobody`, and in the agent
/// `/proc/2` was the agent itself; `powers.write: [".git/packed-refs"]`
/// passed, and troupe made it a directory in the user's repository before
/// the run, after which `git status` failed.
#[test]
fn powers_naming_the_kernels_trees_or_guarded_paths_are_refused_and_nothing_is_made() {
    let cases = [
        (json!({"read": ["/proc/2/root"]}), "/proc, /sys and /dev"),
        (json!({"read": ["/sys/kernel"]}), "/proc, /sys and /dev"),
        (json!({"read": ["/dev/shm"]}), "/proc, /sys and /dev"),
        (
            json!({"write": [".git/packed-refs"]}),
            ".git, .troupe, troupe.toml",
        ),
        (
            json!({"write": [".git/index.lock"]}),
            ".git, .troupe, troupe.toml",
        ),
        (
            json!({"write": ["troupe.toml"]}),
            ".git, .troupe, troupe.toml",
        ),
        (
            json!({"write": ["vendor/lib/.git/config"]}),
            ".git, .troupe, troupe.toml",
        ),
        (
            json!({"write": ["docs/.troupe"]}),
            ".git, .troupe, troupe.toml",
        ),
        (
            json!({"write": ["sub_agent_results/other"]}),
            ".git, .troupe, troupe.toml",
        ),
    ];
    for (powers, said) in cases {
        let sandbox = Sandbox::new();
        let git = std::process::Command::new("git")
            .args(["init", "-q"])
            .arg(sandbox.ws())
            .status();
        assert!(git.unwrap().success());
        let plan = json!({"steps": [with_powers("narrow", powers.clone())]});
        let path = sandbox.root().join("plan.json");
        std::fs::write(&path, plan.to_string()).unwrap();
        let mut command = troupe();
        command.arg("validate").arg(&path);
        let checked = run(crate::hostile::unprivileged(&sandbox, command));
        assert_eq!(checked.code, 2, "{powers}: {}", checked.stderr);
        assert!(
            checked.stderr.contains(said),
            "{powers}: {}",
            checked.stderr
        );
        // Run as a plan, and as the Planner's: refused before anything is
        // made in the workspace.
        let mut command = team_command(&sandbox, vec![approving_reviewer()], &[]);
        command.arg("--plan").arg(&path);
        let ran = run(command);
        assert_eq!(ran.code, 2, "{powers}: {}", ran.stderr);
        let command = team_command(
            &sandbox,
            vec![planner(json!([with_powers("narrow", powers.clone())]))],
            &["--max-replans", "0"],
        );
        let ran = run(command);
        assert_eq!(ran.code, 2, "{powers}: {}", ran.stderr);
        assert!(ran.stderr.contains(said), "{powers}: {}", ran.stderr);
        for made in ["packed-refs", "index.lock"] {
            assert!(!sandbox.ws().join(".git").join(made).exists(), "{powers}");
        }
        assert!(!sandbox.ws().join("troupe.toml").exists(), "{powers}");
        // (As root, over a workspace made nobody's for the check above.)
        let status = std::process::Command::new("git")
            .args(["-c", "safe.directory=*", "-C"])
            .arg(sandbox.ws())
            .args(["status", "--short"])
            .output()
            .unwrap();
        assert!(status.status.success(), "{powers}: git status fails");
    }
}

#[test]
fn a_read_power_troupe_cannot_resolve_is_refused() {
    let sandbox = Sandbox::new();
    let plan = json!({"steps": [with_powers("narrow", json!({"read": ["/nonexistent/tools"]}))]});
    let path = sandbox.root().join("plan.json");
    std::fs::write(&path, plan.to_string()).unwrap();
    let mut command = troupe();
    command
        .arg("validate")
        .arg(&path)
        .args(["--read-scope", "all"]);
    let checked = run(command);
    assert_eq!(checked.code, 2, "{}", checked.stderr);
    assert!(
        checked.stderr.contains("which troupe cannot resolve"),
        "{}",
        checked.stderr
    );
}

/// The fourth adversarial trial's broker attacks, by a step given one
/// host: a request for it with another site's `Host:`, connections held
/// open until troupe would run out of descriptors, and a flood of refused
/// requests that wrote 77 MB of log in a second.
const BROKER_PROBE: &str = r#"
import os, socket, time, urllib.parse
proxy = urllib.parse.urlparse(os.environ["HTTP_PROXY"])
address = (proxy.hostname, proxy.port)
allowed = "ALLOWED"

def ask(raw):
    s = socket.create_connection(address, timeout=20)
    s.sendall(raw)
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    return data.split(b"\r\n")[0].decode()

plain = ("GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n" % (allowed, allowed)).encode()
print("foreign", ask(("GET http://%s/ HTTP/1.1\r\nHost: internal.example\r\n\r\n" % allowed).encode()))
held = [socket.create_connection(address, timeout=20) for _ in range(100)]
time.sleep(1)
print("crowded", ask(plain))
for s in held:
    s.close()
time.sleep(2)
print("after", ask(plain))
for _ in range(3000):
    ask(b"CONNECT 127.0.0.1:9 HTTP/1.1\r\n\r\n")
print("flooded")
"#;

#[test]
fn the_broker_refuses_a_foreign_host_header_and_bounds_what_one_agent_costs_troupe() {
    if !crate::common::present(
        "the connection broker",
        "python3",
        std::path::Path::new("/usr/bin/python3").exists(),
    ) {
        return;
    }
    let sandbox = Sandbox::new();
    let allowed = http_server("hello from the allowed host");
    let host = format!("127.0.0.1:{allowed}");
    let probe = BROKER_PROBE.replace("ALLOWED", &host);
    let rules = vec![
        planner(json!([with_powers("online", json!({"network": [host]}))])),
        worker_rule(
            "online",
            vec![
                json!({"tool_calls": [{"name": "write_file", "arguments": {"path": "probe.py", "content": probe}}]}),
                json!({"tool_calls": [{"name": "run_command", "arguments": {"command": "python3 probe.py", "timeout_seconds": 110}}]}),
                finish(),
            ],
        ),
        approving_reviewer(),
    ];
    let team = team_run(
        &sandbox,
        rules,
        &[
            "--max-replans",
            "0",
            "--isolation",
            "shared",
            "--allow-host",
            &host,
            "--command-timeout",
            "110",
        ],
    );
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let results = tool_results(&team.dir.join("online/worker-1"));
    let said = results[1]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        said.contains("foreign HTTP/1.1 403 Forbidden"),
        "{results:?}"
    );
    assert!(said.contains("crowded HTTP/1.1 503"), "{said}");
    assert!(said.contains("after HTTP/1.1 200 OK"), "{said}");
    assert!(said.contains("flooded"), "{said}");
    let log =
        std::fs::read_to_string(team.dir.join("online/worker-1/.subagent/network.log")).unwrap();
    assert!(
        log.contains("Host: is internal.example"),
        "{}",
        &log[..log.len().min(2000)]
    );
    assert!(log.len() < 300 * 1024, "network.log is {} bytes", log.len());
    assert!(
        log.contains("network.log reached 256 KiB"),
        "the log says it is full"
    );
}

/// Reaches step `a`'s broker socket by its path, as a step without
/// network powers would, and asks it for the host only `a` may reach.
const SIBLING_PROBE: &str = r#"
import glob, socket, time
for _ in range(200):
    found = glob.glob("sub_agent_results/run_*/a/worker-1/.subagent/network.sock")
    if found:
        break
    time.sleep(0.05)
s = socket.socket(socket.AF_UNIX)
s.connect(found[0])
s.sendall(b"GET http://ALLOWED/ HTTP/1.1\r\nHost: ALLOWED\r\n\r\n")
data = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
print("sibling", data.decode(errors="replace"))
"#;

/// Regression (the fourth adversarial trial, high): a step with no
/// network powers reached a host only a parallel step may reach, by
/// connecting to that step's `.subagent/network.sock`, which every agent
/// of the run sees; the broker never asked who was calling.
#[test]
fn a_step_cannot_use_a_sibling_steps_broker() {
    sibling_broker(false);
}

#[test]
fn a_step_cannot_use_a_sibling_steps_broker_as_an_ordinary_user() {
    let root = crate::hostile::is_root();
    if !crate::common::present(
        "the broker as nobody",
        "setpriv",
        !root || crate::common::on_path("setpriv"),
    ) {
        return;
    }
    sibling_broker(true);
}

fn sibling_broker(ordinary: bool) {
    if !crate::common::present(
        "the connection broker",
        "python3",
        std::path::Path::new("/usr/bin/python3").exists(),
    ) {
        return;
    }
    let sandbox = Sandbox::new();
    let allowed = http_server("only for step a");
    let host = format!("127.0.0.1:{allowed}");
    let probe = SIBLING_PROBE.replace("ALLOWED", &host);
    let command = |text: &str| json!({"tool_calls": [{"name": "run_command", "arguments": {"command": text, "timeout_seconds": 60}}]});
    let rules = vec![
        planner(json!([
            with_powers("a", json!({"network": [host]})),
            {"id": "b", "description": "do b", "type": "COMMAND", "dependencies": []}
        ])),
        worker_rule("a", vec![command("sleep 6"), finish()]),
        worker_rule(
            "b",
            vec![
                json!({"tool_calls": [{"name": "write_file", "arguments": {"path": "probe.py", "content": probe}}]}),
                command("python3 probe.py"),
                finish(),
            ],
        ),
        approving_reviewer(),
    ];
    let command = team_command(
        &sandbox,
        rules,
        &[
            "--max-replans",
            "0",
            "--isolation",
            "shared",
            "--allow-host",
            &host,
        ],
    );
    let command = match ordinary {
        true => crate::hostile::unprivileged(&sandbox, command),
        false => command,
    };
    let team = super::finish_team_run(&sandbox, command);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let said = tool_results(&team.dir.join("b/worker-1"))[1]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let log = std::fs::read_to_string(team.dir.join("a/worker-1/.subagent/network.log"))
        .unwrap_or_default();
    assert!(
        said.contains("sibling HTTP/1.1 403 Forbidden"),
        "{said}\n{log}"
    );
    assert!(
        said.contains("answers its own agent's proxy only"),
        "{said}"
    );
    assert!(!said.contains("only for step a"), "{said}");
}
