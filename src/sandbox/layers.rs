//! The layers of an agent's confinement in the order they must be made:
//! what needs troupe's own powers first (the control group, root's
//! unprivileged id), then the namespaces and the view inside them, the
//! process tree, and last what the agent does to itself alone
//! (capabilities, Landlock, seccomp), in the process that goes on as the
//! agent.

use super::SetupError;
use super::{
    Confined, SandboxError, add_missing, idmap, limits, namespaces, open_journal, privileges,
    process_tree, readable_paths, rules, seccomp, view, writable_paths,
};
use crate::protocol::{AgentRole, LimitKind, SandboxSettings, TaskFile};

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

pub(super) fn confine(
    task: &TaskFile,
    settings: &SandboxSettings,
) -> Result<Confined, SandboxError> {
    let mut missing = Vec::new();
    if let Err(why) = limits::first_to_go() {
        missing.push(why.to_string());
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
        Err(why) if settings.overlay.is_some() => {
            if let Some(group) = &group {
                group.remove();
            }
            return Err(SandboxError::Setup(SetupError::Refused(format!(
                "the workspace is a copy-on-write checkout, which needs a mount namespace: {why}"
            ))));
        }
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
    let view =
        view::build(task, settings, idmap.as_ref(), made.user).map_err(SandboxError::Setup)?;
    missing.extend(view.missing.iter().cloned());
    let dropped = idmap.filter(|_| view.remapped);
    let uid = dropped.as_ref().map(|_| idmap::UNPRIVILEGED);
    let in_init = || -> Result<Vec<String>, SetupError> {
        Ok(view::mount_proc()
            .err()
            .map(|why| format!("other processes stay visible in /proc ({why})"))
            .into_iter()
            .collect())
    };
    // The init, still troupe's powers, moves the agent into its group,
    // then gives up root as the agent does.
    let settle = |agent: nix::unistd::Pid| -> Result<(), SetupError> {
        let moved = group.as_ref().map_or(Ok(()), |g| g.move_in(agent.as_raw()));
        if let Some(idmap) = &dropped {
            let _ = idmap.become_unprivileged();
        }
        moved
    };
    let removed = group.clone();
    let when_done = move || {
        if let Some(group) = &removed {
            group.remove();
        }
    };
    let (notes, settling) = process_tree::fork_init_and_agent(in_init, settle, when_done)
        .map_err(SandboxError::Setup)?;
    if let Some(idmap) = &dropped {
        idmap.become_unprivileged().map_err(SandboxError::Setup)?;
    }
    if group.is_some() {
        limits::expect_bounds(settling);
    }
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
        missing.push(why.to_string());
    }
    let deny_network = !settings.allow_network;
    let scratch = view.as_ref().map(|v| v.scratch.clone()).unwrap_or_default();
    // With a view, its mounts hold the step's write paths already.
    if view.is_none() {
        super::open_write_paths(task)?;
    }
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
        .map_err(|why| missing.push(why.to_string()))
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
            report.overlay = view.overlay;
            report.host_sockets_masked = view.sockets_masked;
            view.journal
                .try_clone()
                .map_err(SetupError::io("cannot keep the agent's directory open"))?
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
            missing.push(why.to_string());
            None
        }
    }
}
