//! troupe's git plumbing, for the checkouts of isolated runs and for
//! `apply`: the `runner` that runs every git command narrow and bounded,
//! the long-lived `piped` processes that answer many questions over one
//! pipe, what git `ignores` in a tree, and the repository's `objects`,
//! read and written. It knows nothing of runs: a leaf, which `run` and
//! the commands call.

pub mod ignores;
pub mod objects;
pub mod piped;
mod runner;

use std::sync::Arc;

use self::ignores::Ignores;
use self::objects::{ObjectError, Objects};
pub use self::runner::{Git, GitError, MIN_VERSION, Output, Place, repository_at, version};

/// What troupe keeps of one repository between calls, for everyone who
/// works on it (a run's checkouts and landings): its objects, opened
/// when first asked for, and the ignore checks of the rules it read.
/// Beside `Git`, not in it, since both are made of git calls.
#[derive(Default)]
pub struct Cached {
    /// The ignore checks of the bases' rules.
    pub ignores: Ignores,
    objects: tokio::sync::OnceCell<Arc<Objects>>,
}

impl Cached {
    /// The repository's objects, for troupe's own reads and writes,
    /// opened on `git` the first time.
    pub async fn objects(&self, git: &Git) -> Result<Arc<Objects>, ObjectError> {
        let opened = self
            .objects
            .get_or_try_init(|| async { Objects::open(git.clone()).await.map(Arc::new) });
        Ok(Arc::clone(opened.await?))
    }
}
