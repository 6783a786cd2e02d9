//! What a child does to itself at start, before its runtime starts any
//! thread, so that every thread and every command it runs inherits it.
//! Each layer is its own module:
//!
//! - `limits`: a control group of its own with `--max-memory` and
//!   `--max-processes` (or the resource limits that stand in for one);
//! - `idmap`: when troupe runs as root, an unprivileged uid and gid, with
//!   the agent's directories id-mapped so it still owns its files;
//! - `namespaces`: a user (unless root), mount, PID, IPC and network
//!   namespace of its own, the network holding nothing but its loopback
//!   (`loopback`) unless `--allow-network`;
//! - `view`: in the mount namespace, the host's sockets and scratch
//!   directories masked, a `/dev` of its own, the results directory, the
//!   agent's records, the user's repository and troupe's configuration
//!   read-only;
//! - `process_tree`: the init of the PID namespace, which reaps, and the
//!   agent it forks: whatever the agent starts dies with it;
//! - `privileges`: every capability dropped and `no_new_privs` set, even
//!   as root, whatever the sandbox mode (both binaries are non-dumpable);
//! - `rules`: a Landlock policy for its role (Worker: write only the
//!   workspace, its own directory, its scratch space and `/dev/null`;
//!   Reviewer: only its own `.subagent/`, its scratch space and
//!   `/dev/null`; both: no TCP unless the network is allowed; reads as
//!   `--read-scope` says), and its signal and abstract-socket scopes;
//! - `seccomp`: the system calls none of that covers.
//!
//! And `narrow`: the Landlock domain troupe itself puts the programs it
//! runs on what agents made or chose in (its git calls, the MCP servers it
//! reaches for them).
//!
//! The report says what held; `required` refuses to run on less than all
//! of it, and `auto` says what is missing and goes on.

mod idmap;
mod layers;
mod limits;
mod loopback;
mod mounts;
mod namespaces;
mod narrow;
mod overlay;
mod privileges;
mod probe;
mod process_tree;
mod rules;
mod scratch;
mod seccomp;
mod setup_error;
mod view;

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

pub use self::limits::{await_bounds, remove_leftover as remove_leftover_group};
pub use self::namespaces::privileged;

/// The host uid and gid root's agents run as when troupe is root, which
/// owns the upper layers of their copy-on-write checkouts: an overlay
/// writes its upper layer as it is on the disk, not through the maps that
/// show the agent its read-only layers as its own.
pub fn agent_owner() -> Option<u32> {
    (privileged() && nix::unistd::geteuid().is_root()).then_some(idmap::UNPRIVILEGED)
}
pub use self::narrow::Narrow;
pub use self::privileges::{Inherited, make_undumpable, shut_inherited};
pub use self::probe::probe;
pub use self::setup_error::SetupError;
use crate::protocol::{
    AgentRole, ReadScope, SandboxLevel, SandboxMode, SandboxReport, SandboxSettings, TaskFile,
};

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot set up the sandbox: {0}")]
    Landlock(#[from] landlock::RulesetError),
    #[error("--sandbox required, but this kernel cannot enforce the whole policy: {0}")]
    NotEnforceable(String),
    #[error("cannot set up the sandbox: {0}")]
    Setup(#[from] SetupError),
}

/// The agent once confined.
#[derive(Debug)]
pub struct Confined {
    pub report: SandboxReport,
    /// Its `.subagent/`, open for its own writes, which its commands
    /// cannot make.
    pub journal: OwnedFd,
    /// Where its commands keep temporary files, when not in `.subagent/`.
    pub tmp_dir: Option<PathBuf>,
    /// The files that count the times a bound was hit (its control
    /// group's events).
    pub limit_events: Vec<PathBuf>,
}

/// The paths a role may write.
pub fn writable_paths(task: &TaskFile) -> Vec<PathBuf> {
    let mut paths = match task.role {
        AgentRole::Reviewer => vec![task.subagent_dir()],
        AgentRole::Worker => match &task.sandbox.write {
            Some(write) => write
                .iter()
                .cloned()
                .chain([task.agent_dir.clone()])
                .collect(),
            None => vec![task.workspace.clone(), task.agent_dir.clone()],
        },
    };
    paths.push(PathBuf::from("/dev/null"));
    paths
}

/// Why a `write` path is refused when a link stands at it or on its way.
const THROUGH_A_LINK: &str =
    "it is a link, or one stands on the way to it, and troupe lets no step write through one";

/// The paths a worker's `write` powers name, each opened (a directory
/// made if missing) without following a link on the way or at its end:
/// a link there (which a worker of an earlier step could have planted)
/// would carry the mount or Landlock rule out of the workspace. The view
/// binds these descriptors, not the paths, so a path swapped meanwhile
/// cannot take the bind elsewhere. A file that is there stays a file.
/// Every path is checked before any missing one is made: a step refused
/// for one path leaves nothing made for the others.
pub fn open_write_paths(task: &TaskFile) -> Result<Vec<(PathBuf, OwnedFd)>, SandboxError> {
    use crate::fsutil::nofollow;
    use nix::fcntl::OFlag;
    use nix::sys::stat::{Mode, SFlag};
    use std::os::fd::AsFd;
    let Some(write) = &task.sandbox.write else {
        return Ok(Vec::new());
    };
    let refused = |path: &Path, why: String| {
        SandboxError::Setup(SetupError::Refused(format!(
            "powers.write names {}: {why}",
            path.display()
        )))
    };
    let root =
        nofollow::open_dir(&task.workspace).map_err(|e| refused(&task.workspace, e.to_string()))?;
    let open = |rel: &Path| nofollow::open_beneath(root.as_fd(), rel, OFlag::O_PATH, Mode::empty());
    let opened = |path: &Path, fd: std::io::Result<OwnedFd>| {
        let fd = fd.map_err(|e| match nofollow::is_refusal(&e) {
            true => refused(path, THROUGH_A_LINK.to_string()),
            false => refused(path, e.to_string()),
        })?;
        let kind = nix::sys::stat::fstat(fd.as_fd())
            .map(|stat| SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT)
            .map_err(|e| refused(path, e.to_string()))?;
        match kind {
            SFlag::S_IFDIR | SFlag::S_IFREG => Ok(fd),
            SFlag::S_IFLNK => Err(refused(path, THROUGH_A_LINK.to_string())),
            _ => Err(refused(
                path,
                "it is neither a directory nor a file".to_string(),
            )),
        }
    };
    // Checked, each either open or missing.
    let mut found: Vec<(&PathBuf, &Path, Option<OwnedFd>)> = Vec::new();
    for path in write {
        let rel = path
            .strip_prefix(&task.workspace)
            .map_err(|_| refused(path, "it is not inside the workspace".to_string()))?;
        if let Some(held) = task
            .sandbox
            .read_only
            .iter()
            .find(|ro| path.starts_with(ro))
        {
            return Err(refused(
                path,
                format!(
                    "it lies in {}, which is read-only to every agent (the repository, or troupe's configuration or prompts)",
                    held.display()
                ),
            ));
        }
        let fd = match open(rel) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            fd => Some(opened(path, fd)?),
        };
        found.push((path, rel, fd));
    }
    found
        .into_iter()
        .map(|(path, rel, fd)| match fd {
            Some(fd) => Ok((path.clone(), fd)),
            None => {
                let made = nofollow::create_dirs_beneath(root.as_fd(), rel).and_then(|_| open(rel));
                opened(path, made).map(|fd| (path.clone(), fd))
            }
        })
        .collect()
}

/// The system directories that programs and builds read, for the `system`
/// read scope.
const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/opt", "/proc",
    "/sys", "/dev", "/run", "/var",
];

/// Whether `path` lies in one of the system directories of the `system`
/// read scope.
pub fn in_system_dirs(path: &Path) -> bool {
    SYSTEM_DIRS.iter().any(|dir| path.starts_with(dir))
}

/// The paths a role may read besides those it may write; `None` for
/// everything.
pub fn readable_paths(task: &TaskFile, settings: &SandboxSettings) -> Option<Vec<PathBuf>> {
    let system: &[&str] = match settings.read_scope {
        ReadScope::All => return None,
        ReadScope::System => SYSTEM_DIRS,
        ReadScope::Workspace => &[],
    };
    let mut paths: Vec<PathBuf> = vec![task.workspace.clone(), task.agent_dir.clone()];
    paths.extend(settings.allow_read.iter().cloned());
    paths.extend(system.iter().map(PathBuf::from));
    Some(paths)
}

/// Confines the calling process, which must have one thread, and every
/// process it starts afterwards, to the task's policy. Where the agent
/// gets a PID namespace, this returns in a new process, the agent, while
/// the process that called it waits for the agent and exits as it did.
pub fn enter(task: &TaskFile, settings: &SandboxSettings) -> Result<Confined, SandboxError> {
    if settings.mode == SandboxMode::Off && settings.overlay.is_some() {
        return Err(SandboxError::Setup(SetupError::Refused(
            "the workspace is a copy-on-write checkout, which needs the sandbox's mount namespace (--sandbox off asks for none)".to_string(),
        )));
    }
    if settings.mode == SandboxMode::Off {
        let mut report = SandboxReport::new(SandboxLevel::Off, None);
        report.note = "the sandbox is off (--sandbox off)".to_string();
        if let Err(why) = privileges::drop_all() {
            add_missing(&mut report, vec![why.to_string()]);
        }
        return Ok(Confined {
            report,
            journal: open_journal(task)?,
            tmp_dir: None,
            limit_events: Vec::new(),
        });
    }
    let confined = layers::confine(task, settings)?;
    if settings.mode == SandboxMode::Required && !confined.report.fully_enforced() {
        return Err(SandboxError::NotEnforceable(confined.report.note));
    }
    Ok(confined)
}

pub(super) fn open_journal(task: &TaskFile) -> Result<OwnedFd, SandboxError> {
    let dir = task.subagent_dir();
    crate::fsutil::nofollow::open_dir(&dir)
        .map_err(|e| SetupError::io(format!("cannot open {}", dir.display()))(e).into())
}

/// The memory bound of an agent when none is given: 4 GiB.
pub const DEFAULT_MAX_MEMORY: u64 = 4 << 30;
/// The process bound of an agent when none is given.
pub const DEFAULT_MAX_PROCESSES: u64 = 512;

/// Adds what could not be enforced beyond Landlock to the report, which
/// then is partial at best.
pub(super) fn add_missing(report: &mut SandboxReport, missing: Vec<String>) {
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
