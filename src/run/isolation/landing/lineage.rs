//! What landed on the run's branch since it opened, landing by landing,
//! and the paths each changed where troupe knows them: enough to tell
//! that an approved change touches nothing the branch changed since the
//! change's base, so that it can be applied as it is instead of merged.
//!
//! Only a change that adds and modifies is known this way. One that
//! deletes is not, nor is a merge `merge-tree` made: git may find a
//! rename in either (a directory renamed on one side takes the other
//! side's new files with it), and troupe does not guess what git would
//! have done.

use std::collections::HashSet;

use crate::run::isolation::stat::Raw;

#[derive(Debug, Clone)]
pub(in crate::run::isolation) struct Lineage {
    landed: Vec<Landed>,
}

#[derive(Debug, Clone)]
struct Landed {
    commit: String,
    /// `None` where troupe cannot say what it changed.
    paths: Option<Vec<String>>,
}

/// Every path that landed since a commit, where troupe knows them all.
#[derive(Debug)]
pub(in crate::run::isolation) struct Since {
    pub commit: String,
    pub paths: Vec<String>,
}

impl Lineage {
    /// A branch whose head is `commit`, where nothing is known before it.
    pub fn at(commit: &str) -> Lineage {
        Lineage {
            landed: vec![Landed {
                commit: commit.to_string(),
                paths: Some(Vec::new()),
            }],
        }
    }

    /// `commit` landed with the change `records` describe (`None`: one
    /// troupe did not read, or a merge).
    pub fn push(&mut self, commit: &str, records: Option<&[Raw]>) {
        let paths = records
            .filter(|records| additive(records))
            .map(|records| records.iter().map(|r| r.path.clone()).collect());
        self.landed.push(Landed {
            commit: commit.to_string(),
            paths,
        });
    }

    /// The commit it starts at, and every path that landed since, where
    /// troupe knows them all (each landing added and modified only).
    pub fn since_start(&self) -> Option<Since> {
        let (start, since) = self.landed.split_first()?;
        let mut paths = std::collections::BTreeSet::new();
        for landed in since {
            paths.extend(landed.paths.as_ref()?.iter().cloned());
        }
        Some(Since {
            commit: start.commit.clone(),
            paths: paths.into_iter().collect(),
        })
    }

    pub fn len(&self) -> usize {
        self.landed.len()
    }

    /// Forgets the landings after the first `len` (a stream that failed).
    pub fn truncate(&mut self, len: usize) {
        self.landed.truncate(len);
    }

    /// Whether the change `records` describe, made on `base`, can be laid
    /// on the head as it is: it only adds and modifies, everything that
    /// landed since `base` is known and did too, and no path of one is
    /// the other's, or a directory above it.
    pub fn misses(&self, base: &str, records: &[Raw]) -> bool {
        if !additive(records) {
            return false;
        }
        let Some(at) = self.landed.iter().position(|l| l.commit == base) else {
            return false;
        };
        let mut landed: HashSet<&str> = HashSet::new();
        for since in &self.landed[at + 1..] {
            let Some(paths) = &since.paths else {
                return false;
            };
            landed.extend(paths.iter().map(String::as_str));
        }
        let dirs_of = |paths: &mut dyn Iterator<Item = &str>| -> HashSet<String> {
            paths.flat_map(directories_above).collect()
        };
        let above_landed = dirs_of(&mut landed.iter().copied());
        let above_change = dirs_of(&mut records.iter().map(|r| r.path.as_str()));
        records
            .iter()
            .all(|r| !landed.contains(r.path.as_str()) && !above_landed.contains(&r.path))
            && landed.iter().all(|p| !above_change.contains(*p))
    }
}

/// A change that deletes nothing, and whose paths troupe read exactly
/// (a name that is not UTF-8 reaches troupe changed, and goes the slow
/// way).
fn additive(records: &[Raw]) -> bool {
    records
        .iter()
        .all(|r| r.new_mode != "000000" && !r.path.contains(char::REPLACEMENT_CHARACTER))
}

/// `a/b/c` -> `a`, `a/b`.
fn directories_above(path: &str) -> impl Iterator<Item = String> + '_ {
    path.match_indices('/')
        .map(|(at, _)| path[..at].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(path: &str, old_mode: &str, new_mode: &str) -> Raw {
        Raw {
            path: path.to_string(),
            old_mode: old_mode.to_string(),
            new_mode: new_mode.to_string(),
            new_id: "0".repeat(40),
        }
    }

    fn added(path: &str) -> Raw {
        raw(path, "000000", "100644")
    }

    #[test]
    fn a_change_beside_what_landed_is_laid_on_as_it_is() {
        let mut lineage = Lineage::at("base");
        lineage.push("one", Some(&[added("src/a.rs")]));
        let modified = raw("src/b.rs", "100644", "100644");
        assert!(lineage.misses("base", &[modified, added("docs/c.md")]));
    }

    #[test]
    fn a_shared_path_or_a_file_where_a_directory_goes_is_merged() {
        let mut lineage = Lineage::at("base");
        lineage.push("one", Some(&[added("src/a.rs"), added("lib")]));
        assert!(!lineage.misses("base", &[added("src/a.rs")]));
        assert!(!lineage.misses("base", &[added("src")]));
        assert!(!lineage.misses("base", &[added("lib/x.rs")]));
        assert!(lineage.misses("one", &[added("src/a.rs")]));
    }

    #[test]
    fn a_deletion_on_either_side_or_an_unknown_landing_is_merged() {
        let mut lineage = Lineage::at("base");
        assert!(!lineage.misses("base", &[raw("a", "100644", "000000")]));
        lineage.push("one", Some(&[raw("old/x", "100644", "000000")]));
        assert!(!lineage.misses("base", &[added("old/y")]));
        lineage.push("two", None);
        assert!(!lineage.misses("one", &[added("z")]));
        assert!(lineage.misses("two", &[added("z")]));
        assert!(!lineage.misses("elsewhere", &[added("z")]));
    }
}
