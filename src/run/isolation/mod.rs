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

mod admit;
mod carry;
mod chain;
mod checkouts;
mod conflict;
mod landing;
mod layered;
mod lineage;
pub mod links;
mod shared;
mod stat;
mod thin;
mod upper;
mod workspaces;
mod worktree;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use self::checkouts::{CheckoutKind, Checkouts};
pub use self::conflict::Conflict;
pub use self::shared::Shared;
pub use self::workspaces::{AttemptSpace, Carried, Workspaces};
use crate::fsutil::{Durability, nofollow};
use crate::git::{self, Git, GitError, Place};
use crate::protocol::RESULTS_DIR;
use crate::record::{ChangeRecord, IsolationRecord};
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
    /// Each step's last rejected change (its commit), for its next
    /// attempt to continue on.
    rejected: std::sync::Mutex<std::collections::HashMap<String, String>>,
    /// The integration branch's head as troupe last wrote it, and its
    /// tree; held while landing, so the head read and the head written are
    /// the same one's. troupe alone moves the branch during a run (a move
    /// by anyone else makes the next landing fail, since `update-ref` is
    /// given the head it expects).
    head: tokio::sync::Mutex<Head>,
    /// The branch's head as the last landing left it, read without
    /// waiting for a landing under way: a checkout starts from it (any
    /// head the branch had is a sound base), and a base that is not it
    /// goes once no attempt uses it.
    tip: std::sync::Mutex<Tip>,
    /// Approved changes waiting for the branch (see `landing`).
    waiting: std::sync::Mutex<Vec<landing::Waiting>>,
    /// Each change's `--raw` records by its commit, from its making to
    /// its landing, which lays it on the head as it is where it can.
    records: std::sync::Mutex<std::collections::HashMap<String, Vec<stat::Raw>>>,
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
    /// Records the workspace as it is: the run's isolation, its branch
    /// not made yet. The run writes the record down before `open` makes
    /// the branch, so a resume always knows what a branch of the run is.
    pub async fn prepare(
        workspace: &Path,
        run_dir: &Path,
        run_id: &str,
        stop: &StopSignal,
    ) -> Result<IsolationRecord, IsolationError> {
        check_version().await?;
        let (git, private) = match git::repository_at(workspace).await {
            Some(git_dir) => (Git::new(git_dir), false),
            None => (private_repository(run_dir).await?, true),
        };
        let git = git.stopped_by(stop.clone());
        let snapshot = snapshot(&git, workspace, run_dir, run_id, private).await?;
        Ok(IsolationRecord {
            git_dir: git.git_dir.clone(),
            private,
            branch: format!("troupe/{run_id}"),
            snapshot,
        })
    }

    /// The run's trees for `record`, with its branch made at the snapshot
    /// if it is not there yet (a run that was stopped, or killed, between
    /// writing the record and making the branch).
    pub async fn open(
        record: IsolationRecord,
        workspace: &Path,
        run_dir: &Path,
        bounds: Bounds,
        snapshot: Snapshot,
    ) -> Result<Worktrees, IsolationError> {
        check_version().await?;
        let git = Git::new(record.git_dir.clone()).stopped_by(bounds.stop.clone());
        // What git ignores in the workspace, listed while the branch is
        // found or made: neither needs the other.
        let hidden = async {
            match (&bounds.checkouts, snapshot) {
                (CheckoutKind::Layered, Snapshot::JustTaken) => {
                    layered::ignored_in(&git, workspace).await
                }
                _ => Ok(None),
            }
        };
        let (found, hidden) = tokio::join!(Self::branch_of(&git, &record), hidden);
        let (common, head) = found?;
        let hidden = hidden?;
        if hidden.is_none() {
            // No checkout takes the workspace as its base: nothing reads it.
            let _ = std::fs::remove_file(snapshot_index(run_dir));
        }
        let mut readable = vec![git.git_dir.clone()];
        if common != git.git_dir {
            readable.push(common.clone());
        }
        let bases = match bounds.checkouts {
            CheckoutKind::Layered => Some(layered::Bases::new(
                run_dir,
                &record.snapshot,
                workspace,
                hidden,
            )),
            CheckoutKind::Full(_) => None,
        };
        Ok(Worktrees {
            git,
            record,
            workspace: workspace.to_path_buf(),
            run_dir: run_dir.to_path_buf(),
            common,
            readable,
            max_file_size: bounds.max_file_size,
            guarded: bounds.guarded,
            bases,
            rejected: std::sync::Mutex::new(std::collections::HashMap::new()),
            tip: std::sync::Mutex::new(head.tip()),
            head: tokio::sync::Mutex::new(head),
            waiting: std::sync::Mutex::new(Vec::new()),
            records: std::sync::Mutex::new(std::collections::HashMap::new()),
        })
    }

    /// The repository's common directory and the run's branch head, the
    /// branch made at the snapshot if it is not there yet (a run that was
    /// stopped, or killed, between writing the record and making it).
    async fn branch_of(
        git: &Git,
        record: &IsolationRecord,
    ) -> Result<(PathBuf, Head), IsolationError> {
        let here = Place::default();
        let reference = format!("{}^{{commit}}", record.reference());
        let located = git
            .output(
                &here,
                &[
                    "rev-parse",
                    "--path-format=absolute",
                    "--git-common-dir",
                    "--verify",
                    "-q",
                    &reference,
                ],
            )
            .await?;
        let mut lines = located.stdout.lines();
        let common = PathBuf::from(lines.next().unwrap_or_default().trim());
        if common.as_os_str().is_empty() {
            return Err(GitError::Failed {
                args: "rev-parse --git-common-dir".to_string(),
                status: format!("{:?}", located.code),
                stderr: located.stderr,
            }
            .into());
        }
        // A troupe killed inside `update-ref` leaves the branch's lock
        // behind, and every landing after would fail on it. The branch is
        // the run's own and the run is held: nobody else is moving it.
        let lock = common.join(format!("{}.lock", record.reference()));
        match std::fs::remove_file(&lock) {
            Ok(()) => crate::tell!(
                "troupe: removed {}, left by a troupe killed while it moved the run's branch",
                lock.display()
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&lock)(e)),
        }
        let tree_of = |commit: &str| format!("{commit}^{{tree}}");
        let commit = match (located.code, lines.next()) {
            (Some(0), Some(commit)) => commit.trim().to_string(),
            _ => {
                let (branch, snapshot_tree) = (record.reference(), tree_of(&record.snapshot));
                let made = git.run(
                    &here,
                    [
                        "update-ref",
                        "-m",
                        "troupe: the workspace as the run found it",
                        &branch,
                        &record.snapshot,
                        "",
                    ],
                );
                let tree = git.run(&here, ["rev-parse", &snapshot_tree]);
                let (made, tree) = tokio::join!(made, tree);
                made?;
                let commit = record.snapshot.clone();
                let head = Head {
                    lineage: lineage::Lineage::at(&commit),
                    tree: tree?.trim().to_string(),
                    commit,
                };
                return Ok((common, head));
            }
        };
        let tree = git.run(&here, ["rev-parse", &tree_of(&commit)]).await?;
        let head = Head {
            lineage: lineage::Lineage::at(&commit),
            tree: tree.trim().to_string(),
            commit,
        };
        Ok((common, head))
    }

    pub fn record(&self) -> &IsolationRecord {
        &self.record
    }

    /// A checkout of the integration head for `attempt` of `step`, in
    /// `<run>/<step>/checkout-<attempt>`, with its git directory beside it
    /// (`checkout-<attempt>.git`): copy-on-write, its layers beside it
    /// too (`upper-<attempt>`, `work-<attempt>`), or written whole.
    pub async fn checkout(&self, step: &str, attempt: u32) -> Result<Checkout, IsolationError> {
        let step_dir = self.run_dir.join(step);
        let dir = step_dir.join(format!("checkout-{attempt}"));
        let git_dir = step_dir.join(format!("checkout-{attempt}.git"));
        let Tip {
            commit: base,
            tree,
            since,
        } = self.tip();
        let made = (
            dir.clone(),
            git_dir.clone(),
            base.clone(),
            self.common.clone(),
        );
        let made_in = step_dir.clone();
        let make_dirs = move || make_checkout_dirs(&made_in, made);
        let mut checkout = Checkout {
            dir,
            base,
            base_tree: tree,
            git: self.git.linked(git_dir, &self.common),
            layers: None,
            carried: None,
        };
        let rejected = self
            .rejected
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(step);
        let rebased = match &rejected {
            Some(commit) => carry::rebase(&self.git, &checkout.base, commit).await?,
            None => None,
        };
        match &self.bases {
            Some(bases) => {
                let layers = layered::Layers {
                    markers: bases.markers,
                    lower: bases.take(&self.git, &checkout.base, since).await?,
                    upper: step_dir.join(format!("upper-{attempt}")),
                    work: step_dir.join(format!("work-{attempt}")),
                };
                let index = (
                    bases.index(&checkout.base),
                    checkout.git.git_dir.join("index"),
                );
                let dirs = [layers.upper.clone(), layers.work.clone()];
                let hidden = bases.hidden_from(layers.bottom());
                checkout.layers = Some(layers.clone());
                // With nothing carried, the whole checkout is one trip off
                // the run's thread: twenty steps that start together each
                // wait for the CPU to come back from every one.
                let finish = rebased.is_none().then(|| Self::relinking(&checkout));
                off_runtime(move || {
                    make_dirs()?;
                    for dir in &dirs {
                        nofollow::create_new_dir(dir).map_err(io(dir))?;
                    }
                    carry::whiteouts(&dirs[0], &hidden)?;
                    // Linked, not copied (a repository's index is most of a
                    // megabyte per 10,000 files): git replaces an index it
                    // changes, so the base's own is never written through it.
                    if std::fs::hard_link(&index.0, &index.1).is_err() {
                        std::fs::copy(&index.0, &index.1).map_err(io(&index.1))?;
                    }
                    if let Some(relink) = finish {
                        layered::give_to_agents(&dirs[0])?;
                        relink()?;
                    }
                    Ok(())
                })
                .await?;
                if let Some(rebased) = &rebased {
                    let scratch = step_dir.join(format!("carry-{attempt}.index"));
                    carry::seed(&self.git, rebased, &layers.upper, &scratch).await?;
                    let upper = layers.upper.clone();
                    off_runtime(move || layered::give_to_agents(&upper)).await?;
                    self.relink(&checkout).await?;
                }
            }
            None => {
                off_runtime(make_dirs).await?;
                let place = Place {
                    work_tree: Some(&checkout.dir),
                    index: None,
                };
                let start = rebased.as_ref().map_or("HEAD", |r| r.tree.as_str());
                checkout
                    .git
                    .run(&place, ["read-tree", "--reset", "-u", start])
                    .await?;
                self.relink(&checkout).await?;
            }
        }
        checkout.carried = rebased.map(|r| r.paths);
        Ok(checkout)
    }

    /// Writes the checkout's `.git` link to its own git directory, so that
    /// git works for the agent in its checkout, and writes it again once
    /// the worker is done, so that a checkout kept for a look links to
    /// troupe's git directory whatever the worker did to it (the link is
    /// read-only to a worker where the sandbox has a mount namespace).
    /// troupe itself never reads this file back.
    pub async fn relink(&self, checkout: &Checkout) -> Result<(), IsolationError> {
        let relink = Self::relinking(checkout);
        off_runtime(relink).await
    }

    /// `relink`'s file work, for a thread off the run's.
    fn relinking(
        checkout: &Checkout,
    ) -> impl FnOnce() -> Result<(), IsolationError> + Send + 'static {
        let top = match &checkout.layers {
            Some(layers) => &layers.upper,
            None => &checkout.dir,
        };
        let pointer = top.join(".git");
        let text = format!("gitdir: {}\n", checkout.git.git_dir.display());
        // A layer is not id-mapped: its link is the agent's own, like the
        // rest of it.
        let layered = checkout.layers.is_some();
        move || {
            crate::fsutil::write_atomic(&pointer, text.as_bytes(), Durability::Atomic)
                .map_err(io(&pointer))?;
            match layered {
                true => layered::give_to_agents(&pointer),
                false => Ok(()),
            }
        }
    }

    /// What the attempt in `checkout` changed: committed on its base, with
    /// its stat, its paths and the whole diff saved beside the checkout.
    pub async fn change(
        &self,
        checkout: &Checkout,
        step: &str,
        attempt: u32,
    ) -> Result<ChangeRecord, IsolationError> {
        let relink = Self::relinking(checkout);
        let mut change = ChangeRecord {
            base: checkout.base.clone(),
            checkout: crate::protocol::display_in(&self.workspace, &checkout.dir),
            ..ChangeRecord::default()
        };
        let message = format!("troupe: {step}, attempt {attempt}");
        let made = match &checkout.layers {
            Some(layers) => {
                // One trip off the run's thread for both: twenty attempts
                // that end together each wait for the CPU to come back.
                let work = layers.work.clone();
                off_runtime(move || {
                    relink()?;
                    layered::clear_work(&work).map_err(io(&work))
                })
                .await?;
                let built = self.commit_layer(checkout, layers, &message).await?;
                change.refused = built.refused;
                built.made
            }
            None => {
                off_runtime(relink).await?;
                change.refused =
                    admit::unfit_files(&checkout.git, &checkout.dir, self.max_file_size).await?;
                match change.refused.is_empty() {
                    true => Some(self.commit_checkout(checkout, &message).await?),
                    false => None,
                }
            }
        };
        let Some(made) = made else {
            return Ok(change);
        };
        if checkout.base_tree == made.tree {
            return Ok(change);
        }
        let here = Place::default();
        let commit = made.commit;
        change.tree = made.tree;
        // The listing, the stat and the whole diff from one git: twenty
        // attempts that finish together each wait for every git they
        // start. The whole diff goes to its file, not through troupe.
        let args = [
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--no-color",
            "--no-renames",
            "--raw",
            "--no-abbrev",
            "--numstat",
            "--patch",
            "--binary",
            "-z",
            checkout.base.as_str(),
            commit.as_str(),
        ];
        let path = self.diff_path(step, attempt);
        let created = path.clone();
        let file =
            off_runtime(move || crate::fsutil::create_file(&created).map_err(io(&created))).await?;
        let listed = self.git.run_split(&here, &args, file).await?;
        let (raw, counted) = stat::parse_diff(&String::from_utf8_lossy(&listed));
        let refused = admit::refusals(&self.git, &commit, &raw, &self.guarded).await?;
        change.refused = refused;
        if change.refused.is_empty() {
            self.records
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(commit.clone(), raw);
        }
        change.stat = stat::render(&counted);
        change.files = counted
            .into_iter()
            .take(crate::protocol::LISTED_FILES)
            .map(|c| c.path)
            .collect();
        change.diff = Some(crate::protocol::display_in(&self.workspace, &path));
        change.commit = Some(commit);
        Ok(change)
    }

    /// Where the whole diff of an attempt is kept.
    pub fn diff_path(&self, step: &str, attempt: u32) -> PathBuf {
        self.run_dir
            .join(step)
            .join(format!("change-{attempt}.diff"))
    }

    /// Removes a checkout and its git directory: a rejected attempt's, so
    /// the retry starts clean, or a landed one's. A failure is said, not
    /// fatal.
    pub async fn discard(&self, checkout: &Checkout) {
        let dirs = [checkout.dir.clone(), checkout.git.git_dir.clone()];
        let layers = checkout.layers.clone();
        let removed = tokio::task::spawn_blocking(move || {
            if let Some(layers) = &layers {
                layered::remove_layers(&layers.upper, &layers.work)?;
            }
            remove_all(&dirs)
        })
        .await;
        if let Ok(Err(e)) | Err(e) = removed.map_err(std::io::Error::other) {
            crate::tell!(
                "troupe: cannot remove the checkout {}: {e}",
                checkout.dir.display()
            );
        }
        self.release_base(checkout).await;
    }

    /// `step`'s attempt was rejected with its change committed as
    /// `commit`: the step's next attempt starts with it.
    pub fn set_aside(&self, step: &str, commit: &str) {
        self.take_records(commit);
        self.rejected
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(step.to_string(), commit.to_string());
    }

    /// The branch's head as the last landing left it.
    fn tip(&self) -> Tip {
        self.tip.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The checkout no longer needs its base.
    async fn release_base(&self, checkout: &Checkout) {
        if let Some(bases) = &self.bases {
            let head = self.tip().commit;
            bases.release(&checkout.base, &head).await;
        }
    }

    /// A failed attempt's copy-on-write checkout, written out whole for a
    /// look (its upper layer read into a tree, checked out into
    /// `checkout-N`), as a full checkout is kept; its layers go. One whose
    /// upper layer holds what troupe does not read keeps that layer
    /// instead, and says so.
    pub async fn keep(
        &self,
        checkout: &Checkout,
        step: &str,
        attempt: u32,
    ) -> Result<(), IsolationError> {
        let Some(layers) = &checkout.layers else {
            return self.relink(checkout).await;
        };
        let message = format!("troupe: {step}, attempt {attempt}, kept");
        let built = self.commit_layer(checkout, layers, &message).await?;
        let Some(made) = built.made else {
            crate::tell!(
                "troupe: {step}'s attempt {attempt} is kept as its layer {}: {}",
                layers.upper.display(),
                built.refused.join("; ")
            );
            self.release_base(checkout).await;
            return Ok(());
        };
        let own_index = checkout.git.git_dir.join("index");
        let _ = std::fs::remove_file(&own_index);
        let place = Place {
            work_tree: Some(&checkout.dir),
            index: None,
        };
        checkout
            .git
            .run(&place, ["read-tree", "--reset", "-u", &made.tree])
            .await?;
        let full = Checkout {
            layers: None,
            ..checkout.clone()
        };
        self.relink(&full).await?;
        let (upper, work) = (layers.upper.clone(), layers.work.clone());
        off_runtime(move || layered::remove_layers(&upper, &work).map_err(io(&work))).await?;
        self.release_base(checkout).await;
        Ok(())
    }

    /// A copy-on-write checkout's change (its upper layer) committed on
    /// its base.
    async fn commit_layer(
        &self,
        checkout: &Checkout,
        layers: &layered::Layers,
        message: &str,
    ) -> Result<upper::UpperChange, IsolationError> {
        let over = upper::Over {
            commit: &checkout.base,
            rules: layers.bottom(),
        };
        upper::commit_upper(
            &self.git,
            over,
            &layers.upper,
            layers.markers,
            message,
            self.max_file_size,
        )
        .await
    }

    /// A full checkout's change (`add -A` of the whole tree) committed
    /// on its base.
    async fn commit_checkout(
        &self,
        checkout: &Checkout,
        message: &str,
    ) -> Result<upper::Made, IsolationError> {
        let place = Place {
            work_tree: Some(&checkout.dir),
            index: None,
        };
        checkout.git.run(&place, ["add", "-A"]).await?;
        let tree = checkout.git.run(&place, ["write-tree"]).await?;
        let tree = tree.trim().to_string();
        let args = ["commit-tree", &tree, "-p", &checkout.base, "-m", message];
        let commit = self.git.run(&Place::default(), args).await?;
        Ok(upper::Made {
            commit: commit.trim().to_string(),
            tree,
        })
    }

    /// The run is over: the bases go.
    pub async fn finish(&self) {
        if let Some(bases) = &self.bases {
            bases.remove_all().await;
        }
    }

    /// The git directories an attempt's agents read: the repository's and
    /// the checkout's own.
    pub fn readable_for(&self, checkout: &Checkout) -> Vec<PathBuf> {
        let mut read = self.readable.clone();
        read.push(checkout.git.git_dir.clone());
        read
    }
}

/// A checkout's directory and its git directory (`HEAD` at `base`,
/// `commondir` naming the repository), made new.
fn make_checkout_dirs(
    step_dir: &Path,
    (dir, git_dir, base, common): (PathBuf, PathBuf, String, PathBuf),
) -> Result<(), IsolationError> {
    let write = |path: &Path, text: String| {
        crate::fsutil::write_atomic(path, text.as_bytes(), Durability::Atomic).map_err(io(path))
    };
    nofollow::create_dir_all(step_dir).map_err(io(step_dir))?;
    nofollow::create_new_dir(&git_dir).map_err(io(&git_dir))?;
    write(&git_dir.join("HEAD"), format!("{base}\n"))?;
    write(
        &git_dir.join("commondir"),
        format!("{}\n", common.display()),
    )?;
    nofollow::create_new_dir(&dir).map_err(io(&dir))?;
    Ok(())
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

fn remove_all(dirs: &[PathBuf]) -> std::io::Result<()> {
    for dir in dirs {
        match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// Removes every checkout left in `run_dir` (those of steps that did not
/// complete), with its git directory and layers; `troupe clean`. The
/// checkouts removed.
pub fn clean(run_dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let kept = kept_checkouts(run_dir);
    for checkout in &kept {
        let mut git_dir = checkout.clone().into_os_string();
        git_dir.push(".git");
        remove_all(&[checkout.clone(), PathBuf::from(git_dir)])?;
        // A copy-on-write checkout's layers, kept where troupe could not
        // write the attempt out (or a troupe killed left them).
        let name = checkout.file_name().unwrap_or_default().to_string_lossy();
        if let Some(attempt) = name.strip_prefix("checkout-") {
            let beside = |kind: &str| checkout.with_file_name(format!("{kind}-{attempt}"));
            layered::remove_layers(&beside("upper"), &beside("work"))?;
        }
    }
    remove_all(&[run_dir.join("bases")])?;
    if let Some(thin) = thin::named(run_dir) {
        thin::remove(&thin)?;
    }
    Ok(kept)
}

/// What `prune` took out of a repository.
#[derive(Debug, Default)]
pub struct Pruned {
    pub objects: usize,
    pub bytes: u64,
}

/// Removes from the user's repository the loose objects that only the
/// run's unlanded attempts (`commits`) hold: what a rejected attempt wrote
/// (its blobs, trees and commit) stays in the repository's `objects/`
/// otherwise, a 300 MB attempt as 300 MB, until git's own prune two weeks
/// later. An object any ref, reflog or the index still reaches is kept (a
/// walk of every object they reach, done only when there are candidates),
/// and so is a packed one; troupe's own repository (`private`) is left
/// alone.
pub async fn prune(record: &IsolationRecord, commits: &[String]) -> Result<Pruned, GitError> {
    let mut pruned = Pruned::default();
    if record.private || commits.is_empty() {
        return Ok(pruned);
    }
    let git = Git::new(record.git_dir.clone());
    let here = Place::default();
    // Those pruned already (a completed step's, as its run ended) are
    // no more.
    let mut args = ["rev-list", "--objects", "--ignore-missing"]
        .map(String::from)
        .to_vec();
    args.extend(commits.iter().cloned());
    args.extend(["--not", "--all", "--reflog", "--indexed-objects"].map(String::from));
    let candidates = git.run(&here, &args).await?;
    let candidates: std::collections::HashSet<&str> = candidates
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    if candidates.is_empty() {
        return Ok(pruned);
    }
    // `--not` excludes only what the boundary's trees hold: a blob a
    // landed attempt wrote again (the same text under another path) is
    // listed above all the same. Only what no ref reaches at all goes.
    let reached = git
        .run(
            &here,
            [
                "rev-list",
                "--objects",
                "--all",
                "--reflog",
                "--indexed-objects",
            ],
        )
        .await?;
    let mut unreached = candidates;
    for line in reached.lines() {
        if let Some(id) = line.split_whitespace().next() {
            unreached.remove(id);
        }
    }
    let common = git
        .run(
            &here,
            ["rev-parse", "--path-format=absolute", "--git-common-dir"],
        )
        .await?;
    let objects = PathBuf::from(common.trim()).join("objects");
    for id in unreached {
        if id.len() < 3 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        let loose = objects.join(&id[..2]).join(&id[2..]);
        let size = std::fs::symlink_metadata(&loose).map(|m| m.len());
        if let Ok(size) = size
            && std::fs::remove_file(&loose).is_ok()
        {
            pruned.objects += 1;
            pruned.bytes += size;
        }
    }
    Ok(pruned)
}

/// The checkouts still in `run_dir` (`<step>/checkout-N`, not their git
/// directories beside them), in order.
pub fn kept_checkouts(run_dir: &Path) -> Vec<PathBuf> {
    let mut kept: Vec<PathBuf> = walkdir::WalkDir::new(run_dir)
        .min_depth(2)
        .max_depth(2)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|entry| {
            let name = entry.file_name().to_string_lossy();
            entry.file_type().is_dir() && name.starts_with("checkout-") && !name.ends_with(".git")
        })
        .map(|entry| entry.path().to_path_buf())
        .collect();
    kept.sort();
    kept
}

async fn check_version() -> Result<(), IsolationError> {
    let found = git::version().await?;
    match found >= git::MIN_VERSION {
        true => Ok(()),
        false => Err(IsolationError::TooOld {
            found_major: found.0,
            found_minor: found.1,
        }),
    }
}

/// Troupe's own bare repository for a workspace that has none.
async fn private_repository(run_dir: &Path) -> Result<Git, IsolationError> {
    let git_dir = run_dir.join("repo.git");
    let git = Git::new(git_dir.clone());
    nofollow::create_new_dir(&git_dir).map_err(io(&git_dir))?;
    git.run(&Place::default(), ["init", "--bare", "--quiet"])
        .await?;
    Ok(git)
}

/// A copy of the user's index at `to`, with its modification time, from
/// which `add -A` re-reads only the files whose stat data changed since
/// git last looked: on a repository of 10,000 files that is a few
/// milliseconds instead of hashing every file. The time matters: git
/// takes an entry stamped no earlier than its index for possibly changed
/// (racy) and reads it again, as it would from the user's own index.
fn seed_index(from: &Path, to: &Path) -> std::io::Result<()> {
    let meta = std::fs::metadata(from)?;
    std::fs::copy(from, to)?;
    let file = std::fs::File::options().write(true).open(to)?;
    let times = std::fs::FileTimes::new()
        .set_accessed(meta.accessed()?)
        .set_modified(meta.modified()?);
    file.set_times(times)
}

/// Where the snapshot's index is written, and kept for the workspace's
/// checkouts (`layered::Bases`): the snapshot's tree with the stat data
/// of the workspace's files, as git read them, so that a `git status` in
/// a checkout over the workspace compares instead of hashing every file.
pub(super) fn snapshot_index(run_dir: &Path) -> PathBuf {
    run_dir.join("snapshot.index")
}

/// The snapshot commit of `workspace`, made with its own index (kept at
/// `snapshot_index`): every file that is not ignored, the results
/// directory left out. The index starts as a copy of the user's
/// (`seed_index`), and from nothing where that copy cannot be made or git
/// fails on it. An entry of the copy is believed as git believes the
/// user's own index: by its stat data. It is written whole, never split:
/// a checkout's git directory has no shared index beside it.
async fn snapshot(
    git: &Git,
    workspace: &Path,
    run_dir: &Path,
    run_id: &str,
    private: bool,
) -> Result<String, IsolationError> {
    let index = snapshot_index(run_dir);
    // What a snapshot cut short by a kill left: the run is held, so it is
    // this run's own scratch.
    let _ = std::fs::remove_file(&index);
    let _ = std::fs::remove_file(run_dir.join("snapshot.index.lock"));
    let place = Place {
        work_tree: Some(workspace),
        index: Some(&index),
    };
    let exclude = format!(":(exclude){RESULTS_DIR}");
    let add = [
        "-c",
        "core.splitIndex=false",
        "add",
        "-A",
        "--",
        ".",
        &exclude,
    ];
    let indexed = async {
        let seeded = !private && seed_index(&git.git_dir.join("index"), &index).is_ok();
        let added = match seeded {
            true => {
                let ok = git.run(&place, add).await.is_ok();
                let results = [
                    "-c",
                    "core.splitIndex=false",
                    "rm",
                    "--cached",
                    "-r",
                    "-q",
                    "--ignore-unmatch",
                    "--",
                    RESULTS_DIR,
                ];
                ok && git.run(&place, results).await.is_ok()
            }
            false => false,
        };
        if !added {
            let _ = std::fs::remove_file(&index);
            git.run(&place, add).await?;
        }
        let write = ["-c", "core.splitIndex=false", "write-tree"];
        Ok::<_, IsolationError>(git.run(&place, write).await?)
    };
    // The commit the workspace is on, looked up while git reads it.
    let here = Place::default();
    let head = async {
        match private {
            true => Ok(None),
            false => {
                let out = git
                    .output(&here, &["rev-parse", "--verify", "-q", "HEAD^{commit}"])
                    .await?;
                Ok::<_, IsolationError>(out.success.then(|| out.stdout.trim().to_string()))
            }
        }
    };
    let (tree, parent) = tokio::join!(indexed, head);
    let (tree, parent) = (tree?, parent?);
    let message = format!("troupe {run_id}: the workspace as the run found it");
    let mut args = vec!["commit-tree", tree.trim(), "-m", &message];
    if let Some(parent) = &parent {
        args.extend(["-p", parent]);
    }
    Ok(git.run(&here, args).await?.trim().to_string())
}
