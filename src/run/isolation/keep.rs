//! A failed attempt's checkout kept for a look.

use super::{Checkout, IsolationError, Worktrees, io, layered, off_runtime};
use crate::fsutil::Durability;

/// How the file that names a kept attempt's commit begins
/// (`kept-<attempt>.commit`).
pub(crate) const KEPT: &str = "kept-";
use crate::git::Place;

impl Worktrees {
    /// A failed attempt's copy-on-write checkout, written out whole for a
    /// look (its upper layer read into a tree, checked out into
    /// `checkout-N`), as a full checkout is kept; its layers go. One whose
    /// upper layer holds what troupe does not read keeps that layer
    /// instead, and says so. The commit that wrote it out is named in
    /// `kept-N.commit` beside it, for `troupe clean` to prune once the
    /// checkout is gone.
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
        let named = self
            .run_dir
            .join(step)
            .join(format!("{KEPT}{attempt}.commit"));
        let text = format!("{}\n", made.commit);
        off_runtime(move || {
            crate::fsutil::write_atomic(&named, text.as_bytes(), Durability::Atomic)
                .map_err(io(&named))
        })
        .await?;
        let own_index = checkout.git.git_dir.join("index");
        let _ = std::fs::remove_file(&own_index);
        let place = Place::tree(&checkout.dir);
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
}
