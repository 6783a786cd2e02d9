//! An attempt's checkout: made at the branch's head, copy-on-write or
//! whole, and its `.git` link written for the agent.

use std::path::{Path, PathBuf};

use super::{Checkout, IsolationError, Tip, Worktrees, carry, io, layered, off_runtime};
use crate::fsutil::{Durability, nofollow};
use crate::git::Place;

impl Worktrees {
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
        off_runtime(move || make_checkout_dirs(&made_in, made)).await?;
        let mut checkout = Checkout {
            dir,
            base,
            base_tree: tree,
            git: self.git.linked(git_dir, &self.common),
            layers: None,
            carried: None,
        };
        let rejected = self.state().rejected.remove(step);
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
                off_runtime(move || {
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
                    Ok(())
                })
                .await?;
                if let Some(rebased) = &rebased {
                    let scratch = step_dir.join(format!("carry-{attempt}.index"));
                    carry::seed(&self.git, rebased, &layers.upper, &scratch).await?;
                }
                let upper = layers.upper.clone();
                off_runtime(move || layered::give_to_agents(&upper)).await?;
                checkout.layers = Some(layers);
            }
            None => {
                let place = Place::tree(&checkout.dir);
                let start = rebased.as_ref().map_or("HEAD", |r| r.tree.as_str());
                checkout
                    .git
                    .run(&place, ["read-tree", "--reset", "-u", start])
                    .await?;
            }
        }
        self.relink(&checkout).await?;
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
    pub(super) fn relinking(
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
