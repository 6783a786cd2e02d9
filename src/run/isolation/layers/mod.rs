//! The layers of copy-on-write checkouts: the read-only `layered` bases
//! an attempt's overlay is made on, the `thin` layers that spare a landed
//! head's first checkout most of its files, what an attempt's `upper`
//! layer changed read into a commit, and a rejected attempt's change
//! `carry`-ed into the next attempt's layer.

pub(super) mod carry;
pub(super) mod layered;
pub(super) mod thin;
pub(super) mod upper;
