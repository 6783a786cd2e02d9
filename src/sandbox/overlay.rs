//! An isolated attempt's checkout as a copy-on-write overlay, mounted at
//! the agent's workspace in its mount namespace: the read-only tree of
//! the head the attempt starts from below, shared by every attempt made
//! from it, and the attempt's own directory above, which takes every
//! write. Making a checkout then costs nothing in the repository's size,
//! and what the attempt changed is exactly what its upper layer holds,
//! which troupe reads into the attempt's tree.
//!
//! The features that would put something other than files, directories,
//! links and whiteouts in the upper layer are off (`redirect_dir` neither
//! made nor followed, `metacopy`, `index`, `xino`): renaming a directory
//! of the lower layer fails with `EXDEV`, which `mv` answers by copying. In a user namespace
//! of its own (an ordinary user's agent) the overlay keeps its markers in
//! `user.` attributes (`userxattr`).

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

use nix::mount::{MsFlags, mount};

use super::idmap::IdMap;
use super::mounts;
use crate::protocol::OverlayLayers;

/// The layers' directories, held open from before the agent's id maps
/// go over the directories they are in: the overlay is made on the
/// layers as they are on the disk (the kernel writes its upper layer as
/// the mounter, root, whose id no map holds), reached through these.
pub struct Held {
    lower: Vec<OwnedFd>,
    upper: Option<(OwnedFd, OwnedFd)>,
}

impl Held {
    pub fn open(layers: &OverlayLayers) -> Result<Held, String> {
        let lower = layers
            .lower
            .iter()
            .map(|dir| mounts::open_path(dir))
            .collect::<Result<_, _>>()?;
        let upper = match &layers.upper {
            Some(upper) => Some((
                mounts::open_path(&upper.dir)?,
                mounts::open_path(&upper.work)?,
            )),
            None => None,
        };
        Ok(Held { lower, upper })
    }

    /// Mounts the held layers at `at`; `own_user` when the caller is in a
    /// user namespace of its own. Root's agent gets its read-only layers
    /// through its id maps, as its other directories (`idmap`): a base's
    /// files, root's on the disk, are its own in the checkout.
    pub fn mount_at(&self, at: &Path, own_user: bool, idmap: Option<&IdMap>) -> Result<(), String> {
        let named = |fd: &OwnedFd| format!("/proc/self/fd/{}", fd.as_raw_fd());
        let mapped: Vec<OwnedFd> = match idmap {
            Some(idmap) => self
                .lower
                .iter()
                .map(|fd| idmap.mapped_copy(fd.as_fd(), at))
                .collect::<Result<_, _>>()?,
            None => Vec::new(),
        };
        let lower: Vec<String> = match idmap {
            Some(_) => mapped.iter().map(named).collect(),
            None => self.lower.iter().map(named).collect(),
        };
        let mut options = format!("lowerdir={}", lower.join(":"));
        let mut flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
        match &self.upper {
            Some((dir, work)) => {
                options.push_str(&format!(",upperdir={},workdir={}", named(dir), named(work)));
            }
            None => flags |= MsFlags::MS_RDONLY,
        }
        mount_with(at, flags, options, own_user)
    }
}

fn mount_with(
    at: &Path,
    flags: MsFlags,
    mut options: String,
    own_user: bool,
) -> Result<(), String> {
    let fail = |why: String| {
        format!(
            "cannot mount the attempt's copy-on-write checkout at {}: {why}",
            at.display()
        )
    };
    options.push_str(",redirect_dir=nofollow,metacopy=off,index=off,xino=off");
    if own_user {
        options.push_str(",userxattr");
    }
    mount(
        Some("overlay"),
        at,
        Some("overlay"),
        flags,
        Some(options.as_str()),
    )
    .map_err(|e| fail(e.to_string()))
}
