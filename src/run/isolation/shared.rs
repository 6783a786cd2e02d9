//! `--isolation shared`: every attempt works in the workspace itself, so
//! there is nothing to check out, record, land or throw away.

use futures_util::FutureExt;
use futures_util::future::LocalBoxFuture;

use super::CheckoutView;
use super::workspaces::{AttemptSpace, Workspaces};
use super::{IsolationError, Landing};
use crate::record::ChangeRecord;

pub struct Shared;

impl Workspaces for Shared {
    fn attempt<'a>(
        &'a self,
        _step: &'a str,
        _attempt: u32,
    ) -> LocalBoxFuture<'a, Result<Box<dyn AttemptSpace + 'a>, IsolationError>> {
        let space: Box<dyn AttemptSpace> = Box::new(InPlace);
        async move { Ok(space) }.boxed_local()
    }
}

struct InPlace;

impl AttemptSpace for InPlace {
    fn view(&self) -> Option<CheckoutView> {
        None
    }

    fn keep(&self) -> LocalBoxFuture<'_, Result<(), IsolationError>> {
        async { Ok(()) }.boxed_local()
    }

    fn change(&mut self) -> LocalBoxFuture<'_, Result<Option<ChangeRecord>, IsolationError>> {
        async { Ok(None) }.boxed_local()
    }

    fn review_view(&self) -> Option<CheckoutView> {
        None
    }

    fn land(&self, _approved: bool) -> LocalBoxFuture<'_, Result<Landing, IsolationError>> {
        async { Ok(Landing::InPlace) }.boxed_local()
    }

    fn discard(&self) -> LocalBoxFuture<'_, ()> {
        async {}.boxed_local()
    }
}
