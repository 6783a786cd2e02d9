//! The processes troupe and its agents start, and how they are stopped:
//! the spawn policy of each kind (`spawn`), the process groups an agent's
//! commands and servers run in (`groups`), and the sessions that name
//! everything a child left behind (`session`). Calls only `deadline`.

mod groups;
pub mod session;
mod spawn;

pub use groups::{GroupGuard, ProcessGroups, kill_group};
pub use spawn::{Env, GIT_ENV, Group, KEPT_ENV, Spawn, die_with_parent};
