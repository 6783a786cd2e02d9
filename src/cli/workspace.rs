//! `--workspace` of `troupe run` and `troupe spawn`: a directory that is
//! there, or one made now in a directory that is. A mistyped path is not
//! made whole, levels and all: only its last level is made, and that is
//! said.

use std::path::{Path, PathBuf};

use super::UsageError;

/// The workspace at `given`, made if only its last level is missing; its
/// canonical path.
pub fn open_workspace(given: &Path) -> Result<PathBuf, UsageError> {
    let said = |why: String| UsageError::Said(format!("--workspace {}: {why}", given.display()));
    match std::fs::metadata(given) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(said("it is not a directory".to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = match given.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent,
                _ => Path::new("."),
            };
            if !parent.is_dir() {
                return Err(said(format!(
                    "{} does not exist; troupe makes only the workspace's last level (check the path, or make {} first)",
                    parent.display(),
                    parent.display()
                )));
            }
            std::fs::create_dir(given).map_err(|e| said(e.to_string()))?;
            crate::tell!("troupe: made the workspace {}", given.display());
        }
        Err(e) => return Err(said(e.to_string())),
    }
    given.canonicalize().map_err(|e| said(e.to_string()))
}
