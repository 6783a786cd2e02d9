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

use super::SetupError;
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
    read_only: bool,
}

impl Held {
    /// The layers opened; root's agent (`idmap`) gets its read-only ones
    /// through its id maps, as its other directories: a detached id-mapped
    /// copy of each, made before any of its directories is remapped (a
    /// copy made after would hold those remapped mounts, which cannot be
    /// mapped again). A base's files, root's on the disk, are then its
    /// own in the checkout.
    pub fn open(layers: &OverlayLayers, idmap: Option<&IdMap>) -> Result<Held, SetupError> {
        let lower = layers
            .lower
            .iter()
            .map(|dir| {
                let fd = mounts::open_path(dir)?;
                match idmap {
                    Some(idmap) => idmap.mapped_copy(fd.as_fd(), dir),
                    None => Ok(fd),
                }
            })
            .collect::<Result<_, _>>()?;
        let upper = match &layers.upper {
            Some(upper) => Some((
                mounts::open_path(&upper.dir)?,
                mounts::open_path(&upper.work)?,
            )),
            None => None,
        };
        Ok(Held {
            lower,
            upper,
            read_only: layers.read_only,
        })
    }

    /// Mounts the held layers at `at`; `own_user` when the caller is in a
    /// user namespace of its own.
    pub fn mount_at(&self, at: &Path, own_user: bool) -> Result<(), SetupError> {
        let named = |fd: &OwnedFd| format!("/proc/self/fd/{}", fd.as_raw_fd());
        let lower: Vec<String> = self.lower.iter().map(named).collect();
        let mut options = format!("lowerdir={}", lower.join(":"));
        let mut flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
        match &self.upper {
            Some((dir, work)) => {
                options.push_str(&format!(",upperdir={},workdir={}", named(dir), named(work)));
            }
            None => flags |= MsFlags::MS_RDONLY,
        }
        if self.read_only {
            flags |= MsFlags::MS_RDONLY;
        }
        if self.upper.is_none() || self.read_only {
            return mount_with(at, flags, options, own_user);
        }
        // A writable overlay syncs its upper file system, all of it, when
        // the last process in the agent's namespace lets it go: every
        // attempt paid a `syncfs` of the disk the workspace is on as its
        // agent exited (60 ms on ext4 while twenty others write). The
        // upper layer is read by troupe and committed, and git's objects
        // are flushed before the branch names them; nothing needs the
        // overlay's own sync. The kernel marks the work directory of a
        // volatile mount, which troupe empties once the worker is gone
        // (`clear_work`). A kernel before 5.10 does not know `volatile`,
        // and gets the mount as it was.
        match mount_with(at, flags, format!("{options},volatile"), own_user) {
            Err(SetupError::Call {
                errno: nix::errno::Errno::EINVAL,
                ..
            }) => mount_with(at, flags, options, own_user),
            made => made,
        }
    }
}

fn mount_with(
    at: &Path,
    flags: MsFlags,
    mut options: String,
    own_user: bool,
) -> Result<(), SetupError> {
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
    .map_err(SetupError::call(format!(
        "cannot mount the attempt's copy-on-write checkout at {}",
        at.display()
    )))
}
