//! A directory held by one process for as long as it lives: a flock on
//! the directory itself, no lock file (nothing to leave behind, nothing
//! an agent could plant), which the kernel drops when the process dies,
//! however it dies. So "is anyone at work here" never trusts a pid or a
//! status file that a killed process left saying `running`; and who holds
//! it is the kernel's word too, from `/proc/locks`.
//!
//! A background agent's supervisor holds the agent's directory
//! (`supervisor::registry`), a team run its run directory (`run`).

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg, OFlag};
use nix::sys::stat::Mode;

use super::nofollow;

/// A directory, held until dropped.
#[derive(Debug)]
pub struct DirLock {
    _lock: Flock<File>,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Someone else holds it: this pid, when the kernel says which.
    #[error("it is held by {}", .pid.map_or_else(|| "another process".to_string(), |pid| format!("pid {pid}")))]
    Held { pid: Option<u32> },
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// How often, and how far apart, a lock found held is asked for again
/// before it counts as someone's: a reader that only asks whether the
/// directory is held (`probe`) takes the lock for a moment to find out.
const TRIES: u32 = 10;
const PAUSE: Duration = Duration::from_millis(5);

impl DirLock {
    /// Takes `dir` (a real path: no link on it is followed), or says who
    /// has it.
    pub fn take(dir: &Path) -> Result<DirLock, LockError> {
        let mut tries = 0;
        loop {
            let file = open(dir)?;
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => return Ok(DirLock { _lock: lock }),
                Err((_, Errno::EWOULDBLOCK)) if tries + 1 < TRIES => {
                    tries += 1;
                    std::thread::sleep(PAUSE);
                }
                Err((_, Errno::EWOULDBLOCK)) => {
                    return Err(LockError::Held {
                        pid: holder_pid(dir),
                    });
                }
                Err((_, e)) => return Err(LockError::Io(e.into())),
            }
        }
    }
}

/// Whether some process holds `dir`; an error when that cannot be told
/// (the directory cannot be opened).
pub fn probe(dir: &Path) -> io::Result<bool> {
    let file = open(dir)?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(_free) => Ok(false),
        Err((_, Errno::EWOULDBLOCK)) => Ok(true),
        Err((_, e)) => Err(e.into()),
    }
}

/// Whether some process holds `dir`; no when it cannot be opened.
pub fn is_held(dir: &Path) -> bool {
    probe(dir).unwrap_or(false)
}

/// The pid holding `dir`, from the kernel (`/proc/locks`), not from a
/// file a dead process may have left.
pub fn holder_pid(dir: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(dir).ok()?;
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    lock_holder(&locks, meta.dev(), meta.ino())
}

/// The first of `dirs` that the process `pid` holds.
pub fn held_by(dirs: impl IntoIterator<Item = PathBuf>, pid: u32) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    dirs.into_iter().find(|dir| {
        std::fs::symlink_metadata(dir)
            .is_ok_and(|meta| lock_holder(&locks, meta.dev(), meta.ino()) == Some(pid))
    })
}

/// The pid holding a write flock on the inode `dev`:`ino`, from the text
/// of `/proc/locks` (`1: FLOCK  ADVISORY  WRITE 8698 fe:00:10330188 0 EOF`;
/// waiters are marked `->` and skipped).
fn lock_holder(locks: &str, dev: u64, ino: u64) -> Option<u32> {
    let inode = format!(
        "{:02x}:{:02x}:{ino}",
        nix::sys::stat::major(dev),
        nix::sys::stat::minor(dev)
    );
    locks.lines().find_map(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            [_, "FLOCK", _, "WRITE", pid, id, ..] if *id == inode => pid.parse().ok(),
            _ => None,
        }
    })
}

/// The directory, reached without a link, open for its lock (closed on
/// exec: no child keeps a lock alive after its holder died).
fn open(dir: &Path) -> io::Result<File> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY;
    Ok(File::from(nofollow::open(dir, flags, Mode::empty())?))
}

/// Why a workspace cannot be written now: another troupe writes it (a
/// run whose workers share it, or an apply), named with its run.
pub fn busy(workspace: &Path, error: &LockError) -> String {
    match error {
        LockError::Held { pid: Some(pid) } => format!(
            "{} is being written by another troupe (pid {pid}{}: a run whose workers share it, or an apply); wait for it to end, or use --isolation worktree",
            workspace.display(),
            run_held_by(workspace, *pid).map_or_else(String::new, |run| format!(", run {run}"))
        ),
        LockError::Held { pid: None } => format!(
            "{} is being written by another troupe (its pid unknown: a run whose workers share it, or an apply); wait for it to end, or use --isolation worktree",
            workspace.display(),
        ),
        LockError::Io(e) => format!("cannot hold {}: {e}", workspace.display()),
    }
}

/// The run of `workspace` whose directory the troupe `pid` holds: the run
/// it runs, or applies.
fn run_held_by(workspace: &Path, pid: u32) -> Option<String> {
    let runs = std::fs::read_dir(workspace.join(crate::protocol::RESULTS_DIR)).ok()?;
    let dirs = runs.filter_map(Result::ok).map(|entry| entry.path());
    let run = held_by(dirs, pid)?;
    Some(run.file_name()?.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_is_whoever_the_kernel_says_has_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().canonicalize().unwrap();
        assert!(!probe(&path).unwrap());
        assert_eq!(holder_pid(&path), None);
        let lock = DirLock::take(&path).unwrap();
        assert!(is_held(&path));
        assert_eq!(holder_pid(&path), Some(std::process::id()));
        match DirLock::take(&path) {
            Err(LockError::Held { pid }) => assert_eq!(pid, Some(std::process::id())),
            other => panic!("taken twice: {other:?}"),
        }
        drop(lock);
        assert!(!is_held(&path));
        assert!(
            probe(&path.join("gone")).is_err(),
            "no directory, no answer"
        );
    }

    #[test]
    fn waiters_and_other_inodes_are_not_holders() {
        let locks = "1: FLOCK  ADVISORY  WRITE 8698 fe:00:10330188 0 EOF\n\
                     1: -> FLOCK  ADVISORY  WRITE 9000 fe:00:10330188 0 EOF\n\
                     2: POSIX  ADVISORY  WRITE 77 fe:00:42 0 EOF\n";
        let dev = nix::sys::stat::makedev(0xfe, 0);
        assert_eq!(lock_holder(locks, dev, 10330188), Some(8698));
        assert_eq!(lock_holder(locks, dev, 42), None);
        assert_eq!(lock_holder(locks, dev, 1), None);
    }
}
