//! Where a run's attempts work. A step asks the run's `Workspaces` (see
//! `workspaces`) for each attempt's workspace, change and landing;
//! `--isolation shared` (`shared`) works in the workspace itself, and
//! `--isolation worktree` (`worktree`, over the rest of this module) is
//! what follows.
//!
//! `--isolation worktree`: every step attempt's worker gets a checkout of
//! its own, the reviewer reads the attempt's change as a diff, and an
//! approved change is merged into the run's integration branch.
//!
//! At the start the workspace is recorded as it is, uncommitted and
//! untracked (not ignored) files included, as a snapshot commit made with
//! a temporary index, so the user's branch, index and files are never
//! touched; `troupe/<run_id>` starts there. A workspace that is not the
//! top of a git repository gets a private bare repository in the run
//! directory instead. An attempt's checkout is of the branch as it stands
//! when the attempt starts, so it holds what the step's dependencies
//! delivered and nothing of steps still running. It is a linked work tree
//! as `git worktree` makes them (its own git directory with `HEAD`, an
//! index and a `commondir` naming the repository), but kept beside the
//! checkout in the run directory instead of in the repository: the user's
//! `.git/worktrees` is never touched, and checkouts made at once share no
//! state to race on.
//! Landing is serialized: a fast-forward when nothing landed since the
//! attempt's base, else a three-way merge written without a checkout
//! (`git merge-tree --write-tree`); a conflict sends the attempt back.
//!
//! Everything troupe runs git on is named by troupe: the repository and
//! each checkout's git directory are recorded when made, never read back
//! from a checkout, whose `.git` file the worker could rewrite.
//!
//! `Worktrees` does one thing a file: `open` (the snapshot, the branch),
//! `checkout`, `change`, `keep`, `discard` and `clean`; `landing` moves
//! the branch.

mod admit;
mod change;
mod checkout;
mod checkouts;
mod clean;
mod discard;
mod keep;
mod landing;
mod layers;
pub mod links;
mod open;
mod shared;
mod stat;
mod workspaces;
mod worktree;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use self::checkouts::{CheckoutKind, Checkouts};
use self::clean::remove_all;
pub use self::clean::{Pruned, clean, kept_checkouts, prune};
pub use self::landing::conflict::Conflict;
use self::landing::lineage;
use self::layers::{carry, layered, thin, upper};
use self::open::snapshot_index;
pub use self::shared::Shared;
pub use self::workspaces::{AttemptSpace, Carried, CheckoutView, Workspaces};
use crate::fsutil::Durability;
use crate::git::{self, Git, GitError};
use crate::record::IsolationRecord;
use crate::signal::StopSignal;

impl IsolationRecord {
    /// The integration branch's full reference.
    pub fn reference(&self) -> String {
        format!("refs/heads/{}", self.branch)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum IsolationError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Objects(#[from] crate::git::objects::ObjectError),
    #[error(
        "--isolation worktree needs git {major}.{minor} or newer (for `git merge-tree --write-tree`); this is git {found_major}.{found_minor}",
        major = git::MIN_VERSION.0,
        minor = git::MIN_VERSION.1
    )]
    TooOld { found_major: u32, found_minor: u32 },
    #[error("cannot prepare {path}: {source}", path = .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A landing made together with this one failed, and so did this.
    #[error("cannot move the run's branch: {0}")]
    Landing(String),
    /// The thread doing troupe's file work on the trees did not finish.
    #[error("troupe's work on the checkouts ended early: {0}")]
    Blocking(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> IsolationError + '_ {
    move |source| IsolationError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What bounds troupe's own work on a run's trees.
pub struct Bounds {
    /// The run's stop (its deadline, Ctrl-C), which ends a git call.
    pub stop: StopSignal,
    /// The largest file a change may hold (`--max-file-size`).
    pub max_file_size: Option<u64>,
    /// What of the workspace no change may touch besides troupe's
    /// guarded names (`RunContext::guarded`).
    pub guarded: Vec<PathBuf>,
    /// The kind of checkout attempts get.
    pub checkouts: CheckoutKind,
}

/// How the workspace stands to the run's snapshot, for `Worktrees::open`:
/// only one just taken holds what the workspace holds, so that attempts
/// may take the workspace itself as their base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Snapshot {
    JustTaken,
    /// Taken by an earlier troupe (a resume): the workspace may have
    /// changed since.
    Earlier,
}

/// One attempt's checkout.
#[derive(Debug, Clone)]
pub struct Checkout {
    pub dir: PathBuf,
    /// The integration head it was made from.
    pub base: String,
    /// That head's tree.
    base_tree: String,
    /// Its own git directory (`HEAD`, index, `commondir`), beside it.
    git: Git,
    /// Its layers, when it is a copy-on-write checkout.
    pub layers: Option<layered::Layers>,
    /// The paths of the step's rejected attempt it starts with.
    pub carried: Option<Vec<String>>,
}

/// A move of the integration branch troupe is about to make
/// (`landing-<attempt>.json` in the step's directory).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandingIntent {
    pub attempt: u32,
    /// A reviewer approved the change; else it was accepted unreviewed.
    pub approved: bool,
    /// The head it moves from.
    pub from: String,
    /// The commit it moves to: the change itself, or its merge.
    pub to: String,
}

/// How landing an approved change went.
#[derive(Debug)]
pub enum Landing {
    /// Nothing to merge: the attempt worked in the workspace itself.
    InPlace,
    /// The integration branch's new head.
    Landed(String),
    Conflicted(Conflict),
    /// Troupe does not land it, for these reasons (`ChangeRecord::refused`).
    Refused(Vec<String>),
}

/// A run's repository, integration branch and checkouts.
pub struct Worktrees {
    git: Git,
    /// What troupe keeps of the repository between calls: its objects and
    /// ignore checks, shared by every checkout.
    cached: crate::git::Cached,
    record: IsolationRecord,
    workspace: PathBuf,
    run_dir: PathBuf,
    /// The repository's common directory (objects, refs), which each
    /// checkout's own git directory names.
    common: PathBuf,
    /// What an agent must read for git to work in its checkout.
    readable: Vec<PathBuf>,
    /// The largest file a change may hold (`--max-file-size`).
    max_file_size: Option<u64>,
    guarded: Vec<PathBuf>,
    /// The read-only trees copy-on-write checkouts are made on; `None`
    /// where attempts get full checkouts.
    bases: Option<layered::Bases>,
    /// What the attempts leave for each other, under one lock held for
    /// no await.
    state: std::sync::Mutex<State>,
    /// The integration branch's head as troupe last wrote it, and its
    /// tree; held while landing, so the head read and the head written are
    /// the same one's. troupe alone moves the branch during a run (a move
    /// by anyone else makes the next landing fail, since `update-ref` is
    /// given the head it expects).
    head: tokio::sync::Mutex<Head>,
    /// The branch's head as the last landing published it, read without
    /// waiting for a landing under way: a checkout starts from it (any
    /// head the branch had is a sound base), and a base that is not it
    /// goes once no attempt uses it.
    tip: tokio::sync::watch::Sender<Tip>,
}

/// What a run's attempts leave for each other.
#[derive(Default)]
struct State {
    /// Each step's last rejected change (its commit), for its next
    /// attempt to continue on.
    rejected: std::collections::HashMap<String, String>,
    /// Approved changes waiting for the branch (see `landing`).
    waiting: Vec<landing::Waiting>,
    /// Each change's `--raw` records by its commit, from its making to
    /// its landing, which lays it on the head as it is where it can.
    records: std::collections::HashMap<String, Vec<stat::Raw>>,
}

/// A head of the branch: its commit and its tree, and what landed on the
/// way to it since the run opened, where troupe knows it.
#[derive(Debug, Clone)]
struct Tip {
    commit: String,
    tree: String,
    since: Option<std::sync::Arc<lineage::Since>>,
}

#[derive(Debug, Clone)]
struct Head {
    commit: String,
    tree: String,
    /// What landed since the run opened.
    lineage: lineage::Lineage,
}

impl Head {
    fn tip(&self) -> Tip {
        Tip {
            commit: self.commit.clone(),
            tree: self.tree.clone(),
            since: self.lineage.since_start().map(std::sync::Arc::new),
        }
    }
}

impl Worktrees {
    pub fn record(&self) -> &IsolationRecord {
        &self.record
    }

    /// The branch's head as the last landing left it.
    fn tip(&self) -> Tip {
        self.tip.borrow().clone()
    }

    /// The attempts' shared state, for a moment.
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// How many refusals of a change are named; the rest are counted.
const NAMED: usize = 20;

/// At most `NAMED` sentences, and how many more there were.
fn named(mut all: Vec<String>) -> Vec<String> {
    if all.len() > NAMED {
        let more = all.len() - NAMED;
        all.truncate(NAMED);
        all.push(format!("and {more} more"));
    }
    all
}

/// `work` on a blocking thread, so that the thread serving the agents
/// goes on while the disk is slow.
async fn off_runtime<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, IsolationError> + Send + 'static,
) -> Result<T, IsolationError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| IsolationError::Blocking(e.to_string()))?
}
