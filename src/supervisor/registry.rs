//! Which agents a results directory holds, and which of them are alive.
//!
//! Every agent directory has a lock file, `.subagent.lock`, held (flock)
//! by the process that supervises the agent for as long as it lives; the
//! kernel drops it when that process dies, however it dies. So "is it
//! running" never trusts a pid or a status file, and a supervisor killed
//! without a word is seen as gone at once. An index,
//! `<results>/.agents/<id>.json`, maps agent ids to their directories,
//! which `--deliverables-dir` may put anywhere.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg, OFlag};
use nix::sys::stat::Mode;
use serde::{Deserialize, Serialize};

use crate::fsutil::{Durability, nofollow, read_json, write_json_atomic};

const LOCK_FILE: &str = ".subagent.lock";
const INDEX_DIR: &str = ".agents";

/// Who holds an agent directory, as written in its lock file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub agent_id: String,
    pub pid: u32,
}

/// An agent directory, held until dropped.
pub struct AgentLock {
    _lock: Flock<File>,
}

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("{dir} is in use by agent {} (pid {}); wait for it (troupe wait {0}) or stop it (troupe terminate {0})", .holder.agent_id, .holder.pid, dir = .dir.display())]
    Busy { dir: PathBuf, holder: Holder },
    #[error("{dir} is in use by another troupe")]
    BusyUnknown { dir: PathBuf },
    #[error("agent {id} is already running in {dir}; wait for it (troupe wait {id}) or stop it (troupe terminate {id})", dir = .dir.display())]
    IdRunning { id: String, dir: PathBuf },
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
    /// Takes `agent_dir` for `holder`, or says who has it.
    pub fn acquire(agent_dir: &Path, holder: &Holder) -> Result<AgentLock, RegistryError> {
        let path = agent_dir.join(LOCK_FILE);
        let file = open_lock(&path, OFlag::O_RDWR | OFlag::O_CREAT).map_err(io(&path))?;
        let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => lock,
            Err((mut file, _)) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(match serde_json::from_str::<Holder>(&text) {
                    Ok(holder) => RegistryError::Busy {
                        dir: agent_dir.to_path_buf(),
                        holder,
                    },
                    Err(_) => RegistryError::BusyUnknown {
                        dir: agent_dir.to_path_buf(),
                    },
                });
            }
        };
        let text = serde_json::to_string(holder).unwrap_or_default();
        lock.set_len(0)
            .and_then(|()| lock.rewind())
            .and_then(|()| lock.write_all(text.as_bytes()))
            .map_err(io(&path))?;
        Ok(AgentLock { _lock: lock })
    }
}

/// Whether some process holds `agent_dir`.
pub fn is_held(agent_dir: &Path) -> bool {
    let Ok(file) = open_lock(&agent_dir.join(LOCK_FILE), OFlag::O_RDONLY) else {
        return false;
    };
    Flock::lock(file, FlockArg::LockExclusiveNonblock).is_err()
}

/// The holder written in `agent_dir`'s lock file, if any.
pub fn holder(agent_dir: &Path) -> Option<Holder> {
    read_json(&agent_dir.join(LOCK_FILE), "the lock file").ok()
}

/// The lock file, reached without a link; it must be a regular file with
/// no other name, since holding it truncates it.
fn open_lock(path: &Path, flags: OFlag) -> std::io::Result<File> {
    let fd = nofollow::open(path, flags, Mode::from_bits_truncate(0o644))?;
    nofollow::sole_regular_file(fd.as_fd())?;
    Ok(File::from(fd))
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct IndexEntry {
    agent_id: String,
    agent_dir: PathBuf,
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
/// elsewhere, or while `max` background agents already run.
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
        return Err(match holder(agent_dir) {
            Some(holder) => RegistryError::Busy {
                dir: agent_dir.to_path_buf(),
                holder,
            },
            None => RegistryError::BusyUnknown {
                dir: agent_dir.to_path_buf(),
            },
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
