//! Which agents a results directory holds, and which of them are alive.
//!
//! Every agent directory is held (`fsutil::dir_lock`: a flock on the
//! directory itself) by the process that supervises the agent for as long
//! as it lives; the kernel drops the lock when that process dies, however
//! it dies. So "is it running" never trusts a pid or a status file, and a
//! supervisor killed without a word is seen as gone at once. The holder's
//! pid is the kernel's word; its agent id is read from the agent's status
//! file, only once the lock says someone holds it. An index,
//! `<results>/.agents/<id>.json`, maps agent ids to their directories,
//! which `--deliverables-dir` may put anywhere.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use crate::fsutil::dir_lock::is_held;
use crate::fsutil::dir_lock::{DirLock, LockError, holder_pid};
use crate::fsutil::{Durability, nofollow, read_json, write_json_atomic};
use crate::protocol::SUBAGENT_DIR;
use crate::supervisor::status::StatusFile;

const INDEX_DIR: &str = ".agents";

/// Who holds an agent directory, as its status file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub agent_id: String,
    pub pid: u32,
}

/// An agent directory, held until dropped.
pub struct AgentLock {
    _lock: DirLock,
}

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("{dir} is in use by agent {} (pid {}); wait for it (troupe wait {0}) or stop it (troupe terminate {0})", .holder.agent_id, .holder.pid, dir = .dir.display())]
    Busy { dir: PathBuf, holder: Holder },
    #[error("{dir} is in use by another troupe")]
    BusyUnknown { dir: PathBuf },
    #[error("agent {id} is already running in {dir}; wait for it (troupe wait {id}) or stop it (troupe terminate {id})", dir = .dir.display())]
    IdRunning { id: String, dir: PathBuf },
    #[error("processes of the agent that last ran in {dir} still run (pids {pids:?}, its session); troupe will not start another there until they are gone: kill them, or give another --id", dir = .dir.display())]
    Leftovers { dir: PathBuf, pids: Vec<i32> },
    #[error("{running} background agents are running in {results} (--max-concurrent {max}); wait for one to finish", results = .results.display())]
    TooMany {
        running: usize,
        max: usize,
        results: PathBuf,
    },
    #[error("cannot use {path}: {source}", path = .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RegistryError + '_ {
    move |source| RegistryError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl AgentLock {
    /// Takes `agent_dir`, or says who has it.
    pub fn acquire(agent_dir: &Path) -> Result<AgentLock, RegistryError> {
        match DirLock::take(agent_dir) {
            Ok(lock) => Ok(AgentLock { _lock: lock }),
            Err(LockError::Io(e)) => Err(io(agent_dir)(e)),
            Err(LockError::Held { .. }) => Err(busy(agent_dir)),
        }
    }
}

/// Who holds `agent_dir`'s lock: the pid from the kernel, not from a file
/// a dead supervisor may have left; the agent id from the status file.
pub fn holder(agent_dir: &Path) -> Option<Holder> {
    let pid = holder_pid(agent_dir)?;
    let agent_id = StatusFile::load(&agent_dir.join(SUBAGENT_DIR))
        .map(|status| status.agent_id.to_string())
        .unwrap_or_else(|| agent_dir.display().to_string());
    Some(Holder { agent_id, pid })
}

/// `agent_dir` is held: by whom, if the kernel says.
fn busy(agent_dir: &Path) -> RegistryError {
    match holder(agent_dir) {
        Some(holder) => RegistryError::Busy {
            dir: agent_dir.to_path_buf(),
            holder,
        },
        None => RegistryError::BusyUnknown {
            dir: agent_dir.to_path_buf(),
        },
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct IndexEntry {
    agent_id: String,
    agent_dir: PathBuf,
}

/// The results directory's index, held while a background spawn counts
/// the running agents and starts its own; another spawn waits for it.
pub async fn count_lock(results: &Path) -> Result<DirLock, RegistryError> {
    let dir = results.join(INDEX_DIR);
    nofollow::create_dir_all(&dir).map_err(io(&dir))?;
    loop {
        match DirLock::take(&dir) {
            Ok(lock) => return Ok(lock),
            Err(LockError::Held { .. }) => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(LockError::Io(e)) => return Err(io(&dir)(e)),
        }
    }
}

/// Records where agent `id` lives, for `status`, `wait`, `show`.
pub fn index(results: &Path, id: &str, agent_dir: &Path) -> Result<(), RegistryError> {
    let dir = results.join(INDEX_DIR);
    nofollow::create_dir_all(&dir).map_err(io(&dir))?;
    let path = dir.join(format!("{id}.json"));
    let entry = IndexEntry {
        agent_id: id.to_string(),
        agent_dir: agent_dir.to_path_buf(),
    };
    write_json_atomic(&path, &entry, Durability::Commit).map_err(io(&path))
}

/// The directory of agent `id`: from the index, else the default place.
pub fn agent_dir(results: &Path, id: &str) -> PathBuf {
    let path = results.join(INDEX_DIR).join(format!("{id}.json"));
    let indexed: Option<IndexEntry> = read_json(&path, "the agent index").ok();
    match indexed {
        Some(entry) => entry.agent_dir,
        None => results.join(format!("agent_{id}")),
    }
}

/// Every agent id the index knows, sorted numerically where they are
/// numbers.
pub fn known_ids(results: &Path) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(results.join(INDEX_DIR))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| {
                    e.file_name()
                        .to_str()?
                        .strip_suffix(".json")
                        .map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default();
    ids.sort_by_key(|id| (id.parse::<u64>().unwrap_or(u64::MAX), id.clone()));
    ids
}

/// Refuses a new agent `id` in `agent_dir` while one with that id runs
/// elsewhere, while anything of the agent that last ran in `agent_dir`
/// still runs, or while `max` background agents already run.
pub fn check_new(
    results: &Path,
    id: &str,
    agent_dir: &Path,
    max_background: Option<usize>,
) -> Result<(), RegistryError> {
    let current = self::agent_dir(results, id);
    if current != agent_dir && is_held(&current) {
        return Err(RegistryError::IdRunning {
            id: id.to_string(),
            dir: current,
        });
    }
    if is_held(agent_dir) {
        return Err(busy(agent_dir));
    }
    // Nothing of the agent that last ran there may be left to write into
    // the new one's records: troupe's own record names its session.
    let last = StatusFile::load(&agent_dir.join(SUBAGENT_DIR)).and_then(|s| s.agent_pid);
    let pids = last
        .map(crate::process::session::members)
        .unwrap_or_default();
    if !pids.is_empty() {
        return Err(RegistryError::Leftovers {
            dir: agent_dir.to_path_buf(),
            pids,
        });
    }
    if let Some(max) = max_background {
        let running = known_ids(results)
            .iter()
            .filter(|other| is_held(&self::agent_dir(results, other)))
            .count();
        if running >= max {
            return Err(RegistryError::TooMany {
                running,
                max,
                results: results.to_path_buf(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_agent_directory_is_busy_with_its_holder() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_held(dir.path()));
        assert_eq!(holder(dir.path()), None);
        let lock = AgentLock::acquire(dir.path()).unwrap();
        assert!(is_held(dir.path()));
        let held = holder(dir.path()).unwrap();
        assert_eq!(held.pid, std::process::id());
        assert!(matches!(
            AgentLock::acquire(dir.path()),
            Err(RegistryError::Busy { .. })
        ));
        drop(lock);
        assert!(!is_held(dir.path()));
    }
}
