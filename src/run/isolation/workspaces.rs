//! The seam between a step and where its attempts work. A step asks the
//! run's `Workspaces` for each attempt's workspace, and that workspace for
//! the attempt's change and its landing; it never asks which mode it is.
//! A mode of isolation is one implementation: `Shared` (every attempt in
//! the workspace itself) and `Worktrees` (a checkout per attempt, merged on
//! approval).

use std::path::PathBuf;

use futures_util::future::LocalBoxFuture;

use super::{IsolationError, Landing};
use crate::record::ChangeRecord;

/// Where a run's attempts work.
pub trait Workspaces {
    /// The run is over: what its attempts shared goes.
    fn finish(&self) -> LocalBoxFuture<'_, ()> {
        Box::pin(async {})
    }

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

    /// Whether the attempt holds a path (relative to its workspace), where
    /// that is not what the disk says there: a copy-on-write checkout,
    /// whose files are in its layers. `None`: look at the disk.
    fn holds(&self, _file: &str) -> Option<bool> {
        None
    }

    /// The reviewer's view, with the recorded change to read.
    fn review_view(&self) -> Option<CheckoutView>;

    /// Lands the accepted change (`Landing::InPlace` when there is nothing
    /// to merge) and removes what the attempt no longer needs. `approved`:
    /// a reviewer approved it (else it is accepted unreviewed), written
    /// down with the landing for a resume to find.
    fn land(&self, approved: bool) -> LocalBoxFuture<'_, Result<Landing, IsolationError>>;

    /// What the attempt starts with of the step's rejected attempt before
    /// it, for its brief.
    fn carried(&self) -> Carried {
        Carried::InPlace
    }

    /// The attempt was rejected: its workspace goes, and what it changed
    /// is carried into the step's next attempt where that can be done.
    fn discard(&self) -> LocalBoxFuture<'_, ()>;
}

/// What an attempt after a rejection starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Carried {
    /// The rejected attempt's changes are still where it made them (the
    /// shared workspace).
    InPlace,
    /// Brought into this attempt's checkout, rebased on the head it starts
    /// from: these paths.
    Kept(Vec<String>),
    /// Not brought in (a merge conflict, a refused change, or nothing to
    /// carry): the attempt starts from the head.
    SetAside,
}

/// An agent's view of its step attempt's checkout.
#[derive(Debug, Clone)]
pub struct CheckoutView {
    pub dir: PathBuf,
    /// What it reads beyond the checkout: the git directories, so that git
    /// works in it, and for a reviewer the attempt's whole diff.
    pub read: Vec<PathBuf>,
    /// The layers the agent's sandbox mounts there, for a copy-on-write
    /// checkout.
    pub overlay: Option<crate::protocol::OverlayLayers>,
}
