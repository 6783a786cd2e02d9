//! A hostile worker, played by a scripted model that makes the agent issue
//! exactly the calls an attacker wants, as root (as CI and many containers
//! run) and as an ordinary user. Every test tries the attack for real and
//! asserts on what a user would check afterwards: nothing outside the
//! workspace changed, no step was approved on a forged word, no secret is
//! in any file troupe kept, and the agent ended with a tool error instead
//! of dying.

mod arithmetic;
mod forged;
mod limits;
mod namespaces;
mod not_files;
mod planted;
mod privileges;
mod proc_entries;
mod repository;
mod resume;
mod views;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::common::Sandbox;

/// Scripted worker replies: `commands` through run_command in one turn,
/// then finish_task.
pub fn running(commands: &[&str]) -> Vec<Value> {
    let calls: Vec<Value> = commands
        .iter()
        .map(|c| json!({"name": "run_command", "arguments": {"command": c}}))
        .collect();
    vec![
        json!({"tool_calls": calls}),
        json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "done"}}]}),
    ]
}

/// A directory beside the workspace, holding one file an attacker would
/// like to change, readable and writable by everyone so that only troupe's
/// confinement stands in the way.
pub fn outside(sandbox: &Sandbox) -> PathBuf {
    let dir = sandbox.root().join("outside");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("keep.txt"), "untouched\n").unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(dir.join("keep.txt"), std::fs::Permissions::from_mode(0o666)).unwrap();
    dir
}

/// Fails unless `dir` holds exactly what `outside` put there.
pub fn assert_untouched(dir: &Path) {
    let names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["keep.txt"], "nothing new in {}", dir.display());
    assert_eq!(
        std::fs::read_to_string(dir.join("keep.txt")).unwrap(),
        "untouched\n",
        "{} is unchanged",
        dir.display()
    );
}

/// The text of every tool result in `transcript`, in order.
pub fn outputs(transcript: &Value) -> Vec<String> {
    crate::common::tool_results(transcript)
        .iter()
        .map(|r| {
            format!(
                "{} {}",
                r["error"].as_str().unwrap_or(""),
                r["content"].as_str().unwrap_or("")
            )
        })
        .collect()
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// `command` as the unprivileged user `nobody`, with the sandbox made
/// theirs; as any other user, `command` itself.
pub fn unprivileged(sandbox: &Sandbox, command: Command) -> Command {
    if !is_root() {
        return command;
    }
    let owner = Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(sandbox.root())
        .status()
        .unwrap();
    assert!(owner.success());
    let mut wrapped = Command::new("setpriv");
    wrapped
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--",
        ])
        .arg(command.get_program())
        .args(command.get_args());
    for (name, value) in command.get_envs() {
        match value {
            Some(value) => wrapped.env(name, value),
            None => wrapped.env_remove(name),
        };
    }
    wrapped
}

/// Every file under `dir` whose content holds `needle`.
pub fn files_holding(dir: &Path, needle: &str) -> Vec<PathBuf> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .filter(|e| {
            std::fs::read(e.path())
                .map(|bytes| String::from_utf8_lossy(&bytes).contains(needle))
                .unwrap_or(false)
        })
        .map(|e| e.into_path())
        .collect()
}
