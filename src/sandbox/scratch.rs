//! The agent's scratch space: one tmpfs, sized once by `--max-memory`,
//! seen at `/tmp`, `/var/tmp` and `/dev/shm`. Three tmpfs of that size
//! each let a command hold three times its bound in files where no
//! control group counts them (an ordinary user's agent): now what the
//! three hold together is bounded.
//!
//! The tmpfs is mounted for a moment over `/tmp` in the agent's mount
//! namespace, a directory made in it for each place, each directory
//! copied out as a detached mount, and the tmpfs taken away again: the
//! copies keep it alive, and each is attached where the view wants it.

use super::SetupError;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::mounts;

/// Where the tmpfs is mounted while its directories are copied out.
const STAGE: &str = "/tmp";

/// The places that share the scratch tmpfs.
pub const PLACES: [&str; 3] = ["/tmp", "/var/tmp", "/dev/shm"];

/// The scratch tmpfs's directories, detached, by the place each goes.
pub struct ScratchSpace {
    trees: Vec<(PathBuf, OwnedFd)>,
}

impl ScratchSpace {
    /// One tmpfs of `size` bytes (unbounded but by the kernel's default
    /// without one), with a directory for each of `PLACES`.
    pub fn make(size: Option<u64>) -> Result<ScratchSpace, SetupError> {
        let stage = Path::new(STAGE);
        mounts::tmpfs(stage, 0o755, size)?;
        let trees = PLACES
            .iter()
            .enumerate()
            .map(|(n, place)| {
                let dir = stage.join(n.to_string());
                std::fs::create_dir(&dir)
                    .and_then(|()| {
                        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777))
                    })
                    .map_err(|e| {
                        format!("cannot make {} in the scratch tmpfs: {e}", dir.display())
                    })?;
                let fd = mounts::open_path(&dir)?;
                let tree = mounts::clone_tree(fd.as_fd(), &dir)?;
                Ok((PathBuf::from(place), tree))
            })
            .collect::<Result<Vec<_>, SetupError>>();
        mounts::unmount(stage);
        Ok(ScratchSpace { trees: trees? })
    }

    /// Attaches the scratch directory for `place` there; an error when it
    /// was attached already or is not one of `PLACES`.
    pub fn attach(&mut self, place: &Path) -> Result<(), SetupError> {
        let at = self
            .trees
            .iter()
            .position(|(p, _)| p == place)
            .ok_or_else(|| format!("{} has no scratch directory", place.display()))?;
        let (_, tree) = self.trees.swap_remove(at);
        mounts::attach(tree.as_fd(), place)
    }
}
