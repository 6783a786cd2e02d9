//! A hostile worker, played by a scripted model that makes the agent issue
//! exactly the calls an attacker wants, as root (as CI and many containers
//! run) and as an ordinary user. Every test tries the attack for real and
//! asserts on what a user would check afterwards: nothing outside the
//! workspace changed, no step was approved on a forged word, no secret is
//! in any file troupe kept, and the agent ended with a tool error instead
//! of dying.

mod not_files;
mod planted;
mod resume;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

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
