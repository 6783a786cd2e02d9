//! A landed head's base as a thin layer: the records that decide it,
//! and the layer a run's checkout gets, on a real repository.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{layerable, records};
use crate::run::isolation::upper::tests::{skipped, whiteout};
use crate::run::isolation::{Bounds, CheckoutKind, Snapshot, Worktrees};

#[test]
fn a_changed_ignore_file_or_a_nested_repository_is_written_whole() {
    let z = "0".repeat(40);
    let record = |old: &str, new: &str, status: &str, path: &str| {
        format!(":{old} {new} {z} {z} {status}\0{path}\0")
    };
    let plain = record("100644", "100644", "M", "src/lib.rs")
        + &record("000000", "040000", "A", "new")
        + &record("100644", "000000", "D", "old.txt");
    let parsed = records(plain.as_bytes()).expect("records");
    assert_eq!(parsed.len(), 3);
    assert!(layerable(&parsed));
    assert!(parsed[2].deleted);
    let rules = plain.clone() + &record("100644", "100644", "M", "src/.gitignore");
    assert!(!layerable(&records(rules.as_bytes()).expect("records")));
    let nested = plain + &record("000000", "160000", "A", "vendor/lib");
    assert!(records(nested.as_bytes()).is_none());
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

/// Every path a layer holds, directories left out, with `(whiteout)` after
/// a whiteout.
fn held(layer: &Path) -> Vec<String> {
    use std::os::unix::fs::FileTypeExt;
    let mut found: Vec<String> = walkdir::WalkDir::new(layer)
        .into_iter()
        .map(|entry| entry.expect("a readable layer"))
        .filter(|entry| !entry.file_type().is_dir())
        .map(|entry| {
            let path = entry.path().strip_prefix(layer).expect("inside");
            match entry.file_type().is_char_device() {
                true => format!("{} (whiteout)", path.display()),
                false => path.display().to_string(),
            }
        })
        .collect();
    found.sort();
    found
}

/// A repository of a few files and fifty unchanged ones, and a run's
/// trees over it with copy-on-write checkouts.
async fn opened(dir: &Path) -> (PathBuf, Worktrees) {
    let ws = dir.join("ws");
    for (path, content) in [
        ("f.txt", "f\n"),
        ("gone.txt", "gone\n"),
        ("old/x.txt", "x\n"),
        ("old/deeper/y.txt", "y\n"),
        ("keep/z.txt", "z\n"),
    ] {
        std::fs::create_dir_all(ws.join(path).parent().expect("a parent")).expect("a dir");
        std::fs::write(ws.join(path), content).expect("a file");
    }
    for n in 0..50 {
        std::fs::create_dir_all(ws.join("many")).expect("a dir");
        std::fs::write(ws.join(format!("many/{n}.txt")), "unchanged\n").expect("a file");
    }
    git(&ws, &["init", "-q", "-b", "main"]);
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-q", "-m", "start"]);
    let run_dir = ws.join(crate::protocol::RESULTS_DIR).join("run_t");
    std::fs::create_dir_all(&run_dir).expect("the run directory");
    let bounds = Bounds {
        stop: crate::signal::StopSignal::default(),
        max_file_size: None,
        guarded: Vec::new(),
        checkouts: CheckoutKind::Layered,
    };
    let record = Worktrees::prepare(&ws, &run_dir, "run_t", &bounds.stop)
        .await
        .expect("the snapshot");
    let trees = Worktrees::open(record, &ws, &run_dir, bounds, Snapshot::JustTaken)
        .await
        .expect("the branch");
    (ws, trees)
}

/// `f.txt` edited and `new/n.txt` added in the upper layer of `first`
/// (attempt 1 of step `a`, besides what the caller wrote there), its
/// change landed, its checkout gone.
async fn lands_an_edit_and_a_new_file(trees: &Worktrees, first: &crate::run::isolation::Checkout) {
    let upper = &first.layers.as_ref().expect("copy-on-write").upper;
    std::fs::write(upper.join("f.txt"), "edited\n").expect("an edit");
    std::fs::create_dir_all(upper.join("new")).expect("a dir");
    std::fs::write(upper.join("new/n.txt"), "n\n").expect("a new file");
    let change = trees.change(first, "a", 1).await.expect("a change");
    trees.land(&change, "a", 1, true).await.expect("landed");
    trees.discard(first).await;
}

/// Step `c`'s checkout of the head the landing made, with its layers: a
/// thin one over the workspace.
async fn on_the_new_head(
    trees: &Worktrees,
    ws: &Path,
) -> (
    crate::run::isolation::Checkout,
    super::super::layered::Layers,
) {
    let second = trees
        .checkout("c", 1)
        .await
        .expect("a checkout of the new head");
    let layers = second.layers.clone().expect("copy-on-write");
    assert_eq!(layers.lower.len(), 2, "{:?}", layers.lower);
    assert_eq!(layers.bottom(), ws);
    (second, layers)
}

#[tokio::test]
async fn a_landed_heads_base_holds_what_landed_and_lies_over_the_workspace() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (ws, trees) = opened(dir.path()).await;
    let first = trees.checkout("a", 1).await.expect("a checkout");
    let layers = first.layers.clone().expect("copy-on-write");
    assert_eq!(
        layers.lower,
        vec![ws.clone()],
        "the snapshot's base is the workspace"
    );
    let upper = &layers.upper;
    if !whiteout(&upper.join("gone.txt")) || !whiteout(&upper.join("old")) {
        return skipped("this user may not make a whiteout (0/0)");
    }
    lands_an_edit_and_a_new_file(&trees, &first).await;

    let (second, layers) = on_the_new_head(&trees, &ws).await;
    let thin = layers.lower[0].clone();
    assert!(!thin.starts_with(&ws), "a lower layer inside another");
    assert_eq!(
        held(&thin),
        [
            "f.txt",
            "gone.txt (whiteout)",
            "new/n.txt",
            "old (whiteout)"
        ],
        "the thin layer holds what landed, and nothing of the rest"
    );
    assert_eq!(
        std::fs::read_to_string(thin.join("f.txt")).expect("f.txt"),
        "edited\n"
    );
    for (path, seen) in [
        ("f.txt", true),
        ("new/n.txt", true),
        ("keep/z.txt", true),
        ("many/7.txt", true),
        ("gone.txt", false),
        ("old/x.txt", false),
        ("old/deeper/y.txt", false),
    ] {
        assert_eq!(layers.holds(path), seen, "{path}");
    }
    // The head's index is the snapshot's merged to it, though every
    // attempt on the snapshot is gone: what the run did not change keeps
    // the stat data git read the workspace's file with.
    let index = second.git.git_dir.join("index");
    let debug = Command::new("git")
        .args(["ls-files", "--debug", "keep/z.txt", "f.txt"])
        .current_dir(&ws)
        .env("GIT_INDEX_FILE", &index)
        .output()
        .expect("git runs");
    let debug = String::from_utf8_lossy(&debug.stdout).into_owned();
    let mtimes: Vec<&str> = debug
        .lines()
        .filter_map(|line| line.trim().strip_prefix("mtime: "))
        .collect();
    assert_eq!(mtimes.len(), 2, "{debug}");
    assert_ne!(
        mtimes[0], "0:0",
        "f.txt, which landed, is in the layer: {debug}"
    );
    assert_ne!(mtimes[1], "0:0", "keep/z.txt lost its stat data: {debug}");
    trees.discard(&second).await;
    trees.finish().await;
    assert!(!thin.exists(), "the run's end removes its thin layers");
    assert_eq!(
        std::fs::read_to_string(ws.join("f.txt")).expect("f.txt"),
        "f\n"
    );
}

#[tokio::test]
async fn a_head_of_added_and_changed_files_is_laid_from_what_troupe_knows_landed() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (ws, trees) = opened(dir.path()).await;
    let first = trees.checkout("a", 1).await.expect("a checkout");
    lands_an_edit_and_a_new_file(&trees, &first).await;
    let since = trees.tip().since.expect("troupe knows what landed");
    assert_eq!(since.paths, ["f.txt", "new/n.txt"]);

    let (second, layers) = on_the_new_head(&trees, &ws).await;
    assert_eq!(held(&layers.lower[0]), ["f.txt", "new/n.txt"]);
    assert_eq!(
        std::fs::read_to_string(layers.lower[0].join("new/n.txt")).expect("n.txt"),
        "n\n"
    );
    assert!(layers.holds("many/3.txt") && layers.holds("gone.txt"));
    trees.discard(&second).await;
    trees.finish().await;
    assert_eq!(
        std::fs::read_to_string(ws.join("f.txt")).expect("f.txt"),
        "f\n"
    );
}

#[test]
fn clean_removes_the_thin_layers_a_killed_troupe_left() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let run_dir = dir.path().join("run_k");
    std::fs::create_dir_all(&run_dir).expect("the run directory");
    let thin = super::named(&run_dir).expect("a place for them");
    assert!(super::make(&thin), "{} could not be made", thin.display());
    std::fs::create_dir_all(thin.join("abc/src")).expect("a layer");
    std::fs::write(thin.join("abc/src/lib.rs"), "begun").expect("a file");
    crate::run::isolation::clean(&run_dir).expect("clean");
    assert!(!thin.exists(), "{} is left", thin.display());
}
