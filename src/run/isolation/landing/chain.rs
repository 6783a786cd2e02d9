//! Landings that need no merge, written by troupe: each a merge commit
//! whose tree is the one before it with the change's paths set (its
//! `--raw` records), on the one before. A batch of approvals that arrive
//! together costs an edit of the head's tree along their paths, and no
//! git process, instead of a `merge-tree` and a `commit-tree` each, one
//! after another, while the branch waits. Only for changes
//! `Lineage::misses` says nothing landed beside: `merge-tree` would have
//! made the same tree.

use std::sync::Arc;

use crate::git::objects::Objects;
use crate::git::objects::tree::Edit;
use crate::git::{Cached, Git};
use crate::run::isolation::stat::Raw;
use crate::run::isolation::{IsolationError, off_runtime};

/// One landing: the change's commit (the merge's second parent), its
/// records and the message.
pub(in crate::run::isolation) struct Link {
    pub commit: String,
    pub records: Vec<Raw>,
    pub message: String,
}

/// The merges of `links`, in order, the first on `head`: each one's
/// commit and tree. One job off the run's thread, bounded as a git call
/// is.
pub(in crate::run::isolation) async fn land(
    git: &Git,
    cached: &Cached,
    head: &str,
    links: Vec<Link>,
) -> Result<Vec<(String, String)>, IsolationError> {
    let objects = cached.objects(git).await?;
    objects.start()?;
    let (writer, head) = (Arc::clone(&objects), head.to_string());
    let job = move || merges(&writer, &head, &links);
    let said = || "cat-file --batch (the landings' trees)".to_string();
    match git.bounded(said, off_runtime(job)).await {
        Ok(done) => done,
        Err(e) => {
            objects.kill();
            Err(e.into())
        }
    }
}

/// Blocking.
fn merges(
    objects: &Objects,
    head: &str,
    links: &[Link],
) -> Result<Vec<(String, String)>, IsolationError> {
    let mut edit = Edit::of(objects, &objects.tree_of(head)?)?;
    let mut parent = head.to_string();
    let mut made = Vec::new();
    for Link {
        commit: merged,
        records,
        message,
    } in links
    {
        for record in records {
            let path = record.path.as_bytes();
            edit.set(objects, path, &record.new_mode, &record.new_id)?;
        }
        let tree = edit.write(objects)?;
        let commit = objects.write_commit(&tree, &[&parent, merged], message)?;
        parent = commit.clone();
        made.push((commit, tree));
    }
    Ok(made)
}
