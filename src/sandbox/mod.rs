//! What a child does to itself at start, before its runtime starts any
//! thread, so that every thread and every command it runs inherits it:
//!
//! - `results`: a Worker sees the results directory read-only, but for its
//!   own directory, in a mount namespace of its own;
//! - `privileges`: every capability dropped and `no_new_privs` set, even as
//!   root, whatever the sandbox mode (and both binaries are non-dumpable);
//! - `rules`: a Landlock policy for its role. Worker: write only the
//!   workspace, its own directory (its private TMPDIR is in it) and
//!   `/dev/null`.
//!   Reviewer: write only its own `.subagent/` (where its TMPDIR is) and
//!   `/dev/null`: it can run checks, not change the workspace. Both: no TCP
//!   bind or connect (Landlock ABI 4 and later) unless the network is
//!   allowed; the parent answers their model requests, so they need none.
//!   Reads: the workspace, the agent's own directory and the system
//!   directories (`--read-scope system`, the default), or only the first
//!   two (`workspace`), or everything (`all`), plus each `--allow-read`.
//!
//! The report says what held; `required` refuses to run on less than all
//! of it, and `auto` says what is missing and goes on.

mod privileges;
mod results;
mod rules;

use std::path::PathBuf;

pub use self::privileges::make_undumpable;
use crate::protocol::{
    AgentRole, ReadScope, SandboxLevel, SandboxMode, SandboxReport, SandboxSettings, TaskFile,
};

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot set up the sandbox: {0}")]
    Landlock(#[from] landlock::RulesetError),
    #[error("--sandbox required, but this kernel cannot enforce the whole policy: {0}")]
    NotEnforceable(String),
}

/// The paths a role may write.
pub fn writable_paths(task: &TaskFile) -> Vec<PathBuf> {
    let mut paths = match task.role {
        AgentRole::Reviewer => vec![task.subagent_dir()],
        AgentRole::Worker => {
            vec![task.workspace.clone(), task.agent_dir.clone()]
        }
    };
    paths.push(PathBuf::from("/dev/null"));
    paths
}

/// The system directories that programs and builds read, for the `system`
/// read scope.
const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/opt", "/proc",
    "/sys", "/dev", "/run", "/var",
];

/// The paths a role may read besides those it may write; `None` for
/// everything.
pub fn readable_paths(task: &TaskFile, settings: &SandboxSettings) -> Option<Vec<PathBuf>> {
    let system: &[&str] = match settings.read_scope {
        ReadScope::All => return None,
        ReadScope::System => SYSTEM_DIRS,
        ReadScope::Workspace => &[],
    };
    let mut paths: Vec<PathBuf> = vec![task.workspace.clone(), task.agent_dir.clone()];
    paths.extend(task.prompts_dir.iter().cloned());
    paths.extend(settings.allow_read.iter().cloned());
    paths.extend(system.iter().map(PathBuf::from));
    Some(paths)
}

/// Confines the calling process, and every thread and process it starts
/// afterwards, to the task's policy.
pub fn apply(task: &TaskFile, settings: &SandboxSettings) -> Result<SandboxReport, SandboxError> {
    let mut missing = Vec::new();
    let results_read_only = match (settings.mode, task.role) {
        (SandboxMode::Off, _) => false,
        // Landlock lets a Reviewer write nothing of the results directory
        // but its own `.subagent/`.
        (_, AgentRole::Reviewer) => true,
        (_, AgentRole::Worker) => {
            match results::protect(&task.results_dir(), &[&task.agent_dir, &task.workspace]) {
                Ok(()) => true,
                Err(why) => {
                    missing.push(format!(
                        "the results directory stays writable to the worker's commands ({why})"
                    ));
                    false
                }
            }
        }
    };
    if let Err(why) = privileges::drop_all() {
        missing.push(why);
    }
    let mut report = match settings.mode {
        SandboxMode::Off => SandboxReport {
            status: SandboxLevel::Off,
            abi: None,
            network_denied: false,
            results_read_only: false,
            note: "the sandbox is off (--sandbox off)".to_string(),
        },
        SandboxMode::Auto | SandboxMode::Required => {
            let status = rules::restrict(
                readable_paths(task, settings).as_deref(),
                &writable_paths(task),
                !settings.allow_network,
            )?;
            rules::report(&status, !settings.allow_network)
        }
    };
    report.results_read_only =
        results_read_only && (task.role != AgentRole::Reviewer || report.fully_enforced());
    add_missing(&mut report, missing);
    if settings.mode == SandboxMode::Required && !report.fully_enforced() {
        return Err(SandboxError::NotEnforceable(report.note));
    }
    Ok(report)
}

/// What this kernel can enforce: the whole policy applied to the calling
/// process with nothing writable. For `troupe-agent --probe-sandbox`, which
/// exits right after.
pub fn probe() -> Result<SandboxReport, SandboxError> {
    let namespace = results::can_protect();
    let status = rules::restrict(None, &[], true)?;
    let mut report = rules::report(&status, true);
    report.results_read_only = namespace.is_ok();
    let missing = namespace
        .err()
        .map(|why| format!("the results directory cannot be made read-only to workers ({why})"));
    add_missing(&mut report, missing.into_iter().collect());
    Ok(report)
}

/// Adds what could not be enforced beyond Landlock to the report, which
/// then is partial at best.
fn add_missing(report: &mut SandboxReport, missing: Vec<String>) {
    if missing.is_empty() {
        return;
    }
    if report.status == SandboxLevel::FullyEnforced {
        report.status = SandboxLevel::PartiallyEnforced;
    }
    let mut notes: Vec<String> = std::iter::once(std::mem::take(&mut report.note))
        .filter(|note| !note.is_empty())
        .collect();
    notes.extend(missing);
    report.note = notes.join("; ");
}

/// Whether the user's global git configuration is there but closed to
/// the agent (home is outside the sandbox's read scope). git then stops
/// with "unknown error occurred while reading the configuration files";
/// the agent's commands and MCP servers get none instead
/// (`GIT_CONFIG_GLOBAL=/dev/null`), as if there were no such file, so git
/// works in the workspace (or an isolated step's checkout).
pub fn git_config_closed() -> bool {
    if std::env::var_os("GIT_CONFIG_GLOBAL").is_some() {
        return false;
    }
    let Some(home) = std::env::var_os("HOME") else {
        return false;
    };
    let home = std::path::Path::new(&home);
    [home.join(".gitconfig"), home.join(".config/git/config")]
        .iter()
        .any(|path| {
            std::fs::File::open(path)
                .is_err_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied)
        })
}
