//! The seam between a step and where its attempts work. A step asks the
//! run's `Workspaces` for each attempt's workspace, and that workspace for
//! the attempt's change and its landing; it never asks which mode it is.
//! A mode of isolation is one implementation: `Shared` (every attempt in
//! the workspace itself) and `Worktrees` (a checkout per attempt, merged on
//! approval).

use futures_util::future::LocalBoxFuture;

use super::{IsolationError, Landing};
use crate::record::ChangeRecord;
use crate::run::runner::CheckoutView;

/// Where a run's attempts work.
pub trait Workspaces {
    /// Whether an attempt works apart from the workspace, so that its
    /// brief can say its changes land only once approved.
    fn isolated(&self) -> bool;

    /// The workspace of attempt `attempt` of step `step`, made now.
    fn attempt<'a>(
        &'a self,
        step: &'a str,
        attempt: u32,
    ) -> LocalBoxFuture<'a, Result<Box<dyn AttemptSpace + 'a>, IsolationError>>;
}

/// One attempt's workspace, from its worker to its landing or discard.
pub trait AttemptSpace {
    /// The worker's view: its own directory and what it reads besides;
    /// `None` when it works in the run's workspace.
    fn view(&self) -> Option<CheckoutView>;

    /// The worker ended without success: what it left stays for a look.
    fn keep(&self) -> LocalBoxFuture<'_, Result<(), IsolationError>>;

    /// What the worker changed, kept for the landing; `None` where the
    /// changes are made in place and there is nothing to record.
    fn change(&mut self) -> LocalBoxFuture<'_, Result<Option<ChangeRecord>, IsolationError>>;

    /// The reviewer's view, with the recorded change to read.
    fn review_view(&self) -> Option<CheckoutView>;

    /// Lands the accepted change (`Landing::InPlace` when there is nothing
    /// to merge) and removes what the attempt no longer needs. `approved`:
    /// a reviewer approved it (else it is accepted unreviewed), written
    /// down with the landing for a resume to find.
    fn land(&self, approved: bool) -> LocalBoxFuture<'_, Result<Landing, IsolationError>>;

    /// The attempt was rejected: its workspace goes, so that the retry
    /// starts clean.
    fn discard(&self) -> LocalBoxFuture<'_, ()>;
}
