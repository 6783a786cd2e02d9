//! Helpers for the integration tests: temporary workspaces, running the
//! real binaries with a bound that catches hangs, scripted-model files,
//! and process checks.

pub mod llama;
pub mod mock_model;
pub mod otlp;
pub mod rate_limited;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Any single troupe invocation in these tests ends well within this; a
/// run that does not is a hang.
pub const HANG_BOUND: Duration = Duration::from_secs(120);

/// A temporary directory holding the workspace (`ws/`) and anything a test
/// wants beside it.
pub struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Self {
        Sandbox {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    /// A sandbox in `dir` (a system directory the read scope opens),
    /// `None` where this user may not make one there.
    pub fn inside(dir: &Path) -> Option<Self> {
        tempfile::tempdir_in(dir).ok().map(|dir| Sandbox { dir })
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn ws(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    /// Writes `value` as a scripted-model file and returns `scripted:PATH`.
    pub fn script(&self, value: Value) -> String {
        let path = self.dir.path().join("script.json");
        std::fs::write(&path, serde_json::to_vec_pretty(&value).unwrap()).unwrap();
        format!("scripted:{}", path.display())
    }

    pub fn agent_dir(&self, id: u32) -> PathBuf {
        self.ws().join(format!("sub_agent_results/agent_{id}"))
    }

    pub fn transcript(&self, id: u32) -> Value {
        read_json(&self.agent_dir(id).join(".subagent/conversations.json"))
    }

    /// An executable shell script in the sandbox, for fake children.
    pub fn executable(&self, name: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = self.dir.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }
}

pub fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}\n{text}", path.display()))
}

/// What one run of a binary left.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Run {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

pub fn troupe() -> Command {
    binary(env!("CARGO_BIN_EXE_troupe"))
}

pub fn troupe_agent() -> Command {
    binary(env!("CARGO_BIN_EXE_troupe-agent"))
}

/// `sh -e -c script`, with troupe and troupe-agent first on its PATH and
/// the environment a troupe of these tests gets.
pub fn shell(script: &str) -> Command {
    let bin = Path::new(env!("CARGO_BIN_EXE_troupe")).parent().unwrap();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::iter::once(bin.to_path_buf()).chain(std::env::split_paths(&path));
    let mut command = binary("sh");
    command
        .args(["-e", "-c", script])
        .env("PATH", std::env::join_paths(dirs).unwrap());
    command
}

fn binary(path: &str) -> Command {
    let mut command = Command::new(path);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("TROUPE_") {
            command.env_remove(name);
        }
    }
    command
        .env("NO_COLOR", "1")
        .env("TROUPE_CONFIG", "")
        .env_remove("OPENAI_API_KEY");
    command
}

/// Runs `command` to the end, killing it (and failing the test) if it
/// takes longer than `HANG_BOUND`.
pub fn run(mut command: Command) -> Run {
    let started = Instant::now();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the binary");
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap_or_default());
    let err = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Run {
                code: status.code().unwrap_or(-1),
                stdout: out.join().unwrap(),
                stderr: err.join().unwrap(),
                elapsed: started.elapsed(),
            };
        }
        if started.elapsed() > HANG_BOUND {
            let _ = child.kill();
            panic!("{command:?} did not finish within {HANG_BOUND:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `troupe ARGS --workspace <the sandbox's>`, run to the end.
pub fn cli(sandbox: &Sandbox, args: &[&str]) -> Run {
    let mut command = troupe();
    command.args(args).arg("--workspace").arg(sandbox.ws());
    run(command)
}

/// `troupe spawn` for agent `id` in the sandbox's workspace, ready for
/// more arguments or environment.
pub fn spawn_command(sandbox: &Sandbox, id: u32, task: &str, model: &str) -> Command {
    let mut command = troupe();
    command
        .args([
            "spawn",
            "--id",
            &id.to_string(),
            "--summary",
            "a test task",
            "--task",
            task,
        ])
        .arg("--workspace")
        .arg(sandbox.ws())
        .args(["--model", model]);
    command
}

/// `troupe spawn` for agent `id` in the sandbox's workspace, with `extra`
/// arguments appended, run to the end.
pub fn spawn(sandbox: &Sandbox, id: u32, task: &str, model: &str, extra: &[&str]) -> Run {
    let mut command = spawn_command(sandbox, id, task, model);
    command.args(extra);
    run(command)
}

/// Whether `pid` is a live process (a zombie counts as dead).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let after = &stat[stat.rfind(')').unwrap() + 1..];
            !after.trim_start().starts_with('Z')
        }
        Err(_) => false,
    }
}

/// The pid a test command wrote to `path`.
pub fn read_pid(path: &Path) -> i32 {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("no pid file {}: {e}", path.display()));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("bad pid in {}: {e}", path.display()))
}

/// The messages of a transcript with the given role.
pub fn messages_with_role<'a>(transcript: &'a Value, role: &str) -> Vec<&'a Value> {
    transcript["messages"]
        .as_array()
        .expect("messages array")
        .iter()
        .filter(|m| m["role"] == role)
        .collect()
}

/// The parsed JSON of every tool message, in order.
pub fn tool_results(transcript: &Value) -> Vec<Value> {
    messages_with_role(transcript, "tool")
        .into_iter()
        .map(|m| {
            serde_json::from_str(m["content"].as_str().unwrap()).expect("tool content is JSON")
        })
        .collect()
}

/// The names of every tool the transcript's assistant messages called, in
/// order.
pub fn tool_call_names(transcript: &Value) -> Vec<String> {
    transcript["messages"]
        .as_array()
        .expect("messages array")
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().into_iter().flatten())
        .map(|c| c["function"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// Pids of live processes whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid as u32 != std::process::id())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|raw| {
                    String::from_utf8_lossy(&raw)
                        .replace('\0', " ")
                        .contains(marker)
                })
                .unwrap_or(false)
        })
        .filter(|pid| alive(*pid))
        .collect()
}

/// Whether `what`, which `test` needs, is here. When it is not, the test
/// says it was skipped (visibly, even under `cargo test`'s capture), and
/// the test binary counts its skips when it ends; under `CI=true` it fails
/// instead, since CI must have everything and a skip there would hide a
/// gap.
pub fn present(test: &str, what: &str, here: bool) -> bool {
    if here {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test} needs {what}, which this CI machine lacks");
    }
    // Straight to the stream, past the test harness's capture, so that a
    // skip shows in `cargo test` and does not pass for a run.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "skipped {test}: it needs {what}, which is not here"
    );
    skips::note(test, what);
    false
}

/// The skips of this test binary, counted when it exits: the harness's
/// own summary counts them as passed.
mod skips {
    use std::collections::BTreeMap;
    use std::io::Write;
    use std::sync::{Mutex, Once, PoisonError};

    /// Each skipped test, with what it lacked.
    static SKIPPED: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());
    static AT_EXIT: Once = Once::new();

    /// `test` is the caller's label; the harness names the test's
    /// thread after the test itself, which is counted once.
    pub fn note(test: &str, what: &str) {
        let name = std::thread::current().name().map(str::to_string);
        SKIPPED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.unwrap_or_else(|| test.to_string()))
            .or_insert_with(|| what.to_string());
        // SAFETY: `summary` is a plain function that touches only this
        // module's statics and stderr, fit to run as the process exits.
        AT_EXIT.call_once(|| unsafe {
            nix::libc::atexit(summary);
        });
    }

    extern "C" fn summary() {
        let skipped = SKIPPED.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = format!(
            "\n{} of the tests above skipped for what this machine lacks (the harness counts them as passed):\n",
            skipped.len()
        );
        for (test, what) in skipped.iter() {
            out.push_str(&format!("  {test}: {what}\n"));
        }
        out.push_str("`.ci/run` installs the packages and servers they need (as root, on Debian or Ubuntu); root and the kernel's Landlock are the machine's. Under CI=true a skip fails.\n");
        let _ = std::io::stderr().write_all(out.as_bytes());
    }
}

/// Whether `program` is on PATH.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// The Landlock ABI this kernel enforces in full, with the read-only
/// results directory, if it does.
pub fn full_sandbox_abi() -> Option<u64> {
    let mut probe = troupe_agent();
    probe.arg("--probe-sandbox");
    let out = run(probe);
    let report: Value = serde_json::from_str(out.stdout.trim()).ok()?;
    (report["status"] == "fully_enforced")
        .then(|| report["abi"].as_u64())
        .flatten()
}

/// Whether the whole sandbox holds here (see `present`).
pub fn full_sandbox(test: &str) -> bool {
    present(
        test,
        "a kernel that enforces the whole sandbox (troupe-agent --probe-sandbox)",
        full_sandbox_abi().is_some(),
    )
}

/// Whether every agent sees `path` empty or absent, whatever its read
/// scope: in its scratch directories (`/tmp`, `/var/tmp`, `/dev/shm`),
/// or, as root (whose agents' views are id-mapped), in a home directory.
pub fn hidden_from_agents(path: &Path) -> bool {
    let root = nix::unistd::geteuid().is_root();
    ["/tmp", "/var/tmp", "/dev/shm"]
        .iter()
        .chain(if root { &["/home", "/root"][..] } else { &[] })
        .any(|hidden| path.starts_with(hidden))
}

/// A temporary directory that an agent under `--read-scope all` sees,
/// where this user can make one: the target directory, unless a clone
/// under /tmp has it there, else the home directory, `/srv` or `/mnt`.
/// Where there is no such place, one in the target directory all the
/// same, which `hidden_from_agents` then names.
pub fn visible_elsewhere() -> tempfile::TempDir {
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let places = [
        Some(target.clone()),
        home,
        Some("/srv".into()),
        Some("/mnt".into()),
    ];
    places
        .into_iter()
        .flatten()
        .filter_map(|place| place.canonicalize().ok())
        .filter(|place| !hidden_from_agents(place))
        .find_map(|place| tempfile::tempdir_in(place).ok())
        .unwrap_or_else(|| tempfile::tempdir_in(target).unwrap())
}
