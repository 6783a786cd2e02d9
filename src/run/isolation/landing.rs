//! Landing approved changes on the run's branch, serialized on its head.
//!
//! Approvals that arrive while a landing is under way wait, and land
//! together when the branch is free: each still gets its own merge commit
//! on the one before (a fast-forward when nothing landed since its base),
//! but the objects are flushed once, and the branch moves once, from the
//! head before the first to the last. Each step's intent is written
//! before the branch moves, so a troupe killed in between finds on resume
//! exactly the landings the branch holds.

use super::git::{GitError, Place};
use super::{
    Conflict, Durability, Head, IsolationError, Landing, LandingIntent, Worktrees, io, off_runtime,
};
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
    answer: tokio::sync::oneshot::Sender<Result<Landing, IsolationError>>,
}

/// A change on its way to the branch: its merge made, the branch not
/// moved yet.
struct Made {
    waiting: Waiting,
    intent: LandingIntent,
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
            return Ok(Landing::Landed(self.head.lock().await.commit.clone()));
        };
        let (answer, answered) = tokio::sync::oneshot::channel();
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Waiting {
                commit,
                tree: change.tree.clone(),
                base: change.base.clone(),
                step: step.to_string(),
                attempt,
                approved,
                answer,
            });
        {
            let mut head = self.head.lock().await;
            let batch =
                std::mem::take(&mut *self.waiting.lock().unwrap_or_else(|e| e.into_inner()));
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

    /// Lands `batch` in order on `head`, and answers each.
    async fn land_together(&self, head: &mut Head, batch: Vec<Waiting>) {
        let from = head.clone();
        let mut made: Vec<Made> = Vec::new();
        for waiting in batch {
            let merged = match head.commit == waiting.base {
                true => Ok(Ok(Head {
                    commit: waiting.commit.clone(),
                    tree: waiting.tree.clone(),
                })),
                false => self.merge(head, &waiting).await,
            };
            match merged {
                Ok(Ok(next)) => {
                    let intent = LandingIntent {
                        attempt: waiting.attempt,
                        approved: waiting.approved,
                        from: head.commit.clone(),
                        to: next.commit.clone(),
                    };
                    *head = next;
                    made.push(Made { waiting, intent });
                }
                Ok(Err(conflict)) => {
                    let _ = waiting.answer.send(Ok(Landing::Conflicted(conflict)));
                }
                Err(e) => {
                    let _ = waiting.answer.send(Err(e));
                }
            }
        }
        if made.is_empty() {
            return;
        }
        match self.move_branch(&from.commit, &head.commit, &made).await {
            Ok(()) => {
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

    /// The merge of the waiting change into `head`, committed; or its
    /// conflict.
    async fn merge(
        &self,
        head: &Head,
        waiting: &Waiting,
    ) -> Result<Result<Head, Conflict>, IsolationError> {
        let commit = waiting.commit.as_str();
        let here = Place::default();
        let args = [
            "merge-tree",
            "--write-tree",
            "--name-only",
            &head.commit,
            commit,
        ];
        let out = self.git.output(&here, &args).await?;
        let Some(tree) = out.stdout.lines().next().filter(|_| out.code == Some(0)) else {
            return match out.code {
                Some(1) => Ok(Err(Conflict::read(&self.git, &out.stdout).await)),
                _ => Err(GitError::Failed {
                    args: args.join(" "),
                    status: format!("{:?}", out.code),
                    stderr: out.stderr,
                }
                .into()),
            };
        };
        let message = landing_message(&[waiting]);
        let parents = ["-p", head.commit.as_str(), "-p", commit];
        let mut args = vec!["commit-tree", tree];
        args.extend(parents);
        args.extend(["-m", &message]);
        let merge = self.git.run(&here, args).await?;
        Ok(Ok(Head {
            commit: merge.trim().to_string(),
            tree: tree.to_string(),
        }))
    }

    /// Moves the branch from `from` to `to` for the landings `made`: their
    /// objects flushed, each one's intent written down durably, then the
    /// branch moved by one `update-ref` that names the head it expects.
    async fn move_branch(&self, from: &str, to: &str, made: &[Made]) -> Result<(), IsolationError> {
        self.flush_objects().await?;
        for Made { waiting, intent } in made {
            let path = self.intent_path(&waiting.step, waiting.attempt);
            let intent = intent.clone();
            off_runtime(move || {
                crate::fsutil::write_json_atomic(&path, &intent, Durability::Commit)
                    .map_err(io(&path))
            })
            .await?;
        }
        let waiting: Vec<&Waiting> = made.iter().map(|m| &m.waiting).collect();
        let message = landing_message(&waiting);
        let reference = self.record.reference();
        let args = ["update-ref", "-m", &message, &reference, to, from];
        self.git.run(&Place::default(), args).await?;
        Ok(())
    }

    /// Flushes the file system that holds the repository's objects: the
    /// changes and their merges, written unflushed by git, are on the disk
    /// before the branch names them.
    async fn flush_objects(&self) -> Result<(), IsolationError> {
        let objects = self.common.join("objects");
        off_runtime(move || {
            let dir = crate::fsutil::nofollow::open_dir(&objects).map_err(io(&objects))?;
            let readable = nix::fcntl::openat(
                &dir,
                ".",
                nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_DIRECTORY,
                nix::sys::stat::Mode::empty(),
            )
            .map_err(|e| io(&objects)(e.into()))?;
            nix::unistd::syncfs(&readable).map_err(|e| io(&objects)(e.into()))
        })
        .await
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
