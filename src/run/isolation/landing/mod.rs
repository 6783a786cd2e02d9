//! Landing approved changes on the run's branch, serialized on its head.
//!
//! Approvals that arrive while a landing is under way wait, and land
//! together when the branch is free: each still gets its own merge commit
//! on the one before (a fast-forward when nothing landed since its base),
//! but the objects are flushed once, and the branch moves once, from the
//! head before the first to the last. Each step's intent is written
//! before the branch moves, so a troupe killed in between finds on resume
//! exactly the landings the branch holds.

mod chain;
pub(super) mod conflict;
pub(super) mod lineage;

use self::conflict::Conflict;
use super::stat::Raw;
use super::{Durability, Head, IsolationError, Landing, LandingIntent, Worktrees, io, off_runtime};
use crate::git::Place;
use crate::record::ChangeRecord;

/// An approved change waiting for the branch.
pub(super) struct Waiting {
    /// The change's commit, its tree, and the head it was made on.
    commit: String,
    tree: String,
    base: String,
    step: String,
    attempt: u32,
    approved: bool,
    /// The change's `--raw` records, as troupe read them when it made the
    /// change; `None` for one made before a resume.
    records: Option<Vec<Raw>>,
    answer: tokio::sync::oneshot::Sender<Result<Landing, IsolationError>>,
}

/// A change on its way to the branch: its merge made, the branch not
/// moved yet.
struct Made {
    waiting: Waiting,
    intent: LandingIntent,
}

impl Made {
    /// `waiting`, landed as `to` on `head`.
    fn of(waiting: Waiting, head: &Head, to: &str) -> Made {
        let intent = LandingIntent {
            attempt: waiting.attempt,
            approved: waiting.approved,
            from: head.commit.clone(),
            to: to.to_string(),
        };
        Made { waiting, intent }
    }
}

impl Worktrees {
    /// Merges an approved change into the integration branch, with
    /// whatever else waits for it.
    pub async fn land(
        &self,
        change: &ChangeRecord,
        step: &str,
        attempt: u32,
        approved: bool,
    ) -> Result<Landing, IsolationError> {
        if !change.refused.is_empty() {
            return Ok(Landing::Refused(change.refused.clone()));
        }
        let Some(commit) = change.commit.clone() else {
            return Ok(Landing::Landed(self.tip().commit));
        };
        let (answer, answered) = tokio::sync::oneshot::channel();
        let records = self.take_records(&commit);
        self.state().waiting.push(Waiting {
            commit,
            tree: change.tree.clone(),
            base: change.base.clone(),
            step: step.to_string(),
            attempt,
            approved,
            records,
            answer,
        });
        {
            let mut head = self.head.lock().await;
            let batch = std::mem::take(&mut self.state().waiting);
            if !batch.is_empty() {
                self.land_together(&mut head, batch).await;
            }
        }
        answered.await.unwrap_or_else(|_| {
            Err(IsolationError::Landing(
                "the landing it waited for ended early".to_string(),
            ))
        })
    }

    /// Lands `batch` in order on `head`, and answers each once the branch
    /// is where the batch left it (a conflict's retry starts from there),
    /// a landed one once the tip names the branch's new head.
    /// A change that nothing landed beside since its base waits in a chain
    /// for the next one that must be merged, or for the batch's end, and
    /// the chain is written at once (`chain`).
    async fn land_together(&self, head: &mut Head, batch: Vec<Waiting>) {
        let mut conflicts = Vec::new();
        let from = head.clone();
        let mut made: Vec<Made> = Vec::new();
        let mut chained: Vec<Waiting> = Vec::new();
        for waiting in batch {
            let records = waiting.records.as_deref();
            if chained.is_empty() && head.commit == waiting.base {
                head.lineage.push(&waiting.commit, records);
                let (commit, tree) = (waiting.commit.clone(), waiting.tree.clone());
                made.push(Made::of(waiting, head, &commit));
                (head.commit, head.tree) = (commit, tree);
                continue;
            }
            if records.is_some_and(|r| head.lineage.misses(&waiting.base, r)) {
                // Named once the chain is written.
                head.lineage.push("", records);
                chained.push(waiting);
                continue;
            }
            self.land_chain(head, std::mem::take(&mut chained), &mut made)
                .await;
            match self.merge(head, &waiting).await {
                Ok(Ok((commit, tree))) => {
                    head.lineage.push(&commit, None);
                    made.push(Made::of(waiting, head, &commit));
                    (head.commit, head.tree) = (commit, tree);
                }
                Ok(Err(conflict)) => conflicts.push((waiting, conflict)),
                Err(e) => {
                    let _ = waiting.answer.send(Err(e));
                }
            }
        }
        self.land_chain(head, chained, &mut made).await;
        if !made.is_empty() {
            match self.move_branch(&from.commit, &head.commit, &made).await {
                Ok(()) => {
                    self.tip.send_replace(head.tip());
                    for Made { waiting, intent } in made {
                        let _ = waiting.answer.send(Ok(Landing::Landed(intent.to)));
                    }
                }
                Err(e) => {
                    *head = from;
                    let said = e.to_string();
                    for Made { waiting, .. } in made {
                        let _ = waiting
                            .answer
                            .send(Err(IsolationError::Landing(said.clone())));
                    }
                }
            }
        }
        for (waiting, conflict) in conflicts {
            let _ = waiting.answer.send(Ok(Landing::Conflicted(conflict)));
        }
    }

    /// Writes the merges of `chained` (already in `head`'s lineage, last)
    /// on `head`, at once; a write that fails fails each of them.
    async fn land_chain(&self, head: &mut Head, chained: Vec<Waiting>, made: &mut Vec<Made>) {
        if chained.is_empty() {
            return;
        }
        let links: Vec<chain::Link> = chained
            .iter()
            .map(|waiting| chain::Link {
                commit: waiting.commit.clone(),
                records: waiting.records.clone().unwrap_or_default(),
                message: landing_message(&[waiting]),
            })
            .collect();
        let written = chain::land(&self.git, &self.cached, &head.commit, links).await;
        let kept = head.lineage.len() - chained.len();
        match written {
            Ok(merges) => {
                head.lineage.truncate(kept);
                for (waiting, (commit, tree)) in chained.into_iter().zip(merges) {
                    head.lineage.push(&commit, waiting.records.as_deref());
                    made.push(Made::of(waiting, head, &commit));
                    (head.commit, head.tree) = (commit, tree);
                }
            }
            Err(e) => {
                head.lineage.truncate(kept);
                let said = e.to_string();
                for waiting in chained {
                    let _ = waiting
                        .answer
                        .send(Err(IsolationError::Landing(said.clone())));
                }
            }
        }
    }

    /// The merge of the waiting change into `head`, committed; or its
    /// conflict.
    async fn merge(
        &self,
        head: &Head,
        waiting: &Waiting,
    ) -> Result<Result<(String, String), Conflict>, IsolationError> {
        let commit = waiting.commit.as_str();
        let here = Place::default();
        let tree = match self.git.merge_tree(&head.commit, commit).await? {
            Ok(tree) => tree,
            Err(printed) => return Ok(Err(Conflict::read(&self.git, &printed).await)),
        };
        let message = landing_message(&[waiting]);
        let parents = ["-p", head.commit.as_str(), "-p", commit];
        let mut args = vec!["commit-tree", tree.as_str()];
        args.extend(parents);
        args.extend(["-m", &message]);
        let merge = self.git.run(&here, args).await?;
        Ok(Ok((merge.trim().to_string(), tree.to_string())))
    }

    /// Moves the branch from `from` to `to` for the landings `made`: each
    /// one's intent written, then the intents and the objects (written
    /// unflushed by git) flushed together, then the branch moved by one
    /// `update-ref` that names the head it expects.
    async fn move_branch(&self, from: &str, to: &str, made: &[Made]) -> Result<(), IsolationError> {
        let intents: Vec<(std::path::PathBuf, LandingIntent)> = made
            .iter()
            .map(|Made { waiting, intent }| {
                (
                    self.intent_path(&waiting.step, waiting.attempt),
                    intent.clone(),
                )
            })
            .collect();
        let flushed = [self.common.join("objects"), self.run_dir.clone()];
        off_runtime(move || {
            for (path, intent) in &intents {
                crate::fsutil::write_json_atomic(path, intent, Durability::Atomic)
                    .map_err(io(path))?;
            }
            flush_file_systems(&flushed)
        })
        .await?;
        let waiting: Vec<&Waiting> = made.iter().map(|m| &m.waiting).collect();
        let message = landing_message(&waiting);
        let reference = self.record.reference();
        let args = ["update-ref", "-m", &message, &reference, to, from];
        self.git.run(&Place::default(), args).await?;
        Ok(())
    }

    /// The records `change` kept for `commit`, which only its landing
    /// reads.
    pub(super) fn take_records(&self, commit: &str) -> Option<Vec<Raw>> {
        self.state().records.remove(commit)
    }

    fn intent_path(&self, step: &str, attempt: u32) -> std::path::PathBuf {
        self.run_dir
            .join(step)
            .join(format!("landing-{attempt}.json"))
    }

    /// The landing of `step` that reached the branch, if one did: the
    /// latest intent whose commit the branch holds. troupe wrote the intent
    /// and names the commit; git says whether the branch has it.
    pub async fn landed(&self, step: &str, attempts: u32) -> Option<LandingIntent> {
        for attempt in (1..=attempts).rev() {
            let path = self.intent_path(step, attempt);
            let Ok(intent) = crate::fsutil::read_json::<LandingIntent>(&path, "a landing intent")
            else {
                continue;
            };
            let reference = self.record.reference();
            let args = [
                "merge-base",
                "--is-ancestor",
                intent.to.as_str(),
                &reference,
            ];
            let out = self.git.output(&Place::default(), &args).await.ok()?;
            return (out.code == Some(0)).then_some(intent);
        }
        None
    }
}

/// `troupe: land s1, attempt 2`, and the others landed with it.
fn landing_message(landed: &[&Waiting]) -> String {
    let each: Vec<String> = landed
        .iter()
        .map(|w| format!("{}, attempt {}", w.step, w.attempt))
        .collect();
    format!("troupe: land {}", each.join("; "))
}

/// Flushes the file systems that hold `dirs`, each once: what troupe and
/// git wrote there unflushed (files and the names that point to them) is
/// on the disk when this returns. One `syncfs` costs what is unwritten,
/// not how many files: a batch of landings flushes its objects and its
/// intents at once.
fn flush_file_systems(dirs: &[std::path::PathBuf]) -> Result<(), IsolationError> {
    use std::os::unix::fs::MetadataExt;
    let mut flushed = Vec::new();
    for dir in dirs {
        let opened = crate::fsutil::nofollow::open_dir(dir).map_err(io(dir))?;
        let readable = nix::fcntl::openat(
            &opened,
            ".",
            nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_DIRECTORY,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(|e| io(dir)(e.into()))?;
        let device = std::fs::File::from(readable);
        let id = device.metadata().map_err(io(dir))?.dev();
        if flushed.contains(&id) {
            continue;
        }
        nix::unistd::syncfs(&device).map_err(|e| io(dir)(e.into()))?;
        flushed.push(id);
    }
    Ok(())
}
