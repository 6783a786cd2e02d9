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
//! The report says what held; `required` refuses to run on less than all
//! of it, and `auto` says what is missing and goes on.

mod idmap;
mod limits;
mod loopback;
mod mounts;
mod namespaces;
mod narrow;
mod privileges;
mod process_tree;
mod rules;
mod seccomp;
mod view;

use std::os::fd::OwnedFd;
use std::path::PathBuf;

pub use self::limits::remove_leftover as remove_leftover_group;
pub use self::narrow::Narrow;
pub use self::privileges::{Inherited, make_undumpable, shut_inherited};
use crate::protocol::{
    AgentRole, LimitKind, ReadScope, SandboxLevel, SandboxMode, SandboxReport, SandboxSettings,
    TaskFile,
};

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot set up the sandbox: {0}")]
    Landlock(#[from] landlock::RulesetError),
    #[error("--sandbox required, but this kernel cannot enforce the whole policy: {0}")]
    NotEnforceable(String),
    #[error("cannot set up the sandbox: {0}")]
    Setup(String),
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

/// Confines the calling process, which must have one thread, and every
/// process it starts afterwards, to the task's policy. Where the agent
/// gets a PID namespace, this returns in a new process, the agent, while
/// the process that called it waits for the agent and exits as it did.
pub fn enter(task: &TaskFile, settings: &SandboxSettings) -> Result<Confined, SandboxError> {
    if settings.mode == SandboxMode::Off {
        let mut report = SandboxReport::new(SandboxLevel::Off, None);
        report.note = "the sandbox is off (--sandbox off)".to_string();
        if let Err(why) = privileges::drop_all() {
            add_missing(&mut report, vec![why]);
        }
        return Ok(Confined {
            report,
            journal: open_journal(task)?,
            tmp_dir: None,
            limit_events: Vec::new(),
        });
    }
    let confined = confine(task, settings)?;
    if settings.mode == SandboxMode::Required && !confined.report.fully_enforced() {
        return Err(SandboxError::NotEnforceable(confined.report.note));
    }
    Ok(confined)
}

fn open_journal(task: &TaskFile) -> Result<OwnedFd, SandboxError> {
    crate::fsutil::nofollow::open_dir(&task.subagent_dir()).map_err(|e| {
        SandboxError::Setup(format!(
            "cannot open {}: {e}",
            task.subagent_dir().display()
        ))
    })
}

/// What the layers before Landlock made of the agent.
struct Layers {
    made: namespaces::Made,
    view: Option<view::View>,
    /// Its control group, when it has one.
    group: Option<limits::Group>,
    /// The host uid it runs as, when troupe is root and it does not.
    uid: Option<u32>,
    missing: Vec<String>,
}

fn confine(task: &TaskFile, settings: &SandboxSettings) -> Result<Confined, SandboxError> {
    let mut missing = Vec::new();
    if let Err(why) = limits::first_to_go() {
        missing.push(why);
    }
    let privileged = namespaces::privileged();
    let root = nix::unistd::geteuid().is_root();
    // Made while troupe's own powers are there; joined by the init.
    let group = limits::Group::create(settings.max_memory, settings.max_processes)
        .ok()
        .filter(|group| !group.is_empty());
    let idmap = match (privileged && root, view::closed_on_the_way(task, settings)) {
        (false, _) => None,
        (true, Some(closed)) => {
            missing.push(format!(
                "the agent keeps uid 0: {} is closed to other users, so an unprivileged uid could not reach its directories",
                closed.display()
            ));
            None
        }
        (true, None) => idmap::IdMap::new()
            .map_err(|why| missing.push(format!("the agent keeps uid 0 ({why})")))
            .ok(),
    };
    let layers = match namespaces::enter(privileged, settings.allow_network) {
        Ok(made) => in_namespaces(task, settings, made, idmap, group, missing)?,
        Err(why) => {
            if let Some(group) = &group {
                group.remove();
            }
            missing.push(format!(
                "no namespaces of its own, so what it starts may outlive it and it sees the host's processes ({why})"
            ));
            Layers {
                made: namespaces::Made::default(),
                view: None,
                group: None,
                uid: None,
                missing,
            }
        }
    };
    confine_self(task, settings, layers)
}

/// The view, the group, the id and the process tree, inside the
/// namespaces; returns in the agent.
fn in_namespaces(
    task: &TaskFile,
    settings: &SandboxSettings,
    made: namespaces::Made,
    idmap: Option<idmap::IdMap>,
    group: Option<limits::Group>,
    mut missing: Vec<String>,
) -> Result<Layers, SandboxError> {
    let view = view::build(task, settings, idmap.as_ref()).map_err(SandboxError::Setup)?;
    missing.extend(view.missing.iter().cloned());
    let dropped = idmap.filter(|_| view.remapped);
    let uid = dropped.as_ref().map(|_| idmap::UNPRIVILEGED);
    let joined = group.clone();
    let in_init = move || -> Result<Vec<String>, String> {
        let mut notes = Vec::new();
        if let Err(why) = view::mount_proc() {
            notes.push(format!("other processes stay visible in /proc ({why})"));
        }
        if let Some(group) = &joined {
            group.join()?;
        }
        if let Some(idmap) = &dropped {
            idmap.become_unprivileged()?;
        }
        Ok(notes)
    };
    let removed = group.clone();
    let when_done = move || {
        if let Some(group) = &removed {
            group.remove();
        }
    };
    let notes =
        process_tree::fork_init_and_agent(in_init, when_done).map_err(SandboxError::Setup)?;
    missing.extend(notes);
    Ok(Layers {
        made,
        view: Some(view),
        group,
        uid,
        missing,
    })
}

/// What the agent does to itself last, in the process that goes on as
/// the agent: limits, capabilities, Landlock, seccomp.
fn confine_self(
    task: &TaskFile,
    settings: &SandboxSettings,
    layers: Layers,
) -> Result<Confined, SandboxError> {
    let Layers {
        made,
        view,
        group,
        uid,
        mut missing,
    } = layers;
    let (memory, processes) = (settings.max_memory, settings.max_processes);
    let limits = match &group {
        Some(_) => limits::report(memory, processes, LimitKind::Cgroup),
        None => rlimits(memory, processes, made.user || uid.is_some(), &mut missing),
    };
    let limit_events = group.map(|g| g.event_files()).unwrap_or_default();
    if let Err(why) = privileges::drop_all() {
        missing.push(why);
    }
    let deny_network = !settings.allow_network;
    let scratch = view.as_ref().map(|v| v.scratch.clone()).unwrap_or_default();
    let mut writable = writable_paths(task);
    writable.extend(scratch.iter().cloned());
    let mut readable = readable_paths(task, settings);
    if let Some(readable) = &mut readable {
        readable.extend(limit_events.iter().cloned());
    }
    // In a network namespace of its own, TCP reaches nothing but the
    // agent's own loopback, where a command's test server may listen;
    // without one, Landlock's TCP rule (and seccomp's socket filter) stand
    // in.
    let landlock_network = deny_network && !made.network;
    let status = rules::restrict(readable.as_deref(), &writable, landlock_network)?;
    let mut report = rules::report(&status, landlock_network);
    let scoped = rules::scope().unwrap_or(false);
    if !scoped && !made.pid {
        missing.push(
            "its commands may signal other processes of the user (Landlock ABI 6 scopes them)"
                .to_string(),
        );
    }
    let socket_filter = landlock_network;
    let seccomp = seccomp::install(socket_filter)
        .map_err(|why| missing.push(why))
        .is_ok();
    report.network_denied = deny_network
        && (made.network || (report.network_denied && seccomp && socket_filter && scoped));
    // Root's agent is in the user namespace of its unprivileged id.
    let made = namespaces::Made {
        user: made.user || uid.is_some(),
        ..made
    };
    report.namespaces = made.names();
    report.scoped = scoped;
    report.seccomp = seccomp;
    report.uid = uid;
    report.limits = limits;
    let journal = match &view {
        Some(view) => {
            report.results_read_only = view.results_read_only;
            report.records_read_only = view.records_read_only;
            report.repository_read_only = view.repository_read_only;
            report.host_sockets_masked = view.sockets_masked;
            view.journal.try_clone().map_err(|e| {
                SandboxError::Setup(format!("cannot keep the agent's directory open: {e}"))
            })?
        }
        None => {
            // Landlock alone keeps a reviewer from the results directory.
            report.results_read_only = task.role == AgentRole::Reviewer && report.fully_enforced();
            missing.push(
                "the agent's records, the results directory and the repository stay writable to its commands, and the host's sockets reachable (no mount namespace)"
                    .to_string(),
            );
            open_journal(task)?
        }
    };
    add_missing(&mut report, missing);
    let tmp_dir = scratch.into_iter().next();
    Ok(Confined {
        report,
        journal,
        tmp_dir,
        limit_events,
    })
}

/// The resource limits, where there is no control group; what the report
/// says of them. `RLIMIT_NPROC` binds in the agent's own user namespace
/// only (`own_user`): root in the host's is above it.
fn rlimits(
    memory: Option<u64>,
    processes: Option<u64>,
    own_user: bool,
    missing: &mut Vec<String>,
) -> Option<crate::protocol::LimitsReport> {
    let binds = own_user || !nix::unistd::geteuid().is_root();
    if processes.is_some() && !binds {
        missing.push(
            "its processes are not bounded: root is above RLIMIT_NPROC and no control group could be made"
                .to_string(),
        );
    }
    let processes = processes.filter(|_| binds);
    match limits::set_rlimits(memory, processes) {
        Ok(()) => limits::report(memory, processes, LimitKind::Rlimit),
        Err(why) => {
            missing.push(why);
            None
        }
    }
}

/// What this kernel can enforce: the whole policy applied, with the
/// default limits, to a worker in a scratch directory, which prints its
/// report (for `troupe-agent --probe-sandbox`). The worker is a child of
/// the calling process, which removes the scratch directory after it.
pub fn probe() -> Result<(), SandboxError> {
    let setup = |e: std::io::Error| SandboxError::Setup(format!("cannot probe: {e}"));
    let scratch = tempfile::Builder::new()
        .prefix("troupe-probe-")
        .tempdir()
        .map_err(setup)?;
    let base = scratch.path().canonicalize().map_err(setup)?;
    let workspace = base.join("ws");
    let agent_dir = workspace.join(crate::protocol::RESULTS_DIR).join("probe");
    let task = TaskFile::new(
        crate::protocol::AgentId::new("probe"),
        AgentRole::Worker,
        "probe".to_string(),
        "probe the sandbox".to_string(),
        workspace,
        agent_dir,
    );
    std::fs::create_dir_all(task.subagent_dir()).map_err(setup)?;
    // SAFETY: the caller has one thread, as `enter` needs.
    match unsafe { nix::unistd::fork() }.map_err(|e| setup(e.into()))? {
        nix::unistd::ForkResult::Parent { child } => {
            let status = nix::sys::wait::waitpid(child, None);
            drop(scratch);
            match status {
                Ok(nix::sys::wait::WaitStatus::Exited(_, 0)) => Ok(()),
                other => Err(SandboxError::Setup(format!("the probe ended {other:?}"))),
            }
        }
        nix::unistd::ForkResult::Child => {
            let settings = SandboxSettings {
                max_memory: Some(DEFAULT_MAX_MEMORY),
                max_processes: Some(DEFAULT_MAX_PROCESSES),
                ..SandboxSettings::default()
            };
            let code = match enter(&task, &settings) {
                Ok(confined) => {
                    crate::say!(
                        "{}",
                        serde_json::to_string(&confined.report).unwrap_or_default()
                    );
                    0
                }
                Err(e) => {
                    crate::tell!("troupe-agent: {e}");
                    1
                }
            };
            std::process::exit(code)
        }
    }
}

/// The memory bound of an agent when none is given: 4 GiB.
pub const DEFAULT_MAX_MEMORY: u64 = 4 << 30;
/// The process bound of an agent when none is given.
pub const DEFAULT_MAX_PROCESSES: u64 = 512;

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
