//! An agent's view of the file system, built in its mount namespace the
//! way bubblewrap builds a sandbox's: the host's tree, with
//!
//! - the places other programs keep their sockets and scratch files
//!   (`/tmp`, `/var/tmp`, `/run`, `/dev/shm`, and the home directories
//!   unless the read scope is `all`) replaced by empty tmpfs, so no Unix
//!   socket of another program can be reached by its path, and the
//!   agent's own directories (workspace, results, `--allow-read`)
//!   put back where they were; `/tmp`, `/var/tmp` and `/dev/shm` are
//!   the agent's private scratch space, one tmpfs bounded by its memory
//!   limit (`scratch`);
//! - a `/dev` of its own with the usual safe nodes only (`null`, `zero`,
//!   `full`, `random`, `urandom`, `tty`, a `pts` of its own);
//! - the results directory read-only but for the worker's own directory,
//!   and a reviewer's workspace read-only as a whole;
//! - the agent's `.subagent/` read-only: the agent writes its transcript
//!   there through a descriptor opened before, which its commands do not
//!   have, so no command can write a record troupe or a reader believes;
//! - the task's `read_only` paths (the workspace's `.git`, `troupe.toml`,
//!   `.troupe/`) read-only and its `hidden` files (a repository's
//!   `config`) empty.
//!
//! The mounts exist only in the agent's namespace and end with it. When
//! troupe runs as root, the agent's directories are id-mapped first (see
//! `idmap`).

use super::SetupError;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::mount::MsFlags;

use super::idmap::IdMap;
use super::mounts;
use super::scratch::ScratchSpace;
use crate::protocol::{AgentRole, ReadScope, SandboxSettings, TaskFile};

/// Where other programs keep what the agent must not reach, and the mode
/// of the empty tmpfs put there; the scratch ones are the agent's to
/// write.
const MASKS: &[(&str, u32, Scratch)] = &[
    ("/tmp", 0o1777, Scratch::Yes),
    ("/var/tmp", 0o1777, Scratch::Yes),
    ("/run", 0o755, Scratch::No),
    ("/var/run", 0o755, Scratch::No),
];

/// The home directories, masked unless the read scope is `all` and the
/// agent keeps the user's uid: an unprivileged uid could read nothing of
/// them, and the masks open a path to a workspace there.
const HOMES: &[&str] = &["/home", "/root"];

/// The directories masked for an agent, with their modes. Unless the read
/// scope is `all`, every directory at the top of the host's tree that is
/// neither a system directory of the `system` scope nor masked already
/// (`/srv`, `/mnt`, `/media`, `/data`, ...) is an empty tmpfs: what lies
/// there (another program's Unix socket, which no Landlock rule keeps an
/// agent from connecting to) is simply not in the view, but for the
/// agent's own paths put back. An agent that works in a checkout has the
/// run's workspace masked too: what the checkout leaves out (ignored
/// files such as `.env`, the run's records, the other attempts' layers)
/// stays out wherever the workspace lies, under a system directory the
/// read scope opens or under `/tmp`, whose scratch rule covers all it
/// holds.
fn masks(
    task: &TaskFile,
    settings: &SandboxSettings,
    remapped: bool,
) -> Vec<(PathBuf, u32, Scratch)> {
    let homes = HOMES.iter().map(|home| (*home, 0o755, Scratch::No));
    let mut masks: Vec<(&str, u32, Scratch)> = MASKS.to_vec();
    if settings.read_scope != ReadScope::All || remapped {
        masks.extend(homes);
    }
    let mut masks: Vec<(PathBuf, u32, Scratch)> = masks
        .into_iter()
        .map(|(dir, mode, kind)| (PathBuf::from(dir), mode, kind))
        .collect();
    if settings.read_scope != ReadScope::All {
        masks.extend(
            foreign_tops()
                .into_iter()
                .map(|dir| (dir, 0o755, Scratch::No)),
        );
    }
    masks.extend(run_workspace(task).map(|dir| (dir, 0o755, Scratch::No)));
    masks
}

/// The directories at the top of the host's tree that no read scope but
/// `all` opens and no other mask covers (a link there, such as `/lib`
/// on a merged `/usr`, is left alone: it leads into `/usr`).
fn foreign_tops() -> Vec<PathBuf> {
    let known = |name: &std::ffi::OsStr| {
        let path = Path::new("/").join(name);
        super::in_system_dirs(&path)
            || MASKS.iter().any(|(mask, _, _)| Path::new(mask) == path)
            || HOMES.iter().any(|home| Path::new(home) == path)
    };
    let Ok(entries) = std::fs::read_dir("/") else {
        return Vec::new();
    };
    let mut tops: Vec<PathBuf> = entries
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
        .filter(|entry| !known(&entry.file_name()))
        .map(|entry| entry.path())
        .collect();
    tops.sort();
    tops
}

/// The run's workspace, for an agent that works in a checkout of it.
fn run_workspace(task: &TaskFile) -> Option<PathBuf> {
    let results = task.results.as_ref()?;
    results.parent().map(Path::to_path_buf)
}

/// The first directory on the way to one of the agent's own paths (its
/// workspace, its directory, the results) that an unprivileged uid could
/// not pass (no search right for others), where the view keeps the real
/// one: outside the masks, which put fresh directories on the way, or
/// inside a kept path, which is put back as it is (an `--allow-read` of a
/// `mktemp -d` directory around the workspace). An agent that dropped
/// root's uid could not reach its workspace through it.
pub fn closed_on_the_way(task: &TaskFile, settings: &SandboxSettings) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let masks = masks(task, settings, true);
    let kept = kept(task, settings);
    let real = |dir: &Path| {
        kept.iter().any(|k| dir.starts_with(k))
            || !masks.iter().any(|(mask, _, _)| dir.starts_with(mask))
    };
    let own = [
        task.workspace.clone(),
        task.agent_dir.clone(),
        task.results_dir(),
    ];
    own.iter().find_map(|path| {
        path.ancestors()
            .skip(1)
            .filter(|dir| real(dir))
            .find(|dir| std::fs::metadata(dir).is_ok_and(|m| m.permissions().mode() & 0o001 == 0))
            .map(Path::to_path_buf)
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scratch {
    Yes,
    No,
}

/// The safe device nodes of the agent's `/dev`.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// What the view holds.
#[derive(Debug)]
pub struct View {
    /// The agent's `.subagent/`, open for its own writes.
    pub journal: OwnedFd,
    /// Whether its directories are id-mapped for an unprivileged id.
    pub remapped: bool,
    /// Directories the agent may write besides its own (its private
    /// scratch space).
    pub scratch: Vec<PathBuf>,
    pub results_read_only: bool,
    pub records_read_only: bool,
    pub repository_read_only: bool,
    pub sockets_masked: bool,
    pub overlay: bool,
    /// What did not hold, in words.
    pub missing: Vec<String>,
}

/// The paths the agent keeps in its view wherever they lie: the results
/// directory only for an agent of the workspace itself (one in a
/// checkout reads its git directories, `allow_read`, and nothing else of
/// the run's records).
fn kept(task: &TaskFile, settings: &SandboxSettings) -> Vec<PathBuf> {
    let mut paths = vec![task.workspace.clone(), task.agent_dir.clone()];
    if task.results.is_none() {
        paths.push(task.results_dir());
    }
    paths.extend(settings.allow_read.iter().cloned());
    if settings.allow_network {
        // A resolver's file often lives under /run (systemd-resolved).
        paths.extend(std::fs::canonicalize("/etc/resolv.conf").ok());
    }
    outermost(paths.into_iter().filter(|p| p.exists()).collect())
}

/// `paths` without those that lie inside another of them.
fn outermost(mut paths: Vec<PathBuf>) -> Vec<PathBuf> {
    paths.sort();
    paths.dedup();
    let all = paths.clone();
    paths.retain(|p| !all.iter().any(|q| q != p && p.starts_with(q)));
    paths
}

/// Id-maps the agent's directories (the workspace, its own, the
/// results), which are root's on the disk and its own through the maps;
/// all of them or, undone, none.
fn remap(task: &TaskFile, idmap: &IdMap) -> Result<(), SetupError> {
    let paths = vec![
        task.workspace.clone(),
        task.agent_dir.clone(),
        task.results_dir(),
    ];
    let paths = outermost(paths.into_iter().filter(|p| p.exists()).collect());
    for (done, path) in paths.iter().enumerate() {
        if let Err(why) = idmap.remap(path) {
            for path in &paths[..done] {
                mounts::unmount(path);
            }
            return Err(why);
        }
    }
    Ok(())
}

/// A `/proc` of the PID namespace the caller is the init of: no other
/// process shows in it.
pub fn mount_proc() -> Result<(), SetupError> {
    mounts::special(
        "proc",
        Path::new("/proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None,
    )
}

/// Builds the view in the calling process's (new) mount namespace.
pub fn build(
    task: &TaskFile,
    settings: &SandboxSettings,
    idmap: Option<&IdMap>,
    own_user: bool,
) -> Result<View, SetupError> {
    mounts::make_private()?;
    let mut missing = Vec::new();
    // The layers are opened before the id maps go over the directories
    // they are in, and mounted after (an overlay cannot be id-mapped
    // itself: troupe gives root's agent its layers' files), before anything
    // covers or freezes them. A checkout that cannot be mounted is no
    // workspace at all, so the agent does not start.
    let layers = match &settings.overlay {
        Some(layers) => Some(super::overlay::Held::open(layers, idmap)?),
        None => None,
    };
    let remapped = match idmap.map(|idmap| remap(task, idmap)) {
        Some(Err(why)) => {
            missing.push(format!("the agent keeps uid 0 ({why})"));
            false
        }
        Some(Ok(())) => true,
        None => false,
    };
    if let Some(layers) = &layers {
        layers.mount_at(&task.workspace, own_user)?;
    }
    // Opened before any mount covers it or makes it read-only: the
    // agent's own writes go through this descriptor's mount.
    let journal = crate::fsutil::nofollow::open_dir(&task.subagent_dir())
        .map_err(|e| format!("cannot open {}: {e}", task.subagent_dir().display()))?;
    let kept = kept(task, settings);
    let mut space = match ScratchSpace::make(settings.max_memory) {
        Ok(space) => Some(space),
        Err(why) => {
            missing.push(format!(
                "/tmp, /var/tmp and /dev/shm are each bounded by --max-memory, not together ({why})"
            ));
            None
        }
    };
    let (mut scratch, sockets_masked) = match mask(task, settings, &kept, remapped, &mut space) {
        Ok(scratch) => (scratch, true),
        Err(why) => {
            missing.push(format!("the host's sockets stay reachable ({why})"));
            (Vec::new(), false)
        }
    };
    match own_dev(task, settings.max_memory, &kept, &mut space) {
        Ok(()) => scratch.push(PathBuf::from("/dev/shm")),
        Err(why) => missing.push(format!("/dev is the host's ({why})")),
    }
    let results_read_only = match protect_results(task) {
        Ok(()) => true,
        Err(why) => {
            missing.push(format!(
                "the results directory stays writable to the agent's commands ({why})"
            ));
            false
        }
    };
    let records_read_only = match freeze_agent(task, results_read_only) {
        Ok(()) => true,
        Err(why) => {
            missing.push(format!(
                "the agent's records stay writable to its commands ({why})"
            ));
            false
        }
    };
    let repository_read_only = match guard(settings) {
        Ok(()) => true,
        Err(why) => {
            missing.push(format!(
                "the repository and troupe's configuration stay writable ({why})"
            ));
            false
        }
    };
    // Last, over everything else: what is mounted in the workspace keeps
    // its own flags.
    if settings.write.is_some() {
        narrow_writes(task)?;
    }
    std::env::set_current_dir(&task.workspace)
        .map_err(|e| format!("cannot enter {}: {e}", task.workspace.display()))?;
    Ok(View {
        journal,
        remapped,
        scratch,
        results_read_only,
        records_read_only,
        repository_read_only,
        sockets_masked,
        overlay: settings.overlay.is_some(),
        missing,
    })
}

/// Empty tmpfs over the masks, the kept paths put back (read-only where
/// the role may not write them, since a scratch directory's rule would
/// cover them). Returns the scratch directories.
fn mask(
    task: &TaskFile,
    settings: &SandboxSettings,
    kept: &[PathBuf],
    remapped: bool,
    space: &mut Option<ScratchSpace>,
) -> Result<Vec<PathBuf>, SetupError> {
    let masks = masks(task, settings, remapped);
    let mut scratch = Vec::new();
    for (dir, mode, kind) in masks {
        let dir = dir.as_path();
        let is_dir = std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir());
        if !is_dir || kept.iter().any(|k| dir.starts_with(k)) {
            continue;
        }
        let inside: Vec<(&PathBuf, OwnedFd)> = kept
            .iter()
            .filter(|k| k.starts_with(dir))
            .map(|k| mounts::open_path(k).map(|fd| (k, fd)))
            .collect::<Result<_, _>>()?;
        match kind {
            Scratch::Yes => scratch_at(space, dir, settings.max_memory)?,
            Scratch::No => mounts::tmpfs(dir, mode, None)?,
        }
        // A mask whose paths could not all be put back would hide the
        // workspace itself: it goes again.
        if let Err(why) = put_back(task, &inside, dir, kind) {
            mounts::unmount(dir);
            return Err(why);
        }
        if kind == Scratch::Yes {
            scratch.push(dir.to_path_buf());
        }
    }
    Ok(scratch)
}

/// The kept paths `inside` a freshly masked `dir` bound back in from the
/// descriptors opened before. Under a scratch directory, whose write rule
/// covers everything beneath it, those the agent may not write are
/// read-only: all but a worker's workspace and own directory (the results
/// directory around them is made read-only later).
fn put_back(
    task: &TaskFile,
    inside: &[(&PathBuf, OwnedFd)],
    dir: &Path,
    kind: Scratch,
) -> Result<(), SetupError> {
    for (path, fd) in inside {
        make_mount_point(path, dir, Some(fd))?;
        mounts::bind_fd(fd.as_fd(), path)?;
        let holds_writes = task.workspace.starts_with(path) || task.agent_dir.starts_with(path);
        let writable = task.role == AgentRole::Worker && holds_writes;
        if kind == Scratch::Yes && !writable {
            mounts::read_only(path)?;
        }
    }
    Ok(())
}

/// The directories from `mask` down to `path` in the fresh tmpfs, and
/// `path` itself: a directory for what `source` (opened before the tmpfs
/// covered it) is a directory, else an empty file.
fn make_mount_point(path: &Path, mask: &Path, source: Option<&OwnedFd>) -> Result<(), SetupError> {
    let fail = |e: std::io::Error| format!("cannot make {} in the tmpfs: {e}", path.display());
    let is_dir = source.is_none_or(|fd| {
        nix::sys::stat::fstat(fd.as_fd()).is_ok_and(|stat| {
            nix::sys::stat::SFlag::from_bits_truncate(stat.st_mode)
                .contains(nix::sys::stat::SFlag::S_IFDIR)
        })
    });
    let parent = path.parent().unwrap_or(mask);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(if is_dir { path } else { parent })
        .map_err(fail)?;
    if !is_dir {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(path)
            .map_err(fail)?;
    }
    Ok(())
}

/// The agent's scratch space at `dir`: its share of the one scratch
/// tmpfs, or where that could not be made a tmpfs of its own.
fn scratch_at(
    space: &mut Option<ScratchSpace>,
    dir: &Path,
    size: Option<u64>,
) -> Result<(), SetupError> {
    match space {
        Some(space) => space.attach(dir),
        None => mounts::tmpfs(dir, 0o1777, size),
    }
}

/// A `/dev` of the agent's own: a tmpfs with the safe nodes bound in from
/// the host's, a `pts` instance and a `shm` of its own, and the kept paths
/// that were under `/dev` (a workspace in `/dev/shm`) put back.
fn own_dev(
    task: &TaskFile,
    max_memory: Option<u64>,
    kept: &[PathBuf],
    space: &mut Option<ScratchSpace>,
) -> Result<(), SetupError> {
    let dev = Path::new("/dev");
    let nodes: Vec<(PathBuf, OwnedFd)> = DEVICES
        .iter()
        .map(|name| dev.join(name))
        .filter(|path| path.exists())
        .map(|path| mounts::open_path(&path).map(|fd| (path, fd)))
        .collect::<Result<_, _>>()?;
    let inside: Vec<(&PathBuf, OwnedFd)> = kept
        .iter()
        .filter(|k| k.starts_with(dev))
        .map(|k| mounts::open_path(k).map(|fd| (k, fd)))
        .collect::<Result<_, _>>()?;
    mounts::tmpfs(dev, 0o755, Some(1 << 20))?;
    // Half a /dev (no /dev/null) would break every command: the host's
    // stays unless the whole of this one is made.
    let made = fill_dev(task, dev, &nodes, &inside, max_memory, space);
    if made.is_err() {
        mounts::unmount(dev);
    }
    made
}

fn fill_dev(
    task: &TaskFile,
    dev: &Path,
    nodes: &[(PathBuf, OwnedFd)],
    inside: &[(&PathBuf, OwnedFd)],
    max_memory: Option<u64>,
    space: &mut Option<ScratchSpace>,
) -> Result<(), SetupError> {
    for (path, fd) in nodes {
        make_mount_point(path, dev, Some(fd))?;
        mounts::bind_fd(fd.as_fd(), path)?;
    }
    let pts = dev.join("pts");
    make_mount_point(&pts, dev, None)?;
    mounts::special(
        "devpts",
        &pts,
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620"),
    )?;
    let shm = dev.join("shm");
    make_mount_point(&shm, dev, None)?;
    scratch_at(space, &shm, max_memory)?;
    let links = [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ];
    for (name, target) in links {
        std::os::unix::fs::symlink(target, dev.join(name))
            .map_err(|e| format!("cannot make /dev/{name}: {e}"))?;
    }
    put_back(task, inside, dev, Scratch::Yes)
}

/// A worker sees the results directory read-only but for its own
/// directory (and its checkout, when that lies there too); a reviewer
/// sees its whole workspace, and the results, read-only.
fn protect_results(task: &TaskFile) -> Result<(), SetupError> {
    let results = task.results_dir();
    match task.role {
        AgentRole::Reviewer => {
            mounts::freeze(&task.workspace)?;
            if !results.starts_with(&task.workspace) && results.exists() {
                mounts::freeze(&results)?;
            }
            Ok(())
        }
        AgentRole::Worker => {
            mounts::bind(&results, &results)?;
            for dir in [&task.agent_dir, &task.workspace] {
                if dir.starts_with(&results) && *dir != results {
                    mounts::bind(dir, dir)?;
                }
            }
            mounts::read_only(&results)
        }
    }
}

/// A worker whose step's powers name what it may write: the workspace
/// read-only, each of those paths writable on it. A mount's flag, since a
/// scratch directory's Landlock rule covers a workspace under `/tmp`, and
/// Landlock cannot take a path back out of a rule. A step whose paths
/// cannot be held to is not run.
fn narrow_writes(task: &TaskFile) -> Result<(), SetupError> {
    let opened = super::open_write_paths(task).map_err(|e| e.to_string())?;
    mounts::bind(&task.workspace, &task.workspace)?;
    for (path, fd) in &opened {
        mounts::bind_fd(fd.as_fd(), path)?;
    }
    mounts::read_only(&task.workspace)
}

/// The agent's `.subagent/` read-only (a reviewer's is, with the results
/// directory, when that could be made read-only).
fn freeze_agent(task: &TaskFile, results_read_only: bool) -> Result<(), SetupError> {
    match task.role {
        AgentRole::Reviewer if results_read_only => Ok(()),
        AgentRole::Reviewer => Err(SetupError::Refused(
            "the reviewer's workspace is not read-only".to_string(),
        )),
        AgentRole::Worker => mounts::freeze(&task.subagent_dir()),
    }
}

/// The task's read-only paths frozen and its hidden files emptied, those
/// that are there (a link is left alone: freezing it would freeze where
/// it points).
fn guard(settings: &SandboxSettings) -> Result<(), SetupError> {
    let present =
        |path: &PathBuf| std::fs::symlink_metadata(path).is_ok_and(|m| !m.file_type().is_symlink());
    for path in settings.read_only.iter().filter(|p| present(p)) {
        mounts::freeze(path)?;
    }
    for path in settings.hidden.iter().filter(|p| present(p)) {
        mounts::bind(Path::new("/dev/null"), path)?;
    }
    Ok(())
}
