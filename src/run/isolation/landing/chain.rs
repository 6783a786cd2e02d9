//! Landings that need no merge, written by one `git fast-import`: each a
//! merge commit whose tree is the one before it with the change's paths
//! set (its `--raw` records), on the one before. A batch of approvals
//! that arrive together costs one git process instead of a `merge-tree`
//! and a `commit-tree` each, one after another, while the branch waits.
//! Only for changes `Lineage::misses` says nothing landed beside:
//! `merge-tree` would have made the same tree.

use crate::git::Git;
use crate::git::import::{self, Commit, Data, Entry};
use crate::run::isolation::IsolationError;
use crate::run::isolation::stat::Raw;

/// One landing: the change's commit (the merge's second parent), its
/// records and the message.
pub(in crate::run::isolation) struct Link {
    pub commit: String,
    pub records: Vec<Raw>,
    pub message: String,
}

/// The merges of `links`, in order, the first on `head`: each one's
/// commit and tree.
pub(in crate::run::isolation) async fn land(
    git: &Git,
    head: &str,
    links: Vec<Link>,
) -> Result<Vec<(String, String)>, IsolationError> {
    let commits = links
        .into_iter()
        .map(|link| Commit {
            merge: Some(link.commit),
            message: link.message,
            removed: Vec::new(),
            set: link
                .records
                .into_iter()
                .map(|record| Entry {
                    path: record.path.into_bytes(),
                    mode: record.new_mode,
                    data: Data::Id(record.new_id),
                })
                .collect(),
        })
        .collect();
    Ok(import::import(git, head, commits).await?)
}
