//! A failed attempt's checkout kept for a look.

use super::{Checkout, IsolationError, Worktrees, io, layered, off_runtime};
use crate::git::Place;

impl Worktrees {
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
}
