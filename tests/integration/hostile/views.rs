//! Fourth trial, weakness 5: an agent's view started from the host's
//! root, so an isolated worker whose run's workspace lay under a system
//! directory (`/var/lib`, which the `system` read scope opens) read the
//! ignored `.env` and `secrets/` its checkout leaves out, and the run's
//! records; under `/tmp`, whose scratch rule covers all it holds, it
//! listed the run's records and read a parallel step's writes in
//! progress. An agent in a checkout now has the run's workspace masked,
//! with only its own paths put back.

use std::path::Path;

use serde_json::json;

use super::{outputs, unprivileged};
use crate::common::{Sandbox, read_json};
use crate::isolation::{git, repository, runs};
use crate::team::{approving_reviewer, finish_team_run, planner, step, team_command, worker_rule};

/// What the prying worker prints when it reads what it should not.
const SECRETS: [&str; 3] = ["SECRET-ENV", "SECRET-KEY", "B-IN-PROGRESS"];

fn run_workspace_out_of_view(sandbox: Sandbox, as_nobody: bool) {
    repository(&sandbox);
    let ws = sandbox.ws();
    std::fs::write(ws.join(".gitignore"), ".env\nsecrets/\n").unwrap();
    git(&ws, &["add", ".gitignore"]);
    git(&ws, &["commit", "-q", "-m", "ignore"]);
    std::fs::write(ws.join(".env"), "SECRET-ENV\n").unwrap();
    std::fs::create_dir_all(ws.join("secrets")).unwrap();
    std::fs::write(ws.join("secrets/key"), "SECRET-KEY\n").unwrap();
    let w = ws.display();
    let pry = format!(
        "cat {w}/.env {w}/secrets/key; ls -a {w} ../..; cat ../../b/upper-1/b.txt ../../b/checkout-1/b.txt; echo done"
    );
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &[])])),
        worker_rule("a", runs(&pry, 700)),
        worker_rule(
            "b",
            vec![
                json!({"tool_calls": [{"name": "write_file", "arguments": {"path": "b.txt", "content": "B-IN-PROGRESS"}}]}),
                json!({"delay_ms": 2500, "tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "wrote b.txt"}}]}),
            ],
        ),
        approving_reviewer(),
    ];
    let command = team_command(
        &sandbox,
        rules,
        &[
            "--isolation",
            "worktree",
            "--max-parallel",
            "2",
            "--no-apply",
        ],
    );
    let command = match as_nobody {
        true => unprivileged(&sandbox, command),
        false => command,
    };
    let team = finish_team_run(&sandbox, command);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let transcript = read_json(&team.dir.join("a/worker-1/.subagent/conversations.json"));
    let said = outputs(&transcript).join("\n");
    assert!(said.contains("done"), "{said}");
    for secret in SECRETS {
        assert!(!said.contains(secret), "{secret} read:\n{said}");
    }
    // The way to its own checkout is there, and nothing beside it.
    for listed in ["f.txt", ".gitignore", "events.jsonl", "run.json"] {
        assert!(!said.contains(listed), "{listed} listed:\n{said}");
    }
    let attempt = &team.step("a")["attempts"][0]["worker"]["stats"]["sandbox"];
    assert_eq!(attempt["status"], "fully_enforced", "{attempt}");
}

#[test]
fn a_checkout_s_worker_sees_nothing_else_of_a_workspace_under_tmp() {
    run_workspace_out_of_view(Sandbox::new(), false);
}

#[test]
fn a_checkout_s_worker_sees_nothing_else_of_a_workspace_under_tmp_as_an_ordinary_user() {
    run_workspace_out_of_view(Sandbox::new(), true);
}

/// A sandbox under `/var/lib`, or a skip where it cannot be made.
fn under_var_lib() -> Option<Sandbox> {
    let sandbox = Sandbox::inside(Path::new("/var/lib"));
    if sandbox.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI runs as root, which may write /var/lib"
        );
        eprintln!("skipped: this user cannot make a directory in /var/lib");
    }
    sandbox
}

#[test]
fn a_checkout_s_worker_sees_nothing_else_of_a_workspace_under_a_system_directory() {
    if let Some(sandbox) = under_var_lib() {
        run_workspace_out_of_view(sandbox, false);
    }
}

#[test]
fn a_checkout_s_worker_sees_nothing_else_of_a_workspace_under_a_system_directory_as_an_ordinary_user()
 {
    if let Some(sandbox) = under_var_lib() {
        run_workspace_out_of_view(sandbox, true);
    }
}

// Fourth trial, weakness 5: a pathname Unix socket outside the masked
// directories was reachable (Landlock does not govern `connect`). Every
// top-level directory no read scope but `all` opens is now empty in the
// view. A directory at the top of the tree only root can make.
#[test]
fn a_socket_in_a_top_level_directory_is_out_of_view() {
    if !super::is_root() || !crate::common::full_sandbox("top-level socket") {
        return;
    }
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let top = tempfile::Builder::new()
        .prefix("troupe-top-")
        .tempdir_in("/")
        .unwrap();
    let path = top.path().join("s.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    // Open to every user, as a service's socket meant for all is.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
    let reach = format!(
        "ls {top}; (printf x | nc -U {sock} || python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{sock}'); print('connected')\") 2>&1",
        top = top.path().display(),
        sock = path.display()
    );
    let model =
        sandbox.script(json!({"rules": [{"role": "worker", "reply": super::running(&[&reach])}]}));
    let out = crate::common::run(crate::common::spawn_command(&sandbox, 1, "reach", &model));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let said = outputs(&sandbox.transcript(1)).join("\n");
    assert!(
        !said.contains("connected") && !said.contains("s.sock"),
        "{said}"
    );
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the agent reached the socket"
    );
}
