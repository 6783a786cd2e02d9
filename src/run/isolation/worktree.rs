//! `--isolation worktree` behind the step's seam: each attempt a checkout
//! of the integration head, its change committed and kept beside it, the
//! accepted change merged into the run's branch.

use futures_util::FutureExt;
use futures_util::future::LocalBoxFuture;

use super::CheckoutView;
use super::workspaces::{AttemptSpace, Carried, Workspaces};
use super::{Checkout, IsolationError, Landing, Worktrees};
use crate::record::ChangeRecord;

impl Workspaces for Worktrees {
    fn finish(&self) -> LocalBoxFuture<'_, ()> {
        Worktrees::finish(self).boxed_local()
    }

    fn attempt<'a>(
        &'a self,
        step: &'a str,
        attempt: u32,
    ) -> LocalBoxFuture<'a, Result<Box<dyn AttemptSpace + 'a>, IsolationError>> {
        async move {
            let checkout = self.checkout(step, attempt).await?;
            let space: Box<dyn AttemptSpace + 'a> = Box::new(InCheckout {
                trees: self,
                step,
                attempt,
                checkout,
                change: None,
            });
            Ok(space)
        }
        .boxed_local()
    }
}

struct InCheckout<'a> {
    trees: &'a Worktrees,
    step: &'a str,
    attempt: u32,
    checkout: Checkout,
    change: Option<ChangeRecord>,
}

impl AttemptSpace for InCheckout<'_> {
    fn view(&self) -> Option<CheckoutView> {
        Some(CheckoutView {
            dir: self.checkout.dir.clone(),
            read: self.trees.readable_for(&self.checkout),
            overlay: self.checkout.layers.as_ref().map(|l| l.for_worker()),
        })
    }

    fn keep(&self) -> LocalBoxFuture<'_, Result<(), IsolationError>> {
        self.trees
            .keep(&self.checkout, self.step, self.attempt)
            .boxed_local()
    }

    fn change(&mut self) -> LocalBoxFuture<'_, Result<Option<ChangeRecord>, IsolationError>> {
        async move {
            let change = self
                .trees
                .change(&self.checkout, self.step, self.attempt)
                .await?;
            self.change = Some(change.clone());
            Ok(Some(change))
        }
        .boxed_local()
    }

    fn holds(&self, file: &str) -> Option<bool> {
        Some(self.checkout.layers.as_ref()?.holds(file))
    }

    fn review_view(&self) -> Option<CheckoutView> {
        let mut view = self.view()?;
        view.overlay = self.checkout.layers.as_ref().map(|l| l.for_reviewer());
        if self.change.is_some() {
            view.read
                .push(self.trees.diff_path(self.step, self.attempt));
        }
        Some(view)
    }

    fn land(&self, approved: bool) -> LocalBoxFuture<'_, Result<Landing, IsolationError>> {
        async move {
            // Without a recorded change the worker's work was never taken
            // out of the checkout: there is nothing to merge.
            let landing = match &self.change {
                Some(change) => {
                    let (step, attempt) = (self.step, self.attempt);
                    self.trees.land(change, step, attempt, approved).await?
                }
                None => Landing::InPlace,
            };
            self.trees.discard(&self.checkout).await;
            Ok(landing)
        }
        .boxed_local()
    }

    fn carried(&self) -> Carried {
        match &self.checkout.carried {
            Some(paths) => Carried::Kept(paths.clone()),
            None => Carried::SetAside,
        }
    }

    fn discard(&self) -> LocalBoxFuture<'_, ()> {
        async move {
            if let Some(commit) = self.change.as_ref().and_then(|c| c.commit.as_deref()) {
                self.trees.set_aside(self.step, commit);
            }
            self.trees.discard(&self.checkout).await;
        }
        .boxed_local()
    }
}
