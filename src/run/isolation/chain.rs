//! Landings that need no merge, written by one `git fast-import`: each a
//! merge commit whose tree is the one before it with the change's paths
//! set (its `--raw` records), chained on the one before by mark. A batch
//! of approvals that arrive together costs one git process instead of a
//! `merge-tree` and a `commit-tree` each, one after another, while the
//! branch waits. Only for changes `Lineage::misses` says nothing landed
//! beside: `merge-tree` would have made the same tree.

use super::git::{Git, GitError, Place};
use super::stat::Raw;
use super::upper::import::{data, quote};

/// The branch the stream's commits are made on, which it never writes.
const SCRATCH: &str = "refs/troupe/landing";

/// One landing in the stream: the change's commit (the merge's second
/// parent), its records and the message.
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
) -> Result<Vec<(String, String)>, GitError> {
    let stream = stream(head, links);
    let args = ["fast-import", "--quiet"];
    let out = git
        .run_bytes(&Place::default(), &args, Some(stream))
        .await?;
    let text = String::from_utf8_lossy(&out);
    let made = answers(&text);
    match made.len() == links.len() {
        true => Ok(made),
        false => Err(GitError::Failed {
            args: args.join(" "),
            status: "exit 0".to_string(),
            stderr: format!(
                "{} merges in its answer for {} landings: {}",
                made.len(),
                links.len(),
                text.trim()
            ),
        }),
    }
}

fn stream(head: &str, links: &[Link<'_>]) -> Vec<u8> {
    let now = chrono::Utc::now().timestamp();
    let mut out = Vec::new();
    out.extend(b"feature done\n");
    for (at, link) in links.iter().enumerate() {
        let mark = at + 1;
        out.extend(format!("commit {SCRATCH}\nmark :{mark}\n").as_bytes());
        out.extend(format!("committer troupe <troupe@localhost> {now} +0000\n").as_bytes());
        data(link.message.as_bytes(), &mut out);
        match at {
            0 => out.extend(format!("from {head}\n").as_bytes()),
            _ => out.extend(format!("from :{at}\n").as_bytes()),
        }
        out.extend(format!("merge {}\n", link.commit).as_bytes());
        for record in link.records {
            out.extend(format!("M {} {} ", record.new_mode, record.new_id).as_bytes());
            quote(record.path.as_bytes(), &mut out);
            out.push(b'\n');
        }
        out.push(b'\n');
    }
    for mark in 1..=links.len() {
        out.extend(format!("get-mark :{mark}\nls :{mark} \"\"\n").as_bytes());
    }
    out.extend(format!("reset {SCRATCH}\ndone\n").as_bytes());
    out
}

/// Pairs of a commit (`get-mark`) and its root tree (`ls`, `040000 tree
/// <id>\t`), every id checked to be one.
fn answers(text: &str) -> Vec<(String, String)> {
    let hex = |id: &str| id.len() >= 40 && id.bytes().all(|b| b.is_ascii_hexdigit());
    let mut lines = text.lines();
    let mut made = Vec::new();
    while let (Some(commit), Some(listed)) = (lines.next(), lines.next()) {
        let commit = commit.trim();
        let tree = listed.split_whitespace().nth(2).unwrap_or_default();
        if !hex(commit) || !hex(tree) {
            break;
        }
        made.push((commit.to_string(), tree.to_string()));
    }
    made
}
