//! Gaps B, C and E: an agent's commands wrote the records troupe and its
//! readers believe, the user's repository and troupe's configuration, and
//! the parent landed what a worker's tree held (links out, nested
//! repositories, a FIFO that hung git). Each is tried for real.

use std::path::Path;
use std::process::Command;

use serde_json::json;

use super::{outputs, running, unprivileged};
use crate::common::{Sandbox, run, spawn_command};
use crate::team::{approving_reviewer, finish_team_run, planner, step, team_command, worker_rule};

const TOKEN: &str = "tok-9e1f2c";

/// The sandbox's workspace as a repository whose config holds a token,
/// with a `troupe.toml` of the user's.
fn users_repository(sandbox: &Sandbox) {
    crate::isolation::repository(sandbox);
    let ws = sandbox.ws();
    let git = |args: &[&str]| {
        assert!(
            Command::new("git")
                .args(args)
                .current_dir(&ws)
                .status()
                .unwrap()
                .success()
        );
    };
    git(&[
        "remote",
        "add",
        "origin",
        &format!("https://user:{TOKEN}@example.invalid/r.git"),
    ]);
    std::fs::write(ws.join("troupe.toml"), "read_scope = \"system\"\n").unwrap();
}

fn repository_closed(as_nobody: bool) {
    if !crate::common::full_sandbox("repository_closed") {
        return;
    }
    let sandbox = Sandbox::new();
    users_repository(&sandbox);
    let config_before = std::fs::read_to_string(sandbox.ws().join(".git/config")).unwrap();
    let commands = [
        "git config core.fsmonitor 'touch /tmp/fsmonitor-ran'",
        "echo 'sandbox = \"off\"' >> troupe.toml",
        "cat .git/config; echo end-of-config",
        "git status --short && echo status-works",
        "mkdir .troupe && echo planted > .troupe/settings",
    ];
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": running(&commands)}]}));
    let command = spawn_command(&sandbox, 1, "plant", &model);
    let command = match as_nobody {
        true => unprivileged(&sandbox, command),
        false => command,
    };
    let out = run(command);
    assert_eq!(out.code, 0, "stderr:\n{}", out.stderr);
    let said = outputs(&sandbox.transcript(1));
    assert!(
        said[0].contains("Read-only file system") || said[0].contains("could not lock"),
        "{}",
        said[0]
    );
    assert!(said[1].contains("Read-only file system"), "{}", said[1]);
    assert!(
        !said[2].contains(TOKEN),
        "the token stays closed: {}",
        said[2]
    );
    assert!(said[3].contains("status-works"), "{}", said[3]);
    let ws = sandbox.ws();
    assert_eq!(
        std::fs::read_to_string(ws.join(".git/config")).unwrap(),
        config_before
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("troupe.toml")).unwrap(),
        "read_scope = \"system\"\n"
    );
    assert!(
        !ws.join(".troupe").exists(),
        "the planted .troupe/ was set aside"
    );
    let aside = sandbox
        .agent_dir(1)
        .join(".subagent/planted/0-.troupe/settings");
    assert_eq!(std::fs::read_to_string(aside).unwrap(), "planted\n");
    assert!(
        out.stderr.contains("never an agent's: moved to"),
        "{}",
        out.stderr
    );
}

// Regression (critical): a worker planted core.fsmonitor in .git/config,
// which ran as the user in troupe's own git calls, and a troupe.toml that
// turned the next run's sandbox off; it read the token in .git/config.
#[test]
fn the_repository_and_troupe_s_configuration_are_closed_to_a_worker() {
    repository_closed(false);
}

#[test]
fn the_repository_and_troupe_s_configuration_are_closed_to_a_worker_as_an_ordinary_user() {
    repository_closed(true);
}

// Regression: a worktree worker read the user's .git/config, token
// included.
#[test]
fn a_worktree_worker_reads_the_repository_but_not_its_config() {
    if !crate::common::full_sandbox("a_worktree_worker_reads_the_repository_but_not_its_config") {
        return;
    }
    let sandbox = Sandbox::new();
    users_repository(&sandbox);
    let look = "cat \"$(git rev-parse --git-common-dir)/config\"; git log --oneline | wc -l; git status --short > /dev/null && echo status-works";
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &[])])),
        worker_rule("a", running(&[look, "echo a > a.txt"])),
        worker_rule("b", running(&["echo b > b.txt"])),
        approving_reviewer(),
    ];
    let command = team_command(&sandbox, rules, &["--isolation", "worktree"]);
    let team = finish_team_run(&sandbox, command);
    assert_eq!(team.run.code, 0, "stderr:\n{}", team.run.stderr);
    let worker =
        crate::common::read_json(&team.dir.join("a/worker-1/.subagent/conversations.json"));
    let said = outputs(&worker);
    assert!(!said[0].contains(TOKEN), "{}", said[0]);
    assert!(said[0].contains("status-works"), "{}", said[0]);
}

// Regression: a link to /etc/shadow, a nested repository (as a gitlink)
// and a troupe.toml landed and were applied; a FIFO in the checkout hung
// troupe's `git add -A` past the run's deadline.
#[test]
fn troupe_lands_no_link_out_no_nested_repository_and_no_configuration() {
    let sandbox = Sandbox::new();
    crate::isolation::repository(&sandbox);
    let plant = "ln -s /etc/shadow shadow-link && echo 'sandbox = \"off\"' > troupe.toml";
    // A nested repository, and one whose `.git` file names a repository
    // outside the workspace: git reads neither, since troupe refuses them
    // before it runs `git add`.
    let nest = "mkfifo pipe && mkdir sub && cd sub && git init -q && git -c user.name=w -c user.email=w@w commit -q --allow-empty -m nested && cd .. && mkdir far && echo 'gitdir: /var/lib/elsewhere' > far/.git";
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &[])])),
        json!({"role": "worker", "step": "a", "attempt": 1, "reply": running(&[plant])}),
        json!({"role": "worker", "step": "a", "attempt": 2, "reply": running(&[nest])}),
        json!({"role": "worker", "step": "a", "attempt": 3, "reply": running(&["echo fine > ok.txt"])}),
        worker_rule("b", running(&["echo b > b.txt"])),
        approving_reviewer(),
    ];
    let command = team_command(
        &sandbox,
        rules,
        &[
            "--isolation",
            "worktree",
            "--sandbox",
            "off",
            "--deadline",
            "60",
        ],
    );
    let team = finish_team_run(&sandbox, command);
    assert_eq!(team.run.code, 0, "stderr:\n{}", team.run.stderr);
    let refused = team.events_of("change_refused");
    assert_eq!(refused.len(), 2, "{refused:?}");
    let reasons = refused[0]["reasons"].to_string();
    assert!(
        reasons.contains("shadow-link is a symbolic link to /etc/shadow"),
        "{reasons}"
    );
    // The worker's troupe.toml never reached the change: troupe set it
    // aside as the worker ended.
    let aside = team.dir.join("a/worker-1/.subagent/planted/0-troupe.toml");
    assert_eq!(
        std::fs::read_to_string(aside).unwrap(),
        "sandbox = \"off\"\n"
    );
    let record = team.record();
    let second = record["steps"][0]["attempts"][1]["change"]["refused"].to_string();
    for named in [
        "pipe is a FIFO",
        "sub/.git is a .git, a nested repository's",
        "far/.git is a .git, a nested repository's",
    ] {
        assert!(second.contains(named), "{named} in {second}");
    }
    let brief = std::fs::read_to_string(team.dir.join("a/review-1/.subagent/task.json")).unwrap();
    assert!(
        brief.contains("troupe will not land this change"),
        "the reviewer was told"
    );
    for absent in ["shadow-link", "troupe.toml", "sub", "far", "pipe"] {
        assert_eq!(
            crate::isolation::on_branch(&team, absent),
            None,
            "{absent} landed"
        );
    }
    assert_eq!(
        crate::isolation::on_branch(&team, "ok.txt").unwrap(),
        "fine\n"
    );
}

// Fourth trial, weakness 5: each link was judged alone, so `d/up -> ..`
// and `out -> d/up/d/up/../../etc/passwd` both looked inside, landed, and
// `apply` wrote into the user's tree a link that reads /etc/passwd. Now a
// change is judged in its own tree, and an apply in the tree it writes
// (two steps' links can lead out only once merged).
#[test]
fn a_chain_of_links_that_leads_out_neither_lands_in_one_change_nor_is_applied_from_two() {
    let sandbox = Sandbox::new();
    crate::isolation::repository(&sandbox);
    let chain = "mkdir -p e && ln -s .. e/up && ln -s e/up/e/up/../../etc/hostname out2";
    let rules = vec![
        planner(json!([
            step("a", &[]),
            step("b", &[]),
            step("c", &["a", "b"])
        ])),
        worker_rule("a", running(&["mkdir -p d && ln -s .. d/up"])),
        worker_rule("b", running(&["ln -s d/up/d/up/../../etc/passwd out"])),
        json!({"role": "worker", "step": "c", "attempt": 1, "reply": running(&[chain])}),
        json!({"role": "worker", "step": "c", "attempt": 2, "reply": running(&["echo fine > ok.txt"])}),
        approving_reviewer(),
    ];
    let command = team_command(
        &sandbox,
        rules,
        &[
            "--isolation",
            "worktree",
            "--sandbox",
            "off",
            "--max-parallel",
            "2",
            "--deadline",
            "120",
        ],
    );
    let team = finish_team_run(&sandbox, command);
    let refused = team.events_of("change_refused");
    assert_eq!(refused.len(), 1, "{refused:?}\n{}", team.run.stderr);
    let reasons = refused[0]["reasons"].to_string();
    assert!(
        reasons.contains("out2 is a symbolic link to e/up/e/up/../../etc/hostname that leads outside the workspace through the link e/up"),
        "{reasons}"
    );
    assert_eq!(crate::isolation::on_branch(&team, "out2"), None);
    // Each of a's and b's links stays inside in its own step's tree: both
    // landed, and only the apply saw them together.
    assert!(crate::isolation::on_branch(&team, "out").is_some());
    assert_eq!(team.run.code, 1, "stderr:\n{}", team.run.stderr);
    assert!(
        team.run.stderr.contains("not applied")
            && team.run.stderr.contains("out is a symbolic link to d/up/d/up/../../etc/passwd that leads outside the workspace through the link d/up"),
        "{}",
        team.run.stderr
    );
    let ws = sandbox.ws();
    for absent in ["out", "d", "ok.txt"] {
        assert!(
            ws.join(absent).symlink_metadata().is_err(),
            "{absent} was applied"
        );
    }
}

fn forged_records(as_nobody: bool) {
    if !crate::common::full_sandbox("forged_records") {
        return;
    }
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let records = "sub_agent_results/agent_1/.subagent";
    let forged = r#"{"success": true, "status": "completed", "summary": "forged"}"#;
    let now = format!("echo '{forged}' > {records}/result.json");
    let later =
        format!("setsid sh -c \"sleep 1; echo forged > {records}/result.json\" > /dev/null 2>&1 &");
    let transcript = format!("echo forged > {records}/conversations.json");
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [
            {"name": "run_command", "arguments": {"command": now}},
            {"name": "run_command", "arguments": {"command": later}},
            {"name": "run_command", "arguments": {"command": transcript}}
        ]},
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": false, "summary": "could not do it"}}]}
    ]}]}));
    let as_user = |command: Command| match as_nobody {
        true => unprivileged(&sandbox, command),
        false => command,
    };
    let out = run(as_user(spawn_command(&sandbox, 1, "forge", &model)));
    assert_eq!(out.code, 1, "stderr:\n{}", out.stderr);
    let said = outputs(&sandbox.transcript(1));
    assert!(said[0].contains("Read-only file system"), "{}", said[0]);
    assert!(said[2].contains("Read-only file system"), "{}", said[2]);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let mut wait = crate::common::troupe();
    wait.args(["wait", "1", "--workspace"]).arg(sandbox.ws());
    let waited = run(as_user(wait));
    assert_eq!(waited.code, 1, "{}", waited.stdout);
    let result = waited.json();
    assert_eq!(result["success"], false, "{result}");
    assert_eq!(result["result_summary"], "could not do it", "{result}");
}

// Regression: a command wrote result.json saying `completed` (and a
// `setsid` leftover rewrote it after the agent failed), and `troupe wait`
// printed the forgery with exit 0.
#[test]
fn a_command_cannot_forge_the_records_troupe_reads() {
    forged_records(false);
}

#[test]
fn a_command_cannot_forge_the_records_troupe_reads_as_an_ordinary_user() {
    forged_records(true);
}

// Regression (critical): a leftover of the last agent in a reused agent
// directory rewrote the next spawn's task.json, and that agent ran the
// attacker's task.
#[test]
fn a_reused_agent_directory_runs_its_own_task() {
    if !crate::common::full_sandbox("a_reused_agent_directory_runs_its_own_task") {
        return;
    }
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let task = "sub_agent_results/agent_1/.subagent/task.json";
    let rewrite = format!(
        "setsid sh -c \"sleep 1; sed -i s/the-second-task/the-attackers-task/ {task}\" > /dev/null 2>&1 &"
    );
    let first =
        sandbox.script(json!({"rules": [{"role": "worker", "reply": running(&[&rewrite])}]}));
    assert_eq!(
        run(spawn_command(&sandbox, 1, "the-first-task", &first)).code,
        0
    );
    let second = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"delay_ms": 2000, "tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "done"}}]}
    ]}]}));
    let out = run(spawn_command(&sandbox, 1, "the-second-task", &second));
    assert_eq!(out.code, 0, "stderr:\n{}", out.stderr);
    let transcript = sandbox.transcript(1).to_string();
    assert!(transcript.contains("the-second-task"), "its own task");
    assert!(!transcript.contains("the-attackers-task"), "{transcript}");
    // The leftover would have struck while the second agent ran.
    let written = std::fs::read_to_string(sandbox.ws().join(task)).unwrap();
    assert!(written.contains("the-second-task"), "{written}");
}

/// `troupe spawn` with files open at descriptors 7 and 8, as a careless
/// caller's shell leaves them.
fn spawn_with_descriptors(sandbox: &Sandbox, model: &str, secret: &Path, log: &Path) -> Command {
    use std::os::fd::IntoRawFd;
    use std::os::unix::process::CommandExt;
    let read = std::fs::File::open(secret).unwrap().into_raw_fd();
    let write = std::fs::OpenOptions::new()
        .append(true)
        .open(log)
        .unwrap()
        .into_raw_fd();
    let mut command = spawn_command(sandbox, 1, "use the descriptors", model);
    // SAFETY: dup2 is async-signal-safe; the descriptors live until exec.
    unsafe {
        command.pre_exec(move || {
            if nix::libc::dup2(read, 7) < 0 || nix::libc::dup2(write, 8) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command
}

// Regression: a command read a file outside through the descriptor 7 its
// caller left open, and appended to another through 8; as root it opened
// owner-only device nodes.
#[test]
fn a_command_gets_no_inherited_descriptor_and_only_the_safe_devices() {
    if !crate::common::full_sandbox(
        "a_command_gets_no_inherited_descriptor_and_only_the_safe_devices",
    ) {
        return;
    }
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let secret = sandbox.root().join("secret.txt");
    let log = sandbox.root().join("log.txt");
    std::fs::write(&secret, "fd-secret-5521\n").unwrap();
    std::fs::write(&log, "").unwrap();
    let commands = ["cat <&7", "echo appended >&8", "ls /dev"];
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": running(&commands)}]}));
    let out = run(spawn_with_descriptors(&sandbox, &model, &secret, &log));
    assert_eq!(out.code, 0, "stderr:\n{}", out.stderr);
    let said = outputs(&sandbox.transcript(1));
    assert!(!said[0].contains("fd-secret-5521"), "{}", said[0]);
    assert!(said[0].contains("Bad file descriptor"), "{}", said[0]);
    assert!(said[1].contains("Bad file descriptor"), "{}", said[1]);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "");
    let listing = said[2].rsplit("--- stdout ---").next().unwrap();
    let mut devices: Vec<&str> = listing.split_whitespace().collect();
    devices.sort_unstable();
    assert_eq!(
        devices,
        [
            "fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout",
            "tty", "urandom", "zero"
        ],
        "{}",
        said[2]
    );
}

// Regression: OSC 52 escapes in a model's tool call reached the terminal
// through troupe's progress lines (and could set the clipboard).
#[test]
fn progress_lines_carry_no_terminal_escape() {
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let escape = "printf 'x' # \u{1b}]52;c;cGF3bmVk\u{7} \u{1b}[2J";
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": running(&[escape])}]}));
    let out = run(spawn_command(&sandbox, 1, "escape", &model));
    assert_eq!(out.code, 0, "stderr:\n{}", out.stderr);
    assert!(out.stderr.contains("run_command"), "{}", out.stderr);
    assert!(
        !out.stderr.contains('\u{1b}') && !out.stderr.contains('\u{7}'),
        "{:?}",
        out.stderr
    );
    assert!(
        out.stderr.contains("\\u{1b}]52"),
        "shown, escaped: {}",
        out.stderr
    );
}

// Regression: a variable given to one MCP server reached every command
// of the agent (and so the model).
#[test]
fn an_mcp_servers_variable_reaches_that_server_only() {
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let config = sandbox.root().join("troupe.toml");
    std::fs::write(
        &config,
        "[mcp_servers.quiet]\ncommand = \"/bin/false\"\nenv = [\"MCP_ONLY_SECRET\"]\n",
    )
    .unwrap();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": running(&["env"])}]}));
    let mut command = spawn_command(&sandbox, 1, "look around", &model);
    command
        .env("TROUPE_CONFIG", &config)
        .env("MCP_ONLY_SECRET", "mcp-secret-3141");
    let out = run(command);
    assert_eq!(out.code, 0, "stderr:\n{}", out.stderr);
    let said = outputs(&sandbox.transcript(1));
    assert!(said[0].contains("PATH="), "{}", said[0]);
    assert!(!said[0].contains("mcp-secret-3141"), "{}", said[0]);
}

// Regression (the fourth adversarial trial): an agent's commands were
// given troupe's pid on the host in TROUPE_PARENT_PID.
#[test]
fn an_agents_commands_are_not_given_troupes_pid() {
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": running(&["env"])}]}));
    let out = run(spawn_command(&sandbox, 1, "look around", &model));
    assert_eq!(out.code, 0, "stderr:\n{}", out.stderr);
    let said = outputs(&sandbox.transcript(1));
    assert!(said[0].contains("PATH="), "{}", said[0]);
    assert!(!said[0].contains("TROUPE_PARENT_PID"), "{}", said[0]);
}

// Regression: a million files in an agent's directory took the parent to
// 265 MB and run.json to 27 MB: every name was listed, everywhere.
#[test]
fn troupe_lists_a_bounded_number_of_an_agents_files() {
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let many = "cd sub_agent_results/agent_1 && mkdir many && cd many && seq 5000 | xargs touch";
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": running(&[many])}]}));
    let out = run(spawn_command(&sandbox, 1, "make many files", &model));
    assert_eq!(out.code, 0, "stderr:\n{}", out.stderr);
    let listed = out.json()["deliverables_files"].as_array().unwrap().len();
    assert_eq!(listed, 1000, "at most 1,000 names");
    let kept = std::fs::metadata(sandbox.agent_dir(1).join(".subagent/result.json")).unwrap();
    assert!(kept.len() < 200_000, "result.json is {} bytes", kept.len());
}

// Regression (critical): a core.fsmonitor in the repository's config ran
// as the user, with OPENAI_API_KEY in its environment, in troupe's own git
// calls.
#[test]
fn troupe_s_own_git_calls_run_no_configured_program_and_carry_no_key() {
    let sandbox = Sandbox::new();
    crate::isolation::repository(&sandbox);
    let dump = sandbox.root().join("fsmonitor-ran.txt");
    let hook = sandbox.executable("fsmonitor", &format!("env > {}", dump.display()));
    let config = sandbox.ws().join(".git/config");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!("[core]\n\tfsmonitor = {}\n", hook.display()));
    std::fs::write(&config, text).unwrap();
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &[])])),
        worker_rule("a", running(&["echo a > a.txt"])),
        worker_rule("b", running(&["echo b > b.txt"])),
        approving_reviewer(),
    ];
    let mut command = team_command(&sandbox, rules, &["--isolation", "worktree", "--apply"]);
    command.env("OPENAI_API_KEY", "sk-git-must-not-see-this");
    let team = finish_team_run(&sandbox, command);
    assert_eq!(team.run.code, 0, "stderr:\n{}", team.run.stderr);
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("a.txt")).unwrap(),
        "a\n"
    );
    assert!(!dump.exists(), "the configured fsmonitor never ran");
}

// Regression: a kept checkout of a failed step ran the worker's fsmonitor
// when the user typed `git status` in it: its `.git` link was the worker's.
#[test]
fn a_kept_checkout_links_to_troupe_s_git_directory() {
    let sandbox = Sandbox::new();
    crate::isolation::repository(&sandbox);
    let relink = "printf 'gitdir: /tmp/planted-gitdir\\n' > .git";
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &[])])),
        json!({"role": "worker", "step": "a", "reply": [
            {"tool_calls": [{"name": "run_command", "arguments": {"command": relink}}]},
            {"tool_calls": [{"name": "finish_task", "arguments": {"success": false, "summary": "gave up"}}]}
        ]}),
        worker_rule("b", running(&["echo b > b.txt"])),
        approving_reviewer(),
    ];
    // Without the sandbox the worker can rewrite the link; troupe writes
    // it again all the same.
    let command = team_command(
        &sandbox,
        rules,
        &[
            "--isolation",
            "worktree",
            "--sandbox",
            "off",
            "--max-replans",
            "0",
        ],
    );
    let team = finish_team_run(&sandbox, command);
    assert_eq!(team.run.code, 1, "stderr:\n{}", team.run.stderr);
    let link = std::fs::read_to_string(team.dir.join("a/checkout-1/.git")).unwrap();
    let own = team.dir.join("a/checkout-1.git");
    assert_eq!(link, format!("gitdir: {}\n", own.display()));
}

/// A worker that leaves four sparse files of 1 GiB, then one that does
/// not; in copy-on-write checkouts (sandboxed) or full ones.
fn sparse_files_refused(sandbox_off: bool) {
    let sandbox = Sandbox::new();
    crate::isolation::repository(&sandbox);
    let rules = vec![
        planner(json!([step("a", &[])])),
        json!({"role": "worker", "step": "a", "attempt": 1, "reply": running(&["truncate -s 1G big1 big2 big3 big4"])}),
        worker_rule("a", running(&["echo fine > ok.txt"])),
        approving_reviewer(),
    ];
    let mut extra = vec!["--isolation", "worktree", "--deadline", "120"];
    if sandbox_off {
        extra.extend(["--sandbox", "off"]);
    }
    let team = finish_team_run(&sandbox, team_command(&sandbox, rules, &extra));
    assert_eq!(team.run.code, 0, "stderr:\n{}", team.run.stderr);
    let refused = team.events_of("change_refused");
    assert_eq!(refused.len(), 1, "{refused:?}");
    let reasons = refused[0]["reasons"].to_string();
    for big in ["big1", "big4"] {
        assert!(
            reasons.contains(&format!("{big} is a sparse file of 1073741824 bytes")),
            "{reasons}"
        );
    }
    assert_eq!(crate::isolation::on_branch(&team, "big1"), None);
    assert!(crate::isolation::on_branch(&team, "ok.txt").is_some());
}

// Fourth trial, weakness 3: four sparse files of 1 GiB cost 24-33 s of
// hashing before anything could refuse them, past the run's deadline.
#[test]
fn sparse_files_are_refused_before_troupe_reads_them() {
    sparse_files_refused(false);
}

#[test]
fn sparse_files_are_refused_before_git_reads_them_in_a_full_checkout() {
    sparse_files_refused(true);
}
