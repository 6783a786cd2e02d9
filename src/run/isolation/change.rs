//! What an attempt changed: its checkout committed on its base, with its
//! stat, its paths, its refusals and the whole diff beside it.

use std::path::PathBuf;

use super::{Checkout, IsolationError, Worktrees, admit, io, layered, off_runtime, stat, upper};
use crate::git::Place;
use crate::record::ChangeRecord;

impl Worktrees {
    /// What the attempt in `checkout` changed: committed on its base, with
    /// its stat, its paths and the whole diff saved beside the checkout.
    pub async fn change(
        &self,
        checkout: &Checkout,
        step: &str,
        attempt: u32,
    ) -> Result<ChangeRecord, IsolationError> {
        let relink = Self::relinking(checkout);
        let mut change = ChangeRecord {
            base: checkout.base.clone(),
            checkout: crate::protocol::display_in(&self.workspace, &checkout.dir),
            ..ChangeRecord::default()
        };
        let message = format!("troupe: {step}, attempt {attempt}");
        let made = match &checkout.layers {
            Some(layers) => {
                // One trip off the run's thread for both: twenty attempts
                // that end together each wait for the CPU to come back.
                let work = layers.work.clone();
                off_runtime(move || {
                    relink()?;
                    layered::clear_work(&work).map_err(io(&work))
                })
                .await?;
                let built = self.commit_layer(checkout, layers, &message).await?;
                change.refused = built.refused;
                built.made
            }
            None => {
                off_runtime(relink).await?;
                change.refused =
                    admit::unfit_files(&checkout.git, &checkout.dir, self.max_file_size).await?;
                match change.refused.is_empty() {
                    true => Some(self.commit_checkout(checkout, &message).await?),
                    false => None,
                }
            }
        };
        let Some(made) = made else {
            return Ok(change);
        };
        if checkout.base_tree == made.tree {
            return Ok(change);
        }
        let here = Place::default();
        let commit = made.commit;
        change.tree = made.tree;
        // The listing, the stat and the whole diff from one git: twenty
        // attempts that finish together each wait for every git they
        // start. The whole diff goes to its file, not through troupe.
        let args = [
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--no-color",
            "--no-renames",
            "--raw",
            "--no-abbrev",
            "--numstat",
            "--patch",
            "--binary",
            "-z",
            checkout.base.as_str(),
            commit.as_str(),
        ];
        let path = self.diff_path(step, attempt);
        let created = path.clone();
        let file =
            off_runtime(move || crate::fsutil::create_file(&created).map_err(io(&created))).await?;
        let listed = self.git.run_split(&here, &args, file).await?;
        let (raw, counted) = stat::parse_diff(&String::from_utf8_lossy(&listed));
        let refused = admit::refusals(&self.git, &commit, &raw, &self.guarded).await?;
        change.refused = refused;
        if change.refused.is_empty() {
            self.state().records.insert(commit.clone(), raw);
        }
        change.stat = stat::render(&counted);
        change.files = counted
            .into_iter()
            .take(crate::protocol::LISTED_FILES)
            .map(|c| c.path)
            .collect();
        change.diff = Some(crate::protocol::display_in(&self.workspace, &path));
        change.commit = Some(commit);
        Ok(change)
    }

    /// Where the whole diff of an attempt is kept.
    pub fn diff_path(&self, step: &str, attempt: u32) -> PathBuf {
        self.run_dir
            .join(step)
            .join(format!("change-{attempt}.diff"))
    }

    /// A copy-on-write checkout's change (its upper layer) committed on
    /// its base.
    pub(super) async fn commit_layer(
        &self,
        checkout: &Checkout,
        layers: &layered::Layers,
        message: &str,
    ) -> Result<upper::UpperChange, IsolationError> {
        let over = upper::Over {
            commit: &checkout.base,
            rules: layers.bottom(),
        };
        upper::commit_upper(
            &self.git,
            &self.cached,
            over,
            &layers.upper,
            layers.markers,
            message,
            self.max_file_size,
        )
        .await
    }

    /// A full checkout's change (`add -A` of the whole tree) committed
    /// on its base.
    async fn commit_checkout(
        &self,
        checkout: &Checkout,
        message: &str,
    ) -> Result<upper::Made, IsolationError> {
        let place = Place::tree(&checkout.dir);
        checkout.git.run(&place, ["add", "-A"]).await?;
        let tree = checkout.git.run(&place, ["write-tree"]).await?;
        let tree = tree.trim().to_string();
        let args = ["commit-tree", &tree, "-p", &checkout.base, "-m", message];
        let commit = self.git.run(&Place::default(), args).await?;
        Ok(upper::Made {
            commit: commit.trim().to_string(),
            tree,
        })
    }
}
