//! The runs of a workspace, newest first: for `troupe runs`, for `last`
//! as a run id wherever one is taken, and for the close matches an
//! unknown name is answered with.

use std::path::{Path, PathBuf};

use super::seen::SeenRun;
use crate::fsutil::is_regular;

/// What stands for the newest run, alone or before `/STEP`.
pub const LAST: &str = "last";

/// The run directories in `results`, newest first (run ids sort by their
/// start time).
pub fn run_dirs(results: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(results) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("run_"))
                && is_regular(&path.join("run.json"))
        })
        .collect();
    // Run ids name the second a run began, and two runs begun in one
    // second are told apart by when their directories were made.
    dirs.sort_by_cached_key(|dir| {
        let made = std::fs::symlink_metadata(dir)
            .and_then(|meta| meta.created().or_else(|_| meta.modified()))
            .ok();
        let second = dir.file_name().map(|name| {
            name.to_string_lossy()
                .get(..20)
                .unwrap_or_default()
                .to_string()
        });
        (second, made, dir.clone())
    });
    dirs.reverse();
    dirs
}

/// Every run whose record can be read, newest first, as a reader sees
/// it (died or not).
pub fn records(results: &Path) -> Vec<SeenRun> {
    run_dirs(results)
        .iter()
        .filter_map(|dir| super::seen::see(dir).ok())
        .collect()
}

/// `name` with `last` (or `last/STEP`) replaced by the newest run's id.
pub fn expand_last(results: &Path, name: &str) -> Result<String, String> {
    let (head, rest) = match name.split_once('/') {
        Some((head, rest)) => (head, Some(rest)),
        None => (name, None),
    };
    if head != LAST {
        return Ok(name.to_string());
    }
    let newest = run_dirs(results)
        .first()
        .and_then(|dir| dir.file_name())
        .map(|id| id.to_string_lossy().into_owned())
        .ok_or_else(|| format!("there is no run in {} yet, so no `last`", results.display()))?;
    Ok(match rest {
        Some(rest) => format!("{newest}/{rest}"),
        None => newest,
    })
}

/// The names in `results` closest to `name`, for "did you mean".
pub fn close_matches(results: &Path, name: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(results) else {
        return Vec::new();
    };
    let mut scored: Vec<(f64, String)> = entries
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|candidate| !candidate.starts_with('.'))
        .map(|candidate| (strsim::jaro_winkler(name, &candidate), candidate))
        .filter(|(score, _)| *score > 0.8)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    scored.into_iter().take(3).map(|(_, name)| name).collect()
}
