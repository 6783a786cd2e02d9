//! Landings that need no merge, written by troupe: each a merge commit
//! whose tree is the one before it with the change's paths set (its
//! `--raw` records), on the one before. A batch of approvals that arrive
//! together costs an edit of the head's tree along their paths, and no
//! git process, instead of a `merge-tree` and a `commit-tree` each, one
//! after another, while the branch waits. Only for changes
//! `Lineage::misses` says nothing landed beside: `merge-tree` would have
//! made the same tree.

use std::sync::Arc;

use super::objects::tree::Edit;
use super::stat::Raw;
use super::{IsolationError, git::Git, off_runtime};

/// One landing: the change's commit (the merge's second parent), its
/// records and the message.
pub(super) struct Link<'a> {
    pub commit: &'a str,
    pub records: &'a [Raw],
    pub message: String,
}

/// The merges of `links`, in order, the first on `head`: each one's
/// commit and tree.
pub(super) async fn land(
    git: &Git,
    head: &str,
    links: &[Link<'_>],
) -> Result<Vec<(String, String)>, IsolationError> {
    let objects = git.objects().await?;
    let head_tree = objects.tree_of(head).await?;
    let mut edit = Edit::of(&objects, &head_tree).await?;
    let mut parent = head.to_string();
    let mut made = Vec::new();
    for link in links {
        for record in link.records {
            let path = record.path.as_bytes();
            edit.set(&objects, path, &record.new_mode, &record.new_id)
                .await?;
        }
        let writer = Arc::clone(&objects);
        let (merged, message) = (link.commit.to_string(), link.message.clone());
        let written = off_runtime(move || {
            let tree = edit.write(&writer)?;
            let commit = writer.write_commit(&tree, &[&parent, &merged], &message)?;
            Ok((edit, commit, tree))
        });
        let (back, commit, tree) = written.await?;
        edit = back;
        parent = commit.clone();
        made.push((commit, tree));
    }
    Ok(made)
}
