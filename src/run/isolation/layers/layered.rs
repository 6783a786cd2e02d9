//! The copy-on-write side of `Worktrees`: one read-only tree per head an
//! attempt starts from (`<run>/bases/<commit>/`, written once by git and
//! shared by every attempt made from that head), and each attempt's own
//! layer beside its checkout (`upper-N/`, with the overlay's `work-N/`).
//! The agent's sandbox mounts them at `checkout-N/`, which on the host
//! stays an empty directory; what the attempt changed is its upper layer.
//!
//! The attempts made from the snapshot itself (all of them, in a run whose
//! steps start together) take the workspace as their base: it is what the
//! snapshot holds, so nothing is written at all. What the snapshot left
//! out is hidden from them by a whiteout in each upper layer: the results
//! directory, and what git ignores there (`.env`, `target/`), as it found
//! them when the run opened; a workspace with more than `HIDDEN_AT_MOST`
//! such paths gets a base written like any other. An edit of yours made
//! while they work shows to them, and is theirs only if they change that
//! file.
//!
//! A head the run's landings made is written as a thin layer of what
//! landed since the snapshot, laid over the workspace (see `thin`), where
//! the workspace is the snapshot's base; else whole, once.
//!
//! A base goes when no attempt uses it and the branch has moved on from
//! it, and the last one when the run ends.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

use super::upper::Markers;
use crate::fsutil::remove_dir_if_there;
use crate::git::{Git, Place};
use crate::protocol::{OverlayLayers, UpperLayer};
use crate::run::isolation::landing::lineage::Since;
use crate::run::isolation::{IsolationError, io, off_runtime};

/// One attempt's layers.
#[derive(Debug, Clone)]
pub struct Layers {
    /// The read-only trees of the attempt's base, the top one first: its
    /// tree alone, or a head's thin layer over the workspace.
    pub lower: Vec<PathBuf>,
    pub upper: PathBuf,
    pub work: PathBuf,
    /// Where the overlay keeps its markers.
    pub markers: Markers,
}

impl Layers {
    /// The worker's overlay: its writes go to its upper layer.
    pub fn for_worker(&self) -> OverlayLayers {
        OverlayLayers {
            lower: self.lower.clone(),
            upper: Some(UpperLayer {
                dir: self.upper.clone(),
                work: self.work.clone(),
            }),
            read_only: false,
        }
    }

    /// The bottom of the base: the workspace, or a tree troupe wrote.
    pub fn bottom(&self) -> &Path {
        self.lower.last().map_or(Path::new(""), PathBuf::as_path)
    }

    /// Whether the merged view holds `file` (relative to the checkout, not
    /// leaving it): in the top layer that has it unless a whiteout there,
    /// and unless a layer above the bottom deleted it or something above
    /// it; else in the bottom (the workspace, or a tree git wrote).
    pub fn holds(&self, file: &str) -> bool {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let relative = crate::fsutil::normalize(Path::new(file));
        if relative.is_absolute()
            || relative
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return false;
        }
        let whiteout =
            |meta: &std::fs::Metadata| meta.file_type().is_char_device() && meta.rdev() == 0;
        let above_bottom = &self.lower[..self.lower.len().saturating_sub(1)];
        for layer in std::iter::once(&self.upper).chain(above_bottom) {
            // Anything but a directory above the path in a layer (a
            // whiteout, a file, a link the worker made) hides it, and is
            // never followed out of the layer to answer.
            let hidden = relative.ancestors().skip(1).any(|above| {
                !above.as_os_str().is_empty()
                    && layer
                        .join(above)
                        .symlink_metadata()
                        .is_ok_and(|meta| !meta.is_dir())
            });
            if hidden {
                return false;
            }
            if let Ok(meta) = layer.join(&relative).symlink_metadata() {
                return !whiteout(&meta);
            }
        }
        self.bottom().join(&relative).symlink_metadata().is_ok()
    }

    /// The reviewer's: the same layers, mounted read-only, so that nobody
    /// writes any of them. (Not the upper layer as a lower one: stacked
    /// on a base that is the workspace, which holds it, the layers would
    /// overlap, which the kernel refuses.)
    pub fn for_reviewer(&self) -> OverlayLayers {
        OverlayLayers {
            read_only: true,
            ..self.for_worker()
        }
    }
}

/// The most paths git ignores in a workspace that is its attempts' base
/// (each attempt hides each one).
const HIDDEN_AT_MOST: usize = 1000;

/// What a workspace holds that its snapshot does not, `None` when that is
/// more than `HIDDEN_AT_MOST` paths: the results directory, and what git
/// ignores (a directory named once).
pub async fn ignored_in(
    git: &Git,
    workspace: &Path,
) -> Result<Option<Vec<String>>, IsolationError> {
    let place = Place::tree(workspace);
    let exclude = format!(
        ":(exclude){RESULTS_DIR}",
        RESULTS_DIR = crate::protocol::RESULTS_DIR
    );
    let listed = git
        .run(
            &place,
            [
                "ls-files",
                "--others",
                "--ignored",
                "--exclude-standard",
                "--directory",
                "-z",
                "--",
                ".",
                &exclude,
            ],
        )
        .await?;
    let mut hidden: Vec<String> = listed
        .split('\0')
        .filter(|p| !p.is_empty())
        .map(|p| p.trim_end_matches('/').to_string())
        .collect();
    hidden.push(crate::protocol::RESULTS_DIR.to_string());
    Ok((hidden.len() <= HIDDEN_AT_MOST).then_some(hidden))
}

/// The run's bases.
#[derive(Debug)]
pub struct Bases {
    /// The snapshot's commit, the workspace that holds it, and what an
    /// attempt on it hides; `None` when the workspace is not used so.
    workspace: Option<(String, PathBuf, Vec<String>)>,
    /// Where the thin layers of later heads are kept, or a killed troupe
    /// of the run kept them.
    thin: Option<ThinLayers>,
    /// Where the agents' overlays keep their markers: troupe as root
    /// mounts them as root, an ordinary user in a user namespace.
    pub markers: Markers,
    dir: PathBuf,
    /// The snapshot's index (`isolation::snapshot_index`), until the
    /// workspace's base takes it.
    snapshot_index: PathBuf,
    /// Each base by its commit: taken and given back under this one lock,
    /// so that a base is never removed while an attempt is taking it.
    made: Mutex<HashMap<String, Base>>,
    /// Names removed bases are moved to before they are deleted.
    gone: std::sync::atomic::AtomicU64,
}

#[derive(Debug)]
struct ThinLayers {
    dir: PathBuf,
    /// Whether this run may keep them there (see `thin::place`).
    usable: bool,
    /// Whether the directory could be made, when first needed.
    made: OnceCell<bool>,
}

#[derive(Debug, Default)]
struct Base {
    /// Its layers, the top one first.
    written: Arc<OnceCell<Vec<PathBuf>>>,
    users: usize,
}

impl Bases {
    pub fn new(
        run_dir: &Path,
        snapshot: &str,
        workspace: &Path,
        hidden: Option<Vec<String>>,
    ) -> Bases {
        let usable = hidden.is_some() && super::thin::place(run_dir, workspace).is_some();
        Bases {
            thin: super::thin::named(run_dir).map(|dir| ThinLayers {
                dir,
                usable,
                made: OnceCell::new(),
            }),
            workspace: hidden.map(|hidden| (snapshot.to_string(), workspace.to_path_buf(), hidden)),
            markers: match crate::sandbox::privileged() {
                true => Markers::Trusted,
                false => Markers::User,
            },
            dir: run_dir.join("bases"),
            snapshot_index: crate::run::isolation::snapshot_index(run_dir),
            made: Mutex::new(HashMap::new()),
            gone: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The index git wrote with the base of `commit` (its files' stat
    /// data), which each attempt's git directory starts from, so that a
    /// `git status` in the checkout compares rather than hashes.
    pub fn index(&self, commit: &str) -> PathBuf {
        self.dir.join(format!("{commit}.index"))
    }

    /// The layers of the base of `commit`, the top one first, written now
    /// if no attempt made them yet; the caller uses them until `release`.
    /// `since` says what landed since the run opened, where troupe knows.
    pub async fn take(
        &self,
        git: &Git,
        commit: &str,
        since: Option<Arc<Since>>,
    ) -> Result<Vec<PathBuf>, IsolationError> {
        let written = {
            let mut made = self.made.lock().unwrap_or_else(|e| e.into_inner());
            let base = made.entry(commit.to_string()).or_default();
            base.users += 1;
            Arc::clone(&base.written)
        };
        match written
            .get_or_try_init(|| self.write(git, commit, since))
            .await
        {
            Ok(dir) => Ok(dir.clone()),
            Err(e) => {
                self.give_back(commit);
                Err(e)
            }
        }
    }

    fn give_back(&self, commit: &str) {
        let mut made = self.made.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(base) = made.get_mut(commit) {
            base.users = base.users.saturating_sub(1);
        }
    }

    async fn write(
        &self,
        git: &Git,
        commit: &str,
        since: Option<Arc<Since>>,
    ) -> Result<Vec<PathBuf>, IsolationError> {
        let index = self.index(commit);
        // What a troupe killed while writing it left (the run is held: it
        // is this run's own scratch).
        let mut lock = index.clone().into_os_string();
        lock.push(".lock");
        let _ = std::fs::remove_file(lock);
        if let Some((snapshot, workspace, _)) = &self.workspace
            && snapshot == commit
        {
            // The workspace as its own base: only the index is written.
            let parent = self.dir.clone();
            off_runtime(move || {
                crate::fsutil::nofollow::create_dir_all(&parent).map_err(io(&parent))
            })
            .await?;
            // The snapshot's own index, with the stat data of the files it
            // read; read from the tree where it is gone.
            if std::fs::rename(&self.snapshot_index, &index).is_err() {
                let _ = std::fs::remove_file(&index);
                let place = Place {
                    index: Some(&index),
                    ..Place::default()
                };
                git.run(&place, ["read-tree", commit]).await?;
            }
            return Ok(vec![workspace.clone()]);
        }
        if let (Some((snapshot, workspace, _)), Some(thin)) =
            (&self.workspace, self.thin_layers().await)
        {
            let (layer, seed) = (thin.join(commit), self.index(snapshot));
            // The paths that landed, where they are known from the
            // snapshot on: no `diff-tree` to find them.
            let known = since
                .as_ref()
                .filter(|since| &since.commit == snapshot)
                .map(|since| since.paths.as_slice());
            let heads = super::thin::Heads {
                snapshot,
                head: commit,
                known,
            };
            if super::thin::write(git, heads, &layer, (&seed, &index)).await? {
                return Ok(vec![layer, workspace.clone()]);
            }
        }
        let dir = self.dir.join(commit);
        let (parent, made) = (self.dir.clone(), dir.clone());
        off_runtime(move || {
            crate::fsutil::nofollow::create_dir_all(&parent).map_err(io(&parent))?;
            // What a troupe killed while writing it left: the run's own.
            crate::fsutil::nofollow::remake_dir(&made).map_err(io(&made))
        })
        .await?;
        let _ = std::fs::remove_file(&index);
        let place = Place::with_index(&dir, &index);
        git.run(&place, ["read-tree", "--reset", "-u", commit])
            .await?;
        Ok(vec![dir])
    }

    /// The directory of the run's thin layers, made when first asked for;
    /// `None` where there is none.
    async fn thin_layers(&self) -> Option<&Path> {
        let thin = self.thin.as_ref().filter(|thin| thin.usable)?;
        let made = thin.made.get_or_init(|| async {
            let dir = thin.dir.clone();
            tokio::task::spawn_blocking(move || super::thin::make(&dir))
                .await
                .unwrap_or(false)
        });
        made.await.then_some(thin.dir.as_path())
    }

    /// An attempt no longer uses the base of `commit`; the bases no
    /// attempt uses that are not `head`'s go (the branch moved on from
    /// them), but the workspace's where thin layers are made: its index
    /// is what each one's index starts from.
    pub async fn release(&self, commit: &str, head: &str) {
        self.give_back(commit);
        let seed = match (&self.workspace, &self.thin) {
            (Some((snapshot, _, _)), Some(thin)) if thin.usable => Some(snapshot.as_str()),
            _ => None,
        };
        self.remove_where(|c, base| base.users == 0 && c != head && Some(c) != seed)
            .await;
    }

    /// Removes every base: the run is over.
    /// With them goes what a killed troupe of the run left there: the
    /// bases and indexes it had made, and its thin layers.
    pub async fn remove_all(&self) {
        self.made.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let bases = self.dir.clone();
        let thin = self.thin.as_ref().map(|thin| thin.dir.clone());
        let removed = tokio::task::spawn_blocking(move || {
            remove_dir_if_there(&bases).map_err(|e| (bases, e))?;
            match thin {
                Some(thin) => super::thin::remove(&thin).map_err(|e| (thin, e)),
                None => Ok(()),
            }
        })
        .await;
        if let Ok(Err((path, e))) = removed {
            crate::tell!(
                "troupe: cannot remove the checkouts' bases {}: {e}",
                path.display()
            );
        }
    }

    /// What an attempt whose base's bottom is `dir` hides: what the
    /// workspace holds that the snapshot does not, when `dir` is the
    /// workspace.
    pub fn hidden_from(&self, dir: &Path) -> Vec<String> {
        match &self.workspace {
            Some((_, ws, hidden)) if ws == dir => hidden.clone(),
            _ => Vec::new(),
        }
    }

    /// Removes the bases `unused` picks: out of the map and moved aside
    /// under the lock (a later `take` of the same commit writes it anew),
    /// then deleted off the runtime. The workspace, when it was a base,
    /// only loses its index.
    async fn remove_where(&self, unused: impl Fn(&str, &Base) -> bool) {
        let moved: Vec<PathBuf> = {
            let mut made = self.made.lock().unwrap_or_else(|e| e.into_inner());
            let picked: Vec<String> = made
                .iter()
                .filter(|(commit, base)| unused(commit, base))
                .map(|(commit, _)| commit.clone())
                .collect();
            let mut moved = Vec::new();
            for commit in picked {
                made.remove(&commit);
                let n = self.gone.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let mut held = vec![
                    (
                        self.index(&commit),
                        self.dir.join(format!(".gone-{n}-index")),
                    ),
                    (
                        self.dir.join(&commit),
                        self.dir.join(format!(".gone-{n}-tree")),
                    ),
                ];
                if let Some(ThinLayers { dir, .. }) = &self.thin {
                    held.push((dir.join(&commit), dir.join(format!(".gone-{n}"))));
                }
                for (from, aside) in held {
                    if std::fs::rename(&from, &aside).is_ok() {
                        moved.push(aside);
                    }
                }
            }
            moved
        };
        if moved.is_empty() {
            return;
        }
        let removed = tokio::task::spawn_blocking(move || {
            for path in &moved {
                let gone = match path.is_dir() {
                    true => std::fs::remove_dir_all(path),
                    false => std::fs::remove_file(path),
                };
                if let Err(e) = gone {
                    return Err((path.clone(), e));
                }
            }
            Ok(())
        })
        .await;
        if let Ok(Err((path, e))) = removed {
            crate::tell!(
                "troupe: cannot remove the checkouts' base {}: {e}",
                path.display()
            );
        }
    }
}

/// Makes `dir` and everything in it the agents' own where troupe runs as
/// root (see `sandbox::agent_owner`); elsewhere they are the user's, as
/// the agents are.
pub fn give_to_agents(dir: &Path) -> Result<(), IsolationError> {
    let Some(owner) = crate::sandbox::agent_owner() else {
        return Ok(());
    };
    for entry in walkdir::WalkDir::new(dir) {
        let entry = entry.map_err(|e| io(dir)(e.into()))?;
        std::os::unix::fs::lchown(entry.path(), Some(owner), Some(owner))
            .map_err(io(entry.path()))?;
    }
    Ok(())
}

/// Removes an attempt's layers. The overlay's work directory holds
/// directories only the kernel opens (mode 0), which are opened up first.
pub fn remove_layers(upper: &Path, work: &Path) -> std::io::Result<()> {
    crate::fsutil::open_up_dirs(work);
    remove_dir_if_there(upper)?;
    remove_dir_if_there(work)
}

/// Empties the work directory of an attempt whose worker is gone. Its
/// overlay was `volatile` (not synced as the worker left it), and the
/// kernel marks such a work directory (`work/incompat/volatile`) so that
/// no later mount trusts layers a crash may have cut short; the
/// reviewer's read-only mount of the same layers comes after a worker
/// that ended, not a crash, and finds the directory empty, as a first
/// mount does.
pub fn clear_work(work: &Path) -> std::io::Result<()> {
    crate::fsutil::open_up_dirs(work);
    for entry in std::fs::read_dir(work)? {
        let path = entry?.path();
        match std::fs::symlink_metadata(&path)?.is_dir() {
            true => std::fs::remove_dir_all(&path)?,
            false => std::fs::remove_file(&path)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Layers, Markers};

    #[test]
    fn a_link_in_the_layer_is_not_followed_out_of_it() {
        let dir = tempfile::tempdir().unwrap();
        let layers = Layers {
            lower: vec![dir.path().join("base")],
            upper: dir.path().join("upper"),
            work: dir.path().join("work"),
            markers: Markers::User,
        };
        std::fs::create_dir_all(layers.bottom().join("kept")).unwrap();
        std::fs::write(layers.bottom().join("kept/file"), "base").unwrap();
        std::fs::create_dir_all(&layers.upper).unwrap();
        std::os::unix::fs::symlink("/etc", layers.upper.join("out")).unwrap();
        std::fs::write(layers.upper.join("new"), "new").unwrap();
        assert!(layers.holds("new"));
        assert!(layers.holds("kept/file"));
        assert!(
            !layers.holds("out/passwd"),
            "read through the worker's link"
        );
        assert!(!layers.holds("../upper/new"));
    }
}
