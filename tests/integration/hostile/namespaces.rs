//! Gap A, a command in the same world as troupe: it signalled troupe and
//! other agents, saw every process's command line, left `setsid`
//! processes behind that changed a checkout after it was committed, kept
//! a SysV segment past the run, and reached the host's sockets. Each agent
//! now has namespaces of its own; these try it, as root and as `nobody`.

use std::path::Path;
use std::process::{Child, Command};

use serde_json::json;

use super::{is_root, outputs, running, unprivileged};
use crate::common::{Sandbox, processes_with, run, spawn_command};
use crate::team::{finish_team_run, planner, step, team_command, worker_rule};

/// A process of the user troupe runs as (`nobody` for `as_nobody`) that
/// a command would like to stop: troupe itself, or another run's agent.
/// Its command line holds a secret.
struct Victim {
    child: Child,
}

const ARGV_SECRET: &str = "argv-secret-7731";

impl Victim {
    fn start(as_nobody: bool) -> Victim {
        let mut command = match as_nobody && is_root() {
            true => {
                let mut setpriv = Command::new("setpriv");
                setpriv.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
                setpriv.arg("sh");
                setpriv
            }
            false => Command::new("sh"),
        };
        // A group of its own, so that its `sleep` dies with it.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        command.args(["-c", "sleep 600", ARGV_SECRET]);
        Victim {
            child: command.spawn().unwrap(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its state letter: `S` sleeping, `T` stopped.
    fn state(&self) -> char {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        stat[stat.rfind(')').unwrap() + 2..].chars().next().unwrap()
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let group = format!("-{}", self.pid());
        let _ = Command::new("kill").args(["-9", "--", &group]).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn as_user(sandbox: &Sandbox, command: Command, as_nobody: bool) -> Command {
    match as_nobody {
        true => unprivileged(sandbox, command),
        false => command,
    }
}

/// `commands` run by agent 1, as root or as `nobody`; their outputs.
fn attack(sandbox: &Sandbox, commands: &[&str], extra: &[&str], as_nobody: bool) -> Vec<String> {
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": running(commands)}]}));
    let mut command = spawn_command(sandbox, 1, "attack", &model);
    command.args(extra);
    let out = run(as_user(sandbox, command, as_nobody));
    assert_eq!(out.code, 0, "the agent lived to finish: {}", out.stderr);
    outputs(&sandbox.transcript(1))
}

fn signals_and_sights(as_nobody: bool) {
    if !crate::common::full_sandbox("signals_and_sights") {
        return;
    }
    let victim = Victim::start(as_nobody);
    let pid = victim.pid();
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let stop = format!("kill -STOP {pid}");
    let kill = format!("kill -9 {pid}");
    let commands = [
        stop.as_str(),
        kill.as_str(),
        "cat /proc/*/cmdline | tr '\\0' ' '",
        "ls /proc | grep -c '^[0-9]'",
    ];
    let out = attack(&sandbox, &commands, &[], as_nobody);
    assert!(out[0].contains("No such process"), "{}", out[0]);
    assert!(out[1].contains("No such process"), "{}", out[1]);
    assert_eq!(victim.state(), 'S', "the victim neither stopped nor died");
    assert!(!out[2].contains(ARGV_SECRET), "{}", out[2]);
    let seen: u32 = out[3]
        .rsplit("--- stdout ---")
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        seen < 10,
        "the agent sees only its own processes: {}",
        out[3]
    );

    // Every process it may signal: in its namespace, its own agent and
    // commands. The agent dies of it; troupe and the victim do not.
    let model =
        sandbox.script(json!({"rules": [{"role": "worker", "reply": running(&["kill -9 -1"])}]}));
    let command = spawn_command(&sandbox, 2, "kill everything", &model);
    let out = run(as_user(&sandbox, command, as_nobody));
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert_eq!(out.json()["status"], "error", "{}", out.stdout);
    assert_eq!(victim.state(), 'S', "the victim lives on");
}

// Regression: a command stopped or killed troupe (the run then hung past
// its deadline, or died with run.json `running`) and other agents, and read
// a sibling's secret from /proc/PID/cmdline.
#[test]
fn a_command_can_neither_signal_nor_see_a_process_outside_its_agent() {
    signals_and_sights(false);
}

#[test]
fn a_command_can_neither_signal_nor_see_a_process_outside_its_agent_as_an_ordinary_user() {
    signals_and_sights(true);
}

fn leftovers(as_nobody: bool) {
    if !crate::common::full_sandbox("leftovers")
        || !crate::common::present(
            "leftovers",
            "util-linux's ipcmk",
            crate::common::on_path("ipcmk"),
        )
    {
        return;
    }
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let commands = [
        "setsid sleep 304.1 > /dev/null 2>&1 &",
        "(setsid sh -c 'sleep 304.2' > /dev/null 2>&1 &)",
        "nohup sleep 304.3 > /dev/null 2>&1 &",
        "ipcmk -M 7654321",
    ];
    let out = attack(&sandbox, &commands, &[], as_nobody);
    assert!(out[3].contains("Shared memory id"), "{}", out[3]);
    for marker in ["sleep 304.1", "sleep 304.2", "sleep 304.3"] {
        assert_eq!(
            processes_with(marker),
            Vec::<i32>::new(),
            "`{marker}` outlived its agent"
        );
    }
    let segments = Command::new("ipcs").arg("-m").output().unwrap();
    let segments = String::from_utf8_lossy(&segments.stdout);
    assert!(
        !segments.contains("7654321"),
        "the segment outlived the run:\n{segments}"
    );
}

// Regression: `setsid` children went on writing 5 s after `troupe spawn`
// ended, and a 256 MiB SysV segment outlived the run.
#[test]
fn what_a_command_leaves_behind_dies_with_its_agent() {
    leftovers(false);
}

#[test]
fn what_a_command_leaves_behind_dies_with_its_agent_as_an_ordinary_user() {
    leftovers(true);
}

// Regression (critical): a worker's `setsid` leftover changed the checkout
// after troupe had committed it, so the reviewer read BENIGN and approved
// while the landed file said MALICIOUS.
#[test]
fn a_leftover_cannot_change_a_checkout_after_it_is_committed() {
    if !crate::common::full_sandbox("a_leftover_cannot_change_a_checkout_after_it_is_committed") {
        return;
    }
    let sandbox = Sandbox::new();
    crate::isolation::repository(&sandbox);
    let late =
        "echo BENIGN > f.txt; setsid sh -c 'sleep 1; echo MALICIOUS > f.txt' > /dev/null 2>&1 &";
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &[])])),
        worker_rule("a", running(&[late])),
        worker_rule("b", running(&["echo b > b.txt"])),
        json!({"role": "reviewer", "reply": [
            {"delay_ms": 2500, "tool_calls": [{"name": "read_file", "arguments": {"path": "f.txt"}}]},
            {"content": "{\"approved\": true, \"summary\": \"reads BENIGN\"}"}
        ]}),
    ];
    let command = team_command(
        &sandbox,
        rules,
        &["--isolation", "worktree", "--max-replans", "0"],
    );
    let team = finish_team_run(&sandbox, command);
    assert_eq!(team.run.code, 0, "stderr:\n{}", team.run.stderr);
    let landed = crate::isolation::on_branch(&team, "f.txt").unwrap();
    assert_eq!(landed, "BENIGN\n");
}

/// A socket of each kind on the host, for commands to reach for.
struct Listeners {
    tcp: std::net::TcpListener,
    udp: std::net::UdpSocket,
    abstract_name: String,
    _abstract: std::os::unix::net::UnixListener,
    path: std::path::PathBuf,
    unix: std::os::unix::net::UnixListener,
}

impl Listeners {
    fn open(dir: &Path) -> Listeners {
        use std::os::linux::net::SocketAddrExt;
        let abstract_name = format!("troupe-test-{}", std::process::id());
        let address = std::os::unix::net::SocketAddr::from_abstract_name(&abstract_name).unwrap();
        let path = dir.join("host.sock");
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        tcp.set_nonblocking(true).unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.set_nonblocking(true).unwrap();
        let unix = std::os::unix::net::UnixListener::bind(&path).unwrap();
        unix.set_nonblocking(true).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711)).unwrap();
        Listeners {
            tcp,
            udp,
            _abstract: std::os::unix::net::UnixListener::bind_addr(&address).unwrap(),
            abstract_name,
            path,
            unix,
        }
    }

    /// Whether anything reached one of them.
    fn reached(&self) -> Vec<&'static str> {
        let mut reached = Vec::new();
        if self.tcp.accept().is_ok() {
            reached.push("tcp");
        }
        let mut buf = [0u8; 64];
        if self.udp.recv_from(&mut buf).is_ok() {
            reached.push("udp");
        }
        if self.unix.accept().is_ok() {
            reached.push("unix");
        }
        reached
    }
}

/// Python that tries one way out and prints `OUT` if it got there.
fn python(body: &str) -> String {
    format!("python3 -c '{body}' && echo OUT")
}

fn sockets(as_nobody: bool) {
    let test = "sockets";
    if !crate::common::full_sandbox(test)
        || !crate::common::present(test, "python3", Path::new("/usr/bin/python3").exists())
        || !crate::common::present(test, "iproute2's ss", crate::common::on_path("ss"))
    {
        return;
    }
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let dir = sandbox.root().join("run-like");
    std::fs::create_dir_all(&dir).unwrap();
    let host = Listeners::open(&dir);
    let tcp = host.tcp.local_addr().unwrap().port();
    let udp = host.udp.local_addr().unwrap().port();
    let inet = "import socket as s";
    let commands = [
        python(&format!(
            "{inet}; c=s.socket(); c.connect((\"127.0.0.1\", {tcp}))"
        )),
        python(&format!(
            "{inet}; c=s.socket(); c.sendto(b\"x\", s.MSG_FASTOPEN, (\"127.0.0.1\", {tcp}))"
        )),
        python(&format!(
            "{inet}; c=s.socket(s.AF_INET, s.SOCK_STREAM, 262); c.connect((\"127.0.0.1\", {tcp}))"
        )),
        python(&format!(
            "{inet}; c=s.socket(s.AF_INET, s.SOCK_DGRAM); c.sendto(b\"x\", (\"127.0.0.1\", {udp}))"
        )),
        python(&format!(
            "{inet}; c=s.socket(s.AF_UNIX); c.connect(\"\\0{}\")",
            host.abstract_name
        )),
        python(&format!(
            "{inet}; c=s.socket(s.AF_UNIX); c.connect(\"{}\")",
            host.path.display()
        )),
        format!("ss -tlnH | grep -c ':{tcp} ' || true"),
        python(&format!(
            "{inet}; c=s.socket(); c.bind((\"127.0.0.1\", 0)); c.listen(); d=s.create_connection(c.getsockname()); print(\"loopback\")"
        )),
    ];
    let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
    let out = attack(&sandbox, &commands, &[], as_nobody);
    // A datagram is sent, to the agent's own loopback: whether it left is
    // the host's to say, below.
    for (i, what) in out.iter().take(6).enumerate().filter(|(i, _)| *i != 3) {
        assert!(!what.contains("OUT"), "way out {i} was open: {what}");
    }
    assert!(
        out[6].trim_end().ends_with('0'),
        "the host's listener is not in sight: {}",
        out[6]
    );
    assert!(
        out[7].contains("loopback"),
        "the agent's own loopback works: {}",
        out[7]
    );
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(host.reached(), Vec::<&str>::new());
}

// Regression: TCP Fast Open and MPTCP passed Landlock's TCP rule, UDP and
// abstract and pathname Unix sockets worked (a worker got a credential
// from the host's munged), and netlink listed the host's sockets.
#[test]
fn no_socket_leaves_the_agent() {
    sockets(false);
}

#[test]
fn no_socket_leaves_the_agent_as_an_ordinary_user() {
    sockets(true);
}

fn bounds(as_nobody: bool) {
    if !crate::common::full_sandbox("bounds")
        || !crate::common::present("bounds", "python3", Path::new("/usr/bin/python3").exists())
    {
        return;
    }
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    // Forks until it cannot, then kills what it started: the next
    // command needs processes of its own.
    let fork_bomb = "python3 -c 'import os, time\nkids = []\ntry:\n    while len(kids) < 3000:\n        pid = os.fork()\n        if pid == 0:\n            time.sleep(30.5)\n            os._exit(0)\n        kids.append(pid)\nexcept OSError as e:\n    print(\"fork failed:\", e)\nfor pid in kids:\n    os.kill(pid, 9)\n    os.waitpid(pid, 0)\nraise SystemExit(len(kids) >= 3000 or 1)'";
    let commands = [
        fork_bomb,
        "echo cleared",
        "python3 -c 'x = bytearray(400 << 20); print(len(x))'",
        "echo still here",
    ];
    let out = attack(
        &sandbox,
        &commands,
        &["--max-processes", "50", "--max-memory", "128M"],
        as_nobody,
    );
    assert!(out[0].contains("--max-processes"), "{}", out[0]);
    assert!(out[2].contains("--max-memory"), "{}", out[2]);
    assert!(out[3].contains("still here"), "{}", out[3]);
    assert_eq!(processes_with("sleep 30.5"), Vec::<i32>::new());
}

// Regression: one command started 3,000 processes and another allocated
// 2 GB, bounded by nothing but the machine's OOM killer.
#[test]
fn an_agent_is_bounded_and_told_which_bound_it_hit() {
    bounds(false);
}

#[test]
fn an_agent_is_bounded_and_told_which_bound_it_hit_as_an_ordinary_user() {
    bounds(true);
}

// Fourth trial, weakness 4: with --max-memory 128M an ordinary user's
// command held 800 MB, part of it in /tmp, /var/tmp and /dev/shm, each a
// tmpfs of 128M of its own. They are one now, sized once. (As root the
// agent's control group counts those pages with the rest; this is the
// bound where none can be had.)
#[test]
fn the_scratch_places_share_one_bound_as_an_ordinary_user() {
    if !crate::common::full_sandbox("scratch") {
        return;
    }
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let fill = "for d in /tmp /var/tmp /dev/shm; do dd if=/dev/zero of=$d/fill bs=1M count=50 2>&1 | grep -E 'copied|No space'; done; df -k /tmp /var/tmp /dev/shm";
    let out = attack(&sandbox, &[fill], &["--max-memory", "128M"], true);
    assert!(out[0].contains("No space left on device"), "{}", out[0]);
    assert_eq!(out[0].matches("52428800 bytes").count(), 2, "{}", out[0]);
    // The record says what the bound counted, and what it did not.
    let limits = &crate::common::read_json(&sandbox.agent_dir(1).join(".subagent/result.json"))["stats"]
        ["sandbox"]["limits"];
    let counts = limits["counts"].as_str().unwrap_or_default();
    match limits["by"].as_str() {
        Some("rlimit") => assert!(
            counts.contains("not the sum over the agent's processes"),
            "{limits}"
        ),
        _ => assert!(
            counts.contains("all the agent's memory together"),
            "{limits}"
        ),
    }
}

#[test]
fn the_probe_reports_every_layer() {
    let probe = |as_nobody: bool| {
        let sandbox = Sandbox::new();
        let scratch = sandbox.root().join("tmp");
        std::fs::create_dir_all(&scratch).unwrap();
        let mut command = crate::common::troupe_agent();
        command.arg("--probe-sandbox").env("TMPDIR", &scratch);
        let out = run(as_user(&sandbox, command, as_nobody));
        assert_eq!(out.code, 0, "{}", out.stderr);
        // Its scratch directory goes with it, the overlay's work
        // directory (mode 0, made by the kernel) included.
        let left: Vec<_> = std::fs::read_dir(&scratch).unwrap().collect();
        assert!(
            left.is_empty(),
            "the probe left {left:?} (nobody: {as_nobody})"
        );
        serde_json::from_str::<serde_json::Value>(out.stdout.trim()).unwrap()
    };
    let report = probe(false);
    if report["status"] != "fully_enforced" {
        crate::common::present("the_probe_reports_every_layer", "the whole sandbox", false);
        return;
    }
    for layer in [
        "network_denied",
        "results_read_only",
        "records_read_only",
        "repository_read_only",
        "host_sockets_masked",
        "seccomp",
        "scoped",
    ] {
        assert_eq!(report[layer], true, "{layer}: {report}");
    }
    let names: Vec<&str> = report["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["user", "mount", "pid", "network", "ipc"],
        "{report}"
    );
    assert_eq!(report["limits"]["processes"], 512);
    assert_eq!(report["limits"]["memory"], 4u64 << 30);
    if is_root() {
        assert_eq!(report["uid"], 2_000_000_000, "{report}");
        let ordinary = probe(true);
        assert_eq!(ordinary["status"], "fully_enforced", "{ordinary}");
        assert_eq!(ordinary["limits"]["by"], "rlimit", "{ordinary}");
        assert!(ordinary.get("uid").is_none(), "{ordinary}");
    }
}

// Where the kernel will not make the namespaces (here: a user namespace
// whose max_user_namespaces is 0, troupe in it without capabilities, as a
// container would have it), the agent falls back to Landlock's scopes,
// the socket filter and resource limits, and the report says what is
// missing.
#[test]
fn without_namespaces_the_fallback_holds_the_network_and_says_what_is_missing() {
    let test = "without_namespaces_the_fallback_holds_the_network_and_says_what_is_missing";
    if !crate::common::present(test, "root, to make the user namespace", is_root())
        || !crate::common::full_sandbox(test)
        || !crate::common::present(test, "python3", Path::new("/usr/bin/python3").exists())
    {
        return;
    }
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tcp.local_addr().unwrap().port();
    let commands = [
        format!(
            "python3 -c 'import socket as s; c=s.socket(); c.connect((\"127.0.0.1\", {port}))' && echo OUT"
        ),
        "python3 -c 'import socket as s; s.socket(s.AF_INET, s.SOCK_DGRAM)' && echo OUT"
            .to_string(),
    ];
    let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": running(&commands)}]}));
    let spawn = spawn_command(&sandbox, 1, "without namespaces", &model);
    let mut words = vec![spawn.get_program().to_string_lossy().into_owned()];
    words.extend(spawn.get_args().map(|a| a.to_string_lossy().into_owned()));
    let mut command = Command::new("unshare");
    command.args(["-U", "-r", "sh", "-c"]).arg(
        "echo 0 > /proc/sys/user/max_user_namespaces && exec setpriv --inh-caps=-all --bounding-set=-all \"$@\"",
    );
    command
        .arg("sh")
        .args(&words)
        .env("TROUPE_CONFIG", "")
        .env("NO_COLOR", "1");
    let out = run(command);
    assert_eq!(out.code, 0, "stderr:\n{}", out.stderr);
    let report = &out.json()["stats"]["sandbox"];
    assert_eq!(report["status"], "partially_enforced", "{report}");
    assert!(report.get("namespaces").is_none(), "{report}");
    assert_eq!(report["network_denied"], true, "{report}");
    assert_eq!(report["scoped"], true, "{report}");
    assert_eq!(report["seccomp"], true, "{report}");
    let note = report["note"].as_str().unwrap();
    assert!(note.contains("no namespaces of its own"), "{note}");
    let said = outputs(&sandbox.transcript(1));
    // No socket but a Unix one is made at all (seccomp); Landlock's TCP
    // rule stands behind it.
    for refused in &said[..2] {
        assert!(!refused.contains("OUT"), "{refused}");
        assert!(
            refused.contains("Address family not supported"),
            "{refused}"
        );
    }
    tcp.set_nonblocking(true).unwrap();
    assert!(tcp.accept().is_err(), "nothing reached the host");
}
