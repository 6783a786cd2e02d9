//! Opening a run's trees: the workspace recorded as a snapshot commit
//! (`prepare`), and the repository, branch and bases of the run found or
//! made (`open`).

use std::path::{Path, PathBuf};

use super::{
    Bounds, CheckoutKind, Head, IsolationError, Snapshot, Worktrees, io, layered, lineage,
};
use crate::fsutil::nofollow;
use crate::git::{self, Git, GitError, Place};
use crate::protocol::RESULTS_DIR;
use crate::record::IsolationRecord;
use crate::signal::StopSignal;

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
            cached: crate::git::Cached::default(),
            record,
            workspace: workspace.to_path_buf(),
            run_dir: run_dir.to_path_buf(),
            common,
            readable,
            max_file_size: bounds.max_file_size,
            guarded: bounds.guarded,
            bases,
            state: std::sync::Mutex::default(),
            tip: tokio::sync::watch::Sender::new(head.tip()),
            head: tokio::sync::Mutex::new(head),
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
pub(crate) fn snapshot_index(run_dir: &Path) -> PathBuf {
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
    let place = Place::with_index(workspace, &index);
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
