//! The path fence: every path a tool touches must lie in the workspace or
//! the agent's own directory, after `..` and symlinks are resolved.
//!
//! A path is first resolved here, which is what explains itself to the
//! model (`..` that leads out, a link to /etc). The file is then opened
//! from a descriptor of the workspace or the agent's directory held since
//! the start, by the kernel, with no link followed on the real path it
//! resolved to (`openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`): a link
//! swapped in between the two is refused, never followed out. Only regular
//! files are read or written, and a file with a second hard link is not
//! written, since its other name may be outside. The kernel sandbox behind
//! this is what holds when a command goes around the tools.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use crate::fsutil::{nofollow, normalize};
use crate::protocol::SUBAGENT_DIR;

/// How many symlinks a path may pass through, as the kernel's own limit.
const MAX_LINKS: usize = 40;

#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    #[error("the path is empty")]
    Empty,
    #[error(
        "`{raw}` is outside the workspace ({workspace}); tools may only use paths inside it or in the agent's own directory"
    )]
    Outside { raw: String, workspace: String },
    #[error(
        "`{raw}` leads through a symlink to {target}, outside the workspace; symlinks that lead out are not followed"
    )]
    SymlinkOut { raw: String, target: String },
    #[error(
        "`{raw}` is in {SUBAGENT_DIR}/, troupe's own record of this agent, which tools may read but not write"
    )]
    Protected { raw: String },
    #[error("`{raw}` passes through too many symlinks")]
    LinkLoop { raw: String },
    #[error("cannot resolve `{raw}`: {source}")]
    Io { raw: String, source: io::Error },
}

#[derive(Debug, Clone)]
pub struct PathFence {
    workspace: PathBuf,
    agent_dir: PathBuf,
    roots: Arc<Roots>,
}

/// The two directories, open, so that every file is opened from them.
#[derive(Debug)]
struct Roots {
    workspace: OwnedFd,
    agent_dir: OwnedFd,
}

impl PathFence {
    /// Both directories must exist; they are canonicalized and opened once
    /// here.
    pub fn new(workspace: &Path, agent_dir: &Path) -> io::Result<Self> {
        let workspace = workspace.canonicalize()?;
        let agent_dir = agent_dir.canonicalize()?;
        let roots = Roots {
            workspace: nofollow::open_dir(&workspace)?,
            agent_dir: nofollow::open_dir(&agent_dir)?,
        };
        Ok(PathFence {
            workspace,
            agent_dir,
            roots: Arc::new(roots),
        })
    }

    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    pub fn agent_dir(&self) -> &Path {
        &self.agent_dir
    }

    /// Opens the resolved path `real` to read: a regular file only, opened
    /// non-blocking, so a FIFO cannot hold the agent up.
    pub fn open_file(&self, real: &Path) -> io::Result<OwnedFd> {
        let fd = self.open(
            real,
            OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY,
            Mode::empty(),
        )?;
        nofollow::regular_file(fd.as_fd())?;
        Ok(fd)
    }

    /// Opens the resolved directory `real` to list it.
    pub fn open_dir(&self, real: &Path) -> io::Result<OwnedFd> {
        self.open(real, OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty())
    }

    /// Opens the resolved path `real` to change it in place, creating it
    /// (and its parent directories) unless `existing`. It must be a regular
    /// file with no other name.
    pub fn open_to_write(&self, real: &Path, existing: bool) -> io::Result<File> {
        let flags = OFlag::O_RDWR | OFlag::O_NONBLOCK | OFlag::O_NOCTTY;
        let fd = if existing {
            self.open(real, flags, Mode::empty())?
        } else {
            let (root, rel) = self.beneath(real)?;
            let (parent, name) = nofollow::split(rel)?;
            let dir = nofollow::create_dirs_beneath(root, parent)?;
            nofollow::open_beneath(
                dir.as_fd(),
                Path::new(name),
                flags | OFlag::O_CREAT,
                Mode::from_bits_truncate(0o666),
            )?
        };
        nofollow::sole_regular_file(fd.as_fd())?;
        Ok(File::from(fd))
    }

    fn open(&self, real: &Path, flags: OFlag, mode: Mode) -> io::Result<OwnedFd> {
        let (root, rel) = self.beneath(real)?;
        nofollow::open_beneath(root, rel, flags, mode)
    }

    /// The directory `real` lies in, and the path from it.
    fn beneath<'p>(&self, real: &'p Path) -> io::Result<(BorrowedFd<'_>, &'p Path)> {
        if let Ok(rel) = real.strip_prefix(&self.workspace) {
            return Ok((self.roots.workspace.as_fd(), rel));
        }
        if let Ok(rel) = real.strip_prefix(&self.agent_dir) {
            return Ok((self.roots.agent_dir.as_fd(), rel));
        }
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the path is outside the workspace",
        ))
    }

    /// The real path of `raw` for reading.
    pub fn resolve_read(&self, raw: &str) -> Result<PathBuf, FenceError> {
        self.resolve(raw)
    }

    /// The real path of `raw` for writing: like reading, and never into the
    /// agent's `.subagent/`.
    pub fn resolve_write(&self, raw: &str) -> Result<PathBuf, FenceError> {
        let path = self.resolve(raw)?;
        if path.starts_with(self.agent_dir.join(SUBAGENT_DIR)) {
            return Err(FenceError::Protected {
                raw: raw.to_string(),
            });
        }
        Ok(path)
    }

    /// How a path is shown to the model: relative to the workspace.
    pub fn display(&self, path: &Path) -> String {
        crate::protocol::display_in(&self.workspace, path)
    }

    fn resolve(&self, raw: &str) -> Result<PathBuf, FenceError> {
        if raw.trim().is_empty() {
            return Err(FenceError::Empty);
        }
        let given = Path::new(raw);
        let candidate = if given.is_absolute() {
            normalize(given)
        } else {
            normalize(&self.workspace.join(given))
        };
        if !self.contains(&candidate) {
            return Err(FenceError::Outside {
                raw: raw.to_string(),
                workspace: self.workspace.display().to_string(),
            });
        }
        let real = real_path(&candidate, 0).map_err(|e| match e {
            RealPathError::Loop => FenceError::LinkLoop {
                raw: raw.to_string(),
            },
            RealPathError::Io(source) => FenceError::Io {
                raw: raw.to_string(),
                source,
            },
        })?;
        if !self.contains(&real) {
            return Err(FenceError::SymlinkOut {
                raw: raw.to_string(),
                target: real.display().to_string(),
            });
        }
        Ok(real)
    }

    fn contains(&self, path: &Path) -> bool {
        path.starts_with(&self.workspace) || path.starts_with(&self.agent_dir)
    }
}

enum RealPathError {
    Loop,
    Io(io::Error),
}

/// Where `path` really is: every symlink on it resolved, including a last
/// component that is a link to something not yet created. Components that
/// do not exist yet are kept as they are.
fn real_path(path: &Path, depth: usize) -> Result<PathBuf, RealPathError> {
    if depth > MAX_LINKS {
        return Err(RealPathError::Loop);
    }
    let mut existing = path.to_path_buf();
    let mut missing = Vec::new();
    loop {
        match std::fs::symlink_metadata(&existing) {
            Ok(meta) => {
                let base = match existing.canonicalize() {
                    Ok(base) => base,
                    Err(e) if e.kind() == io::ErrorKind::NotFound && meta.is_symlink() => {
                        let target = std::fs::read_link(&existing).map_err(RealPathError::Io)?;
                        let parent = existing.parent().unwrap_or(Path::new("/"));
                        let through = normalize(&parent.join(target));
                        return real_path(&rejoin(through, &missing), depth + 1);
                    }
                    Err(e) => return Err(RealPathError::Io(e)),
                };
                return Ok(rejoin(base, &missing));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let Some(name) = existing.file_name().map(|n| n.to_os_string()) else {
                    return Err(RealPathError::Io(e));
                };
                missing.push(name);
                if !existing.pop() {
                    return Err(RealPathError::Io(e));
                }
            }
            Err(e) => return Err(RealPathError::Io(e)),
        }
    }
}

fn rejoin(mut base: PathBuf, missing: &[std::ffi::OsString]) -> PathBuf {
    for name in missing.iter().rev() {
        base.push(name);
    }
    base
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence() -> (tempfile::TempDir, PathFence) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let agent = ws.join("sub_agent_results/agent_1");
        std::fs::create_dir_all(agent.join(SUBAGENT_DIR)).unwrap();
        let fence = PathFence::new(&ws, &agent).unwrap();
        (dir, fence)
    }

    #[test]
    fn inside_paths_resolve_and_escapes_are_refused() {
        let (dir, fence) = fence();
        let ws = fence.workspace().to_path_buf();
        assert_eq!(fence.resolve_write("a/b.txt").unwrap(), ws.join("a/b.txt"));
        assert_eq!(fence.resolve_read("a/../b").unwrap(), ws.join("b"));
        assert!(matches!(
            fence.resolve_read("../x"),
            Err(FenceError::Outside { .. })
        ));
        assert!(matches!(
            fence.resolve_write("/etc/passwd"),
            Err(FenceError::Outside { .. })
        ));
        std::os::unix::fs::symlink(dir.path(), ws.join("out")).unwrap();
        assert!(matches!(
            fence.resolve_write("out/x"),
            Err(FenceError::SymlinkOut { .. })
        ));
        std::os::unix::fs::symlink(dir.path().join("nope"), ws.join("dangling")).unwrap();
        assert!(matches!(
            fence.resolve_write("dangling"),
            Err(FenceError::SymlinkOut { .. })
        ));
        assert!(matches!(
            fence.resolve_write("sub_agent_results/agent_1/.subagent/conversations.json"),
            Err(FenceError::Protected { .. })
        ));
    }
}
