//! Why a child stops before its task is done. Its cancel signal carries
//! one of these, and the transcript says it (`cancelled: timeout`); they
//! are the child's own, apart from the parent's `StopCause`, because the
//! parent never meets them.

use std::fmt;

use crate::protocol::CancelReason;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelCause {
    /// The parent sent `cancel`, for this reason.
    Parent(CancelReason),
    /// The parent closed the pipe: no answer will come.
    ParentGone,
    /// SIGTERM: a launcher or a user stopping the child.
    Sigterm,
}

impl fmt::Display for CancelCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CancelCause::Parent(reason) => f.write_str(reason.as_str()),
            CancelCause::ParentGone => f.write_str("the parent closed the pipe"),
            CancelCause::Sigterm => f.write_str("SIGTERM"),
        }
    }
}
