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

use std::path::Path;

use nix::mount::{MsFlags, mount};

use crate::protocol::OverlayLayers;

/// Mounts `layers` at `at`; `own_user` when the caller is in a user
/// namespace of its own.
pub fn mount_at(layers: &OverlayLayers, at: &Path, own_user: bool) -> Result<(), String> {
    let fail = |why: String| {
        format!(
            "cannot mount the attempt's copy-on-write checkout at {}: {why}",
            at.display()
        )
    };
    let lower: Vec<String> = layers
        .lower
        .iter()
        .map(|dir| option_path(dir))
        .collect::<Result<_, _>>()
        .map_err(fail)?;
    let mut options = format!("lowerdir={}", lower.join(":"));
    let mut flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    match &layers.upper {
        Some(upper) => {
            options.push_str(&format!(
                ",upperdir={},workdir={}",
                option_path(&upper.dir).map_err(fail)?,
                option_path(&upper.work).map_err(fail)?
            ));
        }
        None => flags |= MsFlags::MS_RDONLY,
    }
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

/// `dir` as an overlay option takes it: the characters that separate
/// options and layers are refused (troupe names these directories itself;
/// only a workspace's own path could hold them).
fn option_path(dir: &Path) -> Result<String, String> {
    let text = dir
        .to_str()
        .ok_or_else(|| format!("{} is not UTF-8", dir.display()))?;
    match text.contains([',', ':', '\\']) {
        true => Err(format!(
            "{text} holds a ',', ':' or '\\', which an overlay's options cannot name"
        )),
        false => Ok(text.to_string()),
    }
}
