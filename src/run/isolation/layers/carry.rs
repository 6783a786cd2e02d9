//! A rejected attempt carried into its step's next one, so that the retry
//! fixes what the reviewer named instead of doing the step again: the
//! rejected change merged onto the head the retry starts from (git's
//! three-way merge, without a checkout). A full checkout is made of that
//! tree; a copy-on-write one gets the change written into its upper layer
//! (the changed files, and a whiteout for each deletion), so that it still
//! costs what the change holds. A merge that conflicts carries nothing:
//! the retry starts from the head, and its brief says so.

use std::path::{Path, PathBuf};

use crate::git::{Git, GitError, Place};
use crate::run::isolation::{IsolationError, io, off_runtime};

/// The rejected change on the new head.
#[derive(Debug, Clone)]
pub struct Rebased {
    /// The merged tree.
    pub tree: String,
    /// The paths it changes from the head.
    pub paths: Vec<String>,
    /// Those it deletes.
    deleted: Vec<String>,
}

/// `rejected` (a commit) merged onto `head`; `None` when it conflicts or
/// changes nothing there.
pub async fn rebase(
    git: &Git,
    head: &str,
    rejected: &str,
) -> Result<Option<Rebased>, IsolationError> {
    let here = Place::default();
    let Ok(tree) = git.merge_tree(head, rejected).await? else {
        return Ok(None);
    };
    let status = git
        .run(
            &here,
            ["diff", "--no-renames", "--name-status", "-z", head, &tree],
        )
        .await?;
    let mut fields = status.split('\0').filter(|f| !f.is_empty());
    let (mut paths, mut deleted) = (Vec::new(), Vec::new());
    while let (Some(kind), Some(path)) = (fields.next(), fields.next()) {
        if kind == "D" {
            deleted.push(path.to_string());
        }
        paths.push(path.to_string());
    }
    Ok((!paths.is_empty()).then_some(Rebased {
        tree,
        paths,
        deleted,
    }))
}

/// Writes `rebased` into the empty upper layer `upper`: the files it
/// changes (by git, from a scratch index at `index`), and a whiteout for
/// each file it deletes.
pub async fn seed(
    git: &Git,
    rebased: &Rebased,
    upper: &Path,
    index: &Path,
) -> Result<(), IsolationError> {
    let written: Vec<&str> = rebased
        .paths
        .iter()
        .filter(|p| !rebased.deleted.contains(p))
        .map(String::as_str)
        .collect();
    let mut lock = index.as_os_str().to_owned();
    lock.push(".lock");
    let _ = std::fs::remove_file(&lock);
    let _ = std::fs::remove_file(index);
    let place = Place::with_index(upper, index);
    let checked_out = async {
        git.run(&place, ["read-tree", rebased.tree.as_str()])
            .await?;
        if !written.is_empty() {
            let mut args = vec!["checkout-index", "-f", "-q", "--"];
            args.extend(&written);
            git.run(&place, args).await?;
        }
        Ok::<_, GitError>(())
    }
    .await;
    let _ = std::fs::remove_file(index);
    checked_out?;
    let (upper, deleted) = (upper.to_path_buf(), rebased.deleted.clone());
    off_runtime(move || whiteouts(&upper, &deleted)).await
}

/// A whiteout (a character device 0/0, which the kernel lets anyone
/// make) at each path of `deleted` in `upper`, unless something the change
/// writes is there or above it already (a file that became a directory).
pub fn whiteouts(upper: &Path, deleted: &[impl AsRef<Path>]) -> Result<(), IsolationError> {
    for path in deleted {
        let at = upper.join(path);
        let mut above: Vec<PathBuf> = path
            .as_ref()
            .ancestors()
            .skip(1)
            .filter(|a| !a.as_os_str().is_empty())
            .map(|a| upper.join(a))
            .collect();
        above.reverse();
        let blocked = above
            .iter()
            .any(|dir| dir.symlink_metadata().is_ok_and(|m| !m.is_dir()));
        if blocked || at.symlink_metadata().is_ok() {
            continue;
        }
        if let Some(parent) = at.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        nix::sys::stat::mknod(
            &at,
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::empty(),
            0,
        )
        .map_err(|e| io(&at)(e.into()))?;
    }
    Ok(())
}
