//! Bounds on what an agent and everything it starts may take: memory and
//! processes at once.
//!
//! Where troupe can make control groups (as root, or in a subtree
//! delegated to the user), each agent gets one of its own,
//! `troupe-agent-<pid>` beside troupe's own, with `memory.max` and
//! `pids.max` (or cgroup v1's memory and pids controllers): the bound is
//! the whole agent's, and the kernel's OOM killer, when the agent reaches
//! it, picks inside the agent only. The agent's init moves the agent into
//! it while the agent starts (a move waits for a kernel grace period, up
//! to tens of milliseconds on cgroup v1), and the agent waits for that
//! before it starts a process of its own (`await_bounds`); the stand-in
//! removes the group once the init is gone, and troupe removes what a
//! killed stand-in left. Elsewhere the resource limits hold: `RLIMIT_NPROC`
//! counts the processes of the agent's own user namespace, and
//! `RLIMIT_DATA` bounds each process's memory, not the agent's.
//!
//! Either way the agent's processes are the OOM killer's first pick
//! (`oom_score_adj` 1000), never troupe.

use super::SetupError;
use std::path::{Path, PathBuf};

use nix::sys::resource::{Resource, setrlimit};

use crate::protocol::{LimitKind, LimitsReport};

/// The name of an agent's control group, after its stand-in's pid.
fn group_name(pid: u32) -> String {
    format!("troupe-agent-{pid}")
}

/// One controller's directory of the agent's control group.
#[derive(Debug, Clone)]
struct Dir {
    path: PathBuf,
    v2: bool,
}

/// The agent's control group, made but not yet joined.
#[derive(Debug, Clone, Default)]
pub struct Group {
    dirs: Vec<Dir>,
}

/// Where the control groups of this process are: the cgroup2 tree, and
/// each v1 hierarchy that has `controller`.
fn own_dirs(controller: &str) -> Vec<Dir> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let membership = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut dirs = Vec::new();
    for line in mountinfo.lines() {
        let Some((before, after)) = line.split_once(" - ") else {
            continue;
        };
        let mut place = before.split_whitespace().skip(3);
        let root = place.next().unwrap_or("/");
        let point = place.next().unwrap_or("");
        let mut fields = after.split_whitespace();
        let kind = fields.next().unwrap_or("");
        let options = fields.nth(1).unwrap_or("");
        let v2 = kind == "cgroup2";
        let v1 = kind == "cgroup" && options.split(',').any(|o| o == controller);
        if !(v1 || v2) {
            continue;
        }
        let own = membership.lines().find_map(|entry| {
            let mut parts = entry.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let matches = match v2 {
                true => controllers.is_empty(),
                false => controllers.split(',').any(|c| c == controller),
            };
            let inside = path.strip_prefix(root).unwrap_or(path);
            matches.then(|| inside.trim_start_matches('/').to_string())
        });
        if let Some(own) = own {
            dirs.push(Dir {
                path: Path::new(point).join(own),
                v2,
            });
        }
    }
    dirs
}

/// The directory where `controller` can bound a child group: cgroup2 when
/// it is enabled for children there, else its v1 hierarchy.
fn parent_for(controller: &str) -> Option<Dir> {
    let dirs = own_dirs(controller);
    let v2 = dirs.iter().find(|d| d.v2).filter(|d| {
        std::fs::read_to_string(d.path.join("cgroup.subtree_control"))
            .is_ok_and(|enabled| enabled.split_whitespace().any(|c| c == controller))
    });
    v2.or_else(|| dirs.iter().find(|d| !d.v2)).cloned()
}

impl Group {
    /// Makes the agent's group with its bounds, or says why it cannot.
    pub fn create(memory: Option<u64>, processes: Option<u64>) -> Result<Group, SetupError> {
        let name = group_name(std::process::id());
        let mut group = Group::default();
        let wanted = [("memory", memory), ("pids", processes)];
        for (controller, bound) in wanted {
            let Some(bound) = bound else { continue };
            let made = parent_for(controller)
                .ok_or_else(|| {
                    SetupError::Refused(format!("no {controller} controller is available"))
                })
                .and_then(|parent| group.add(parent, &name, controller, bound));
            if let Err(why) = made {
                group.remove();
                return Err(why);
            }
        }
        Ok(group)
    }

    fn add(
        &mut self,
        parent: Dir,
        name: &str,
        controller: &str,
        bound: u64,
    ) -> Result<(), SetupError> {
        let path = parent.path.join(name);
        if !self.dirs.iter().any(|d| d.path == path) {
            std::fs::create_dir(&path)
                .map_err(|e| format!("cannot make the control group {}: {e}", path.display()))?;
            self.dirs.push(Dir {
                path: path.clone(),
                v2: parent.v2,
            });
        }
        let (file, value) = match (controller, parent.v2) {
            ("memory", true) => ("memory.max", bound.to_string()),
            ("memory", false) => ("memory.limit_in_bytes", bound.to_string()),
            _ => ("pids.max", bound.to_string()),
        };
        std::fs::write(path.join(file), value)
            .map_err(|e| format!("cannot set {}: {e}", path.join(file).display()))?;
        if controller == "memory" && parent.v2 {
            // Swap would let the agent go on past its bound, slowly.
            let _ = std::fs::write(path.join("memory.swap.max"), "0");
        }
        Ok(())
    }

    /// Moves the process `pid` (of the caller's PID namespace) into the
    /// group; what it starts from then on is in it too.
    pub fn move_in(&self, pid: i32) -> Result<(), SetupError> {
        for dir in &self.dirs {
            std::fs::write(dir.path.join("cgroup.procs"), pid.to_string())
                .map_err(|e| format!("cannot move the agent into {}: {e}", dir.path.display()))?;
        }
        Ok(())
    }

    /// Removes the group, once nothing is in it.
    pub fn remove(&self) {
        for dir in &self.dirs {
            let _ = std::fs::remove_dir(&dir.path);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.dirs.is_empty()
    }

    /// The files the agent reads to tell that a command hit a bound.
    pub fn event_files(&self) -> Vec<PathBuf> {
        self.dirs
            .iter()
            .flat_map(|dir| match dir.v2 {
                true => vec![dir.path.join("memory.events"), dir.path.join("pids.events")],
                false => vec![
                    dir.path.join("memory.oom_control"),
                    dir.path.join("pids.events"),
                ],
            })
            .filter(|path| path.exists())
            .collect()
    }
}

/// The init's move of the agent into its group, still to wait for.
static SETTLING: std::sync::Mutex<Option<super::process_tree::Settling>> =
    std::sync::Mutex::new(None);

/// Keeps the init's move of the agent for `await_bounds`.
pub fn expect_bounds(settling: super::process_tree::Settling) {
    if let Ok(mut pending) = SETTLING.lock() {
        *pending = Some(settling);
    }
}

/// Waits, once, for the agent to be in its control group, so that no
/// process it starts is outside it. Where the init could not move it,
/// the resource limits stand in from here on (`memory`, `processes`), and
/// the warning says so.
pub fn await_bounds(memory: Option<u64>, processes: Option<u64>) -> Option<String> {
    let pending = SETTLING.lock().ok()?.take()?;
    let why = pending.wait().err()?;
    let fallback = match set_rlimits(memory, processes) {
        Ok(()) => "resource limits bound its processes instead".to_string(),
        Err(e) => e.to_string(),
    };
    Some(format!(
        "the agent's control group does not hold it ({why}); {fallback}"
    ))
}

/// Removes the control group a stand-in with `pid` made, if it is still
/// there: the stand-in was killed before it could.
pub fn remove_leftover(pid: u32) {
    let name = group_name(pid);
    for controller in ["memory", "pids"] {
        for dir in own_dirs(controller) {
            let _ = std::fs::remove_dir(dir.path.join(&name));
        }
    }
}

/// The resource limits that stand in for a control group. `RLIMIT_NPROC`
/// binds only where the agent has a user namespace of its own and is not
/// root in the host's.
pub fn set_rlimits(memory: Option<u64>, processes: Option<u64>) -> Result<(), SetupError> {
    if let Some(bytes) = memory {
        setrlimit(Resource::RLIMIT_DATA, bytes, bytes)
            .map_err(|e| format!("cannot bound the memory (RLIMIT_DATA): {e}"))?;
    }
    if let Some(count) = processes {
        setrlimit(Resource::RLIMIT_NPROC, count, count)
            .map_err(|e| format!("cannot bound the processes (RLIMIT_NPROC): {e}"))?;
    }
    Ok(())
}

/// Makes this process, and all it starts, the OOM killer's first pick.
/// The `/proc` files of a non-dumpable process are root's, so it is
/// dumpable for the write.
pub fn first_to_go() -> Result<(), SetupError> {
    let _ = nix::sys::prctl::set_dumpable(true);
    let written = std::fs::write("/proc/self/oom_score_adj", "1000");
    let _ = nix::sys::prctl::set_dumpable(false);
    written.map_err(SetupError::io("cannot raise oom_score_adj"))
}

/// What a memory bound by control group counts.
const COUNTED_BY_CGROUP: &str = "all the agent's memory together: every process's, its files in /tmp, /var/tmp and /dev/shm, shared mappings and memfd";

/// What a memory bound by resource limits counts, and what it does not.
const COUNTED_BY_RLIMIT: &str = "each process's private memory (RLIMIT_DATA), and the files in /tmp, /var/tmp and /dev/shm together (one tmpfs of that size); not the sum over the agent's processes, nor shared mappings or memfd (each file within --max-file-size): run troupe in a delegated control group to bound those";

/// What the report says of the limits.
pub fn report(memory: Option<u64>, processes: Option<u64>, by: LimitKind) -> Option<LimitsReport> {
    let counts = match (memory, by) {
        (None, _) => "",
        (Some(_), LimitKind::Cgroup) => COUNTED_BY_CGROUP,
        (Some(_), LimitKind::Rlimit) => COUNTED_BY_RLIMIT,
    };
    (memory.is_some() || processes.is_some()).then(|| LimitsReport {
        memory,
        processes,
        by,
        counts: counts.to_string(),
    })
}
