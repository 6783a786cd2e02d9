//! troupe's git plumbing, for the checkouts of isolated runs and for
//! `apply`: the `runner` that runs every git command narrow and bounded,
//! what git `ignores` in a tree, and the commits troupe `import`s.
//! It knows nothing of runs: a leaf, which `run` and the commands call.

pub mod ignores;
pub mod import;
mod runner;

pub use self::runner::{Git, GitError, MIN_VERSION, Output, Place, repository_at, version};
