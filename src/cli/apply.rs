//! Bringing a run's integration branch into the user's working tree
//! (`troupe apply`, and `troupe run` at its end): a three-way apply that writes only the
//! paths the run changed, and refuses when the user changed any of them
//! since the snapshot. Temporary indexes only: the user's index and
//! branch stay as they were, and the changes show as edits in the work
//! tree.
//!
//! An apply is written down before its first file (`apply.json` in the
//! run directory: the head, and each path to write or remove with its
//! blob before and after), so that an apply cut short (Ctrl-C, a kill) is
//! finished by the next one. A path it was writing is troupe's when it is
//! as the run found it, as the run left it, missing, or a beginning of the
//! run's version (git removes a file before it writes it anew, from its
//! start, so a kill in between leaves nothing or a prefix); anything else
//! was written by someone since, and is refused like any change made
//! meanwhile. Stale locks of troupe's own scratch
//! indexes are removed first.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fsutil::Durability;
use crate::git::{Git, GitError, Place};
use crate::record::IsolationRecord;

/// The scratch indexes an apply uses in the run directory.
const SCRATCH: [&str; 4] = [
    "apply-head.index",
    "apply-check.index",
    "apply-merge.base",
    "apply-merge.theirs",
];

/// An apply under way: what it is about to write and remove.
#[derive(Debug, Serialize, Deserialize)]
struct Journal {
    head: String,
    paths: Vec<JournalPath>,
}

/// One path an apply writes (`new` is its blob) or removes (`new` is
/// `None`); `old` is its blob in the snapshot, `None` when it had none.
#[derive(Debug, Serialize, Deserialize)]
struct JournalPath {
    path: String,
    old: Option<String>,
    new: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(
        "not applied: {} changed in {workspace} since the run began, and the run changed {} too: {}; apply with --3way to merge the run's changes into your versions (conflicts are marked in the files), or move your versions aside (git stash -u) and apply again; the result stays on branch {branch}",
        if .paths.len() == 1 { "this path" } else { "these paths" },
        if .paths.len() == 1 { "it" } else { "them" },
        .paths.join(", "),
        workspace = .workspace.display()
    )]
    ChangedMeanwhile {
        paths: Vec<String>,
        workspace: PathBuf,
        branch: String,
    },
    #[error("cannot write {path}: {source}", path = .path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot remove {path}: {source}", path = .path.display())]
    Remove {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "not applied: the run's branch {branch} holds symbolic links that lead outside {workspace}, followed through its other links: {}; nothing was written",
        .links.join("; "),
        workspace = .workspace.display()
    )]
    LeadsOut {
        links: Vec<String>,
        workspace: PathBuf,
        branch: String,
    },
    /// Another troupe writes the workspace.
    #[error("not applied: {0}")]
    Busy(String),
    #[error("cannot keep the apply's journal {path}: {source}", path = .path.display())]
    Journal {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot use troupe's scratch file {path}: {source}", path = .path.display())]
    Scratch {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What an apply wrote.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Paths written with the run's version.
    pub written: Vec<String>,
    /// Those of them the run made (not there when it began).
    pub added: Vec<String>,
    /// Paths the run deleted, deleted here too.
    pub removed: Vec<String>,
    /// Paths the user changed too, merged with the run's changes
    /// (`--3way`).
    pub merged: Vec<String>,
    /// Those of them whose changes overlapped: written with conflict
    /// markers, for the user to resolve.
    pub conflicted: Vec<String>,
}

impl Applied {
    pub fn is_empty(&self) -> bool {
        self.written.is_empty() && self.removed.is_empty() && self.merged.is_empty()
    }
}

/// How paths the user changed since the run began are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meanwhile {
    /// Nothing is applied, and they are named.
    Refuse,
    /// The run's change to each is merged into the user's version, as
    /// `git merge-file` does (`--3way`); the rest is applied as ever.
    Merge,
}

/// Applies the change from the snapshot to the integration head onto
/// `workspace`; `scratch` holds the temporary indexes.
pub async fn apply(
    record: &IsolationRecord,
    workspace: &Path,
    scratch: &Path,
    meanwhile_is: Meanwhile,
) -> Result<Applied, ApplyError> {
    let _writing = crate::fsutil::dir_lock::DirLock::take(workspace)
        .map_err(|e| ApplyError::Busy(crate::fsutil::dir_lock::busy(workspace, &e)))?;
    // The run held too: one still running (a resume) moves the branch.
    let _run = crate::fsutil::dir_lock::DirLock::take(scratch).map_err(|e| match e {
        crate::fsutil::dir_lock::LockError::Held { .. } => ApplyError::Busy(format!(
            "{} is still being run ({e}); apply it when that ends",
            scratch.display()
        )),
        crate::fsutil::dir_lock::LockError::Io(source) => ApplyError::Scratch {
            path: scratch.to_path_buf(),
            source,
        },
    })?;
    let git = Git::new(record.git_dir.clone());
    let here = Place::default();
    // Held: no other apply uses the scratch files.
    clear_stale_scratch(scratch);
    let journal_path = scratch.join("apply.json");
    // What an earlier apply of this head was writing when it was cut
    // short: troupe's own, to finish.
    let unfinished: Vec<JournalPath> =
        crate::fsutil::read_json::<Journal>(&journal_path, "the apply journal")
            .map(|j| j.paths)
            .unwrap_or_default();
    let reference = record.reference();
    let head = git
        .run(&here, ["rev-parse", "--verify", &reference])
        .await?;
    let head = head.trim();
    let status = git
        .run(
            &here,
            [
                "diff",
                "--no-ext-diff",
                "--no-textconv",
                "--no-renames",
                "--name-status",
                "-z",
                &record.snapshot,
                head,
            ],
        )
        .await?;
    let changes = parse_name_status(&status);
    if changes.is_empty() {
        return Ok(Applied::default());
    }
    // Each change was judged in its own tree; two steps' links can lead
    // out only together, in the tree their landings made.
    let written: Vec<String> = changes
        .iter()
        .filter(|(kind, _)| *kind != 'D')
        .map(|(_, p)| p.clone())
        .collect();
    let links = crate::run::isolation::links::leading_out(&git, head, &written).await?;
    if !links.is_empty() {
        return Err(ApplyError::LeadsOut {
            links,
            workspace: workspace.to_path_buf(),
            branch: record.branch.clone(),
        });
    }
    let paths: Vec<&str> = changes.iter().map(|(_, p)| p.as_str()).collect();
    let from_snapshot = differing(&git, &record.snapshot, workspace, scratch, &paths).await?;
    let from_head = differing(&git, head, workspace, scratch, &paths).await?;
    let old = blobs(&git, &record.snapshot, &paths).await?;
    let new = blobs(&git, head, &paths).await?;
    // A path that is neither as the run found it nor as the run left it
    // was changed by someone else; one already as the run left it needs
    // nothing (an apply done before).
    let mut meanwhile = Vec::new();
    for path in from_snapshot.iter().filter(|p| from_head.contains(p)) {
        let cut_short = unfinished.iter().find(|j| &j.path == path);
        if !begun_by_troupe(&git, cut_short, workspace, scratch).await? {
            meanwhile.push(path.clone());
        }
    }
    // A path deleted by the run or by the user has no two versions to
    // merge: it is refused whatever was asked.
    let unmergeable: Vec<String> = meanwhile
        .iter()
        .filter(|path| {
            meanwhile_is == Meanwhile::Refuse
                || !old.contains_key(*path)
                || !new.contains_key(*path)
                || !workspace
                    .join(path)
                    .symlink_metadata()
                    .is_ok_and(|m| m.is_file())
        })
        .cloned()
        .collect();
    if !unmergeable.is_empty() {
        return Err(ApplyError::ChangedMeanwhile {
            paths: unmergeable,
            workspace: workspace.to_path_buf(),
            branch: record.branch.clone(),
        });
    }
    let mut applied = Applied::default();
    for (kind, path) in changes {
        match (kind, from_head.contains(&path)) {
            (_, false) => {}
            (_, true) if meanwhile.contains(&path) => {}
            ('D', true) => applied.removed.push(path),
            ('A', true) => {
                applied.added.push(path.clone());
                applied.written.push(path);
            }
            (_, true) => applied.written.push(path),
        }
    }
    let journal = Journal {
        head: head.to_string(),
        paths: applied
            .written
            .iter()
            .chain(&applied.removed)
            .map(|path| JournalPath {
                path: path.clone(),
                old: old.get(path).cloned(),
                new: new.get(path).cloned(),
            })
            .collect(),
    };
    crate::fsutil::write_json_atomic(&journal_path, &journal, Durability::Commit).map_err(
        |source| ApplyError::Journal {
            path: journal_path.clone(),
            source,
        },
    )?;
    if !applied.written.is_empty() {
        let index = scratch.join(SCRATCH[0]);
        let place = Place::with_index(workspace, &index);
        let result = async {
            git.run(&place, ["read-tree", head]).await?;
            let mut args = vec!["checkout-index", "-f", "-q", "--"];
            args.extend(applied.written.iter().map(String::as_str));
            git.run(&place, args).await
        }
        .await;
        let _ = std::fs::remove_file(&index);
        result?;
    }
    for path in &applied.removed {
        let full = workspace.join(path);
        match std::fs::remove_file(&full) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(ApplyError::Remove { path: full, source }),
        }
        // The directories the removal emptied go too, as git's own
        // checkout removes them: a step's `rm -r dir` leaves no `dir/`.
        for above in Path::new(path).ancestors().skip(1) {
            if above.as_os_str().is_empty() || std::fs::remove_dir(workspace.join(above)).is_err() {
                break;
            }
        }
    }
    for path in meanwhile {
        let (Some(base), Some(theirs)) = (old.get(&path), new.get(&path)) else {
            continue;
        };
        if merge_into(&git, workspace, scratch, &path, base, theirs).await? {
            applied.conflicted.push(path.clone());
        }
        applied.merged.push(path);
    }
    // Done: nothing is left for a next apply to finish.
    match std::fs::remove_file(&journal_path) {
        Err(source) if source.kind() != std::io::ErrorKind::NotFound => {
            return Err(ApplyError::Journal {
                path: journal_path,
                source,
            });
        }
        _ => {}
    }
    Ok(applied)
}

/// Whether a path that is neither as the run found it nor as it left it
/// is one a cut-short apply was writing: missing, empty, or a beginning of
/// the run's version. A path the journal does not name, or names as
/// removed, is not.
async fn begun_by_troupe(
    git: &Git,
    cut_short: Option<&JournalPath>,
    workspace: &Path,
    scratch: &Path,
) -> Result<bool, ApplyError> {
    let Some(JournalPath {
        path,
        new: Some(blob),
        ..
    }) = cut_short
    else {
        return Ok(false);
    };
    let here = workspace.join(path);
    // Gone: git removes the old file before it writes the new one, and
    // the apply was cut short between the two.
    let Ok(meta) = here.symlink_metadata() else {
        return Ok(true);
    };
    if !meta.is_file() {
        return Ok(false);
    }
    if meta.len() == 0 {
        return Ok(true);
    }
    let Ok(written) = std::fs::read(&here) else {
        return Ok(false);
    };
    let wanted = scratch.join("apply-blob.tmp");
    let file = crate::fsutil::create_file(&wanted).map_err(|source| ApplyError::Scratch {
        path: wanted.clone(),
        source,
    })?;
    let result = git
        .run_into(&Place::default(), &["cat-file", "blob", blob], file)
        .await;
    let wanted_bytes = std::fs::read(&wanted);
    let _ = std::fs::remove_file(&wanted);
    result?;
    Ok(wanted_bytes.is_ok_and(|bytes| bytes.starts_with(&written)))
}

/// The blob of each of `paths` in the commit `tree`; a path it does not
/// have is not in the map.
async fn blobs(
    git: &Git,
    tree: &str,
    paths: &[&str],
) -> Result<std::collections::HashMap<String, String>, GitError> {
    let mut args = vec!["ls-tree", "-r", "-z", "--full-tree", tree, "--"];
    args.extend(paths);
    let listed = git.run(&Place::default(), args).await?;
    Ok(listed
        .split('\0')
        .filter_map(|entry| {
            let (meta, path) = entry.split_once('\t')?;
            let blob = meta.split(' ').nth(2)?;
            Some((path.to_string(), blob.to_string()))
        })
        .collect())
}

/// Merges the run's change to `path` (from blob `base` to blob `theirs`)
/// into the user's version in `workspace`, which is rewritten with the
/// result; `true` when the changes overlapped and the file holds conflict
/// markers.
async fn merge_into(
    git: &Git,
    workspace: &Path,
    scratch: &Path,
    path: &str,
    base: &str,
    theirs: &str,
) -> Result<bool, ApplyError> {
    let (base_file, theirs_file) = (scratch.join(SCRATCH[2]), scratch.join(SCRATCH[3]));
    for (blob, file) in [(base, &base_file), (theirs, &theirs_file)] {
        let out = crate::fsutil::create_file(file).map_err(|source| ApplyError::Scratch {
            path: file.clone(),
            source,
        })?;
        git.run_into(&Place::default(), &["cat-file", "blob", blob], out)
            .await?;
    }
    let ours = workspace.join(path);
    let args: Vec<std::ffi::OsString> = vec![
        "merge-file".into(),
        "-p".into(),
        "-L".into(),
        format!("{path} (yours)").into(),
        "-L".into(),
        format!("{path} (as the run began)").into(),
        "-L".into(),
        format!("{path} (the run's)").into(),
        ours.clone().into(),
        base_file.clone().into(),
        theirs_file.clone().into(),
    ];
    let merged = git.output_bytes(&Place::default(), &args, None).await;
    let _ = std::fs::remove_file(&base_file);
    let _ = std::fs::remove_file(&theirs_file);
    let (code, merged) = merged?;
    // Its exit is the number of conflicts; a negative one is an error.
    let conflicts = match code {
        Some(n) if (0..128).contains(&n) => n,
        _ => {
            return Err(GitError::Failed {
                args: format!("merge-file of {path}"),
                status: format!("{code:?}"),
                stderr: String::new(),
            }
            .into());
        }
    };
    // Atomic, with the user's file's mode: cut short, the user's version is
    // still whole.
    let written = std::fs::metadata(&ours).and_then(|meta| {
        crate::fsutil::write_atomic(&ours, &merged, Durability::Atomic)?;
        std::fs::set_permissions(&ours, meta.permissions())
    });
    written.map_err(|source| ApplyError::Write {
        path: ours.clone(),
        source,
    })?;
    Ok(conflicts > 0)
}

/// troupe's scratch files and git's locks of them, left by an apply that
/// was killed: troupe's own, never the user's to remove. An apply with
/// nothing left to write would otherwise never reach their cleanup.
fn clear_stale_scratch(scratch: &Path) {
    for name in SCRATCH {
        let _ = std::fs::remove_file(scratch.join(name));
        let _ = std::fs::remove_file(scratch.join(format!("{name}.lock")));
    }
}

/// Those of `paths` whose state in `workspace` is not the one in the
/// commit `tree`: a file changed or deleted since, or one the commit does
/// not have that is there now.
async fn differing(
    git: &Git,
    tree: &str,
    workspace: &Path,
    scratch: &Path,
    paths: &[&str],
) -> Result<Vec<String>, GitError> {
    let index = scratch.join(SCRATCH[1]);
    let place = Place::with_index(workspace, &index);
    let result = async {
        git.run(&place, ["read-tree", tree]).await?;
        // Stat data for the files that match, so that only real changes
        // are reported; exit 1 only says some do not.
        git.output(&place, &["update-index", "-q", "--refresh"])
            .await?;
        let mut args = vec!["diff-files", "--name-only", "-z", "--"];
        args.extend(paths);
        let differ = git.run(&place, args).await?;
        let mut args = vec!["ls-files", "-z", "--"];
        args.extend(paths);
        let known = git.run(&place, args).await?;
        Ok::<_, GitError>((differ, known))
    }
    .await;
    let _ = std::fs::remove_file(&index);
    let (differ, known) = result?;
    let known: Vec<&str> = known.split('\0').filter(|p| !p.is_empty()).collect();
    let mut changed: Vec<String> = differ
        .split('\0')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    for path in paths {
        let new_here = !known.contains(path) && workspace.join(path).symlink_metadata().is_ok();
        if new_here && !changed.iter().any(|c| c == path) {
            changed.push((*path).to_string());
        }
    }
    changed.sort();
    Ok(changed)
}

/// `diff --name-status -z`: a status letter and a path, each ended by NUL.
fn parse_name_status(text: &str) -> Vec<(char, String)> {
    let mut fields = text.split('\0').filter(|f| !f.is_empty());
    let mut out = Vec::new();
    while let (Some(status), Some(path)) = (fields.next(), fields.next()) {
        out.push((status.chars().next().unwrap_or('M'), path.to_string()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::parse_name_status;

    #[test]
    fn name_status_pairs_a_letter_with_each_path() {
        let parsed = parse_name_status("M\0a.txt\0D\0old/b.txt\0A\0c d.txt\0");
        assert_eq!(
            parsed,
            vec![
                ('M', "a.txt".to_string()),
                ('D', "old/b.txt".to_string()),
                ('A', "c d.txt".to_string())
            ]
        );
    }
}
