//! What goes: a rejected or landed attempt's checkout, a base no attempt
//! uses, and the bases at the run's end; a rejected change set aside for
//! the step's next attempt.

use super::{Checkout, Worktrees, layered, remove_all};

impl Worktrees {
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
        self.state()
            .rejected
            .insert(step.to_string(), commit.to_string());
    }

    /// The checkout no longer needs its base.
    pub(super) async fn release_base(&self, checkout: &Checkout) {
        if let Some(bases) = &self.bases {
            let head = self.tip().commit;
            bases.release(&checkout.base, &head).await;
        }
    }

    /// The run is over: the bases go.
    pub async fn finish(&self) {
        if let Some(bases) = &self.bases {
            bases.remove_all().await;
        }
    }
}
