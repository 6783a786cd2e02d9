//! `commit_upper` against the oracle it replaces: every upper
//! directory here stands for a full tree, built beside it by hand (or
//! copied out of a real overlay mount), and the tree made from the upper
//! layer must be the one `git add -A` makes of the full tree.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Markers, Over, UpperChange, commit_upper};
use crate::git::Git;

/// A repository with a committed base, and room for cases beside it.
struct Repo {
    dir: tempfile::TempDir,
    git_dir: PathBuf,
    base: PathBuf,
    base_tree: String,
    /// A commit of it, the changes' parent.
    base_commit: String,
}

impl Repo {
    async fn new(bare: bool) -> Repo {
        Repo::of_format(bare, "sha1").await
    }

    /// A repository whose objects are named by `format`'s hash.
    async fn of_format(bare: bool, format: &str) -> Repo {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let base = dir.path().join("base");
        let git_dir = match bare {
            true => dir.path().join("repo.git"),
            false => base.join(".git"),
        };
        let mut init = Command::new("git");
        init.args(["init", "-q", &format!("--object-format={format}")]);
        match bare {
            true => init.arg("--bare").arg(&git_dir),
            false => init.arg(&base),
        };
        let made = init.env("GIT_CONFIG_GLOBAL", "/dev/null");
        assert!(made.status().expect("git runs").success());
        write(&base.join("README"), "readme\n");
        write(&base.join("src/lib.rs"), "lib\n");
        write(&base.join("src/main.rs"), "main\n");
        write(&base.join("src/deep/a.rs"), "a\n");
        write(&base.join("src/deep/b.rs"), "b\n");
        write(&base.join("src/deep/inner/c.rs"), "c\n");
        write(&base.join("bin/run.sh"), "#!/bin/sh\n");
        chmod(&base.join("bin/run.sh"), 0o755);
        write(&base.join("docs/guide.md"), "guide\n");
        write(&base.join("docs/with space.md"), "spaced\n");
        write(&base.join("docs/old/notes.md"), "notes\n");
        write(&base.join("plain"), "a file, to become a directory\n");
        write(&base.join("tree/x"), "x\n");
        write(&base.join("tree/sub/y"), "y\n");
        symlink("src/lib.rs", base.join("link")).expect("a link");
        write(&base.join(".gitignore"), "build-out/\n*.tmp\n");
        write(
            &base.join("kept.tmp"),
            "tracked, though the rules match it\n",
        );
        let mut repo = Repo {
            dir,
            git_dir,
            base,
            base_tree: String::new(),
            base_commit: String::new(),
        };
        let base = repo.base.clone();
        repo.base_tree = repo.oracle(&base);
        let commit = Command::new("git")
            .args(["commit-tree", &repo.base_tree, "-m", "base"])
            .env("GIT_DIR", &repo.git_dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@localhost")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@localhost")
            .output()
            .expect("git runs");
        assert!(commit.status.success(), "{commit:?}");
        repo.base_commit = String::from_utf8_lossy(&commit.stdout).trim().to_string();
        repo
    }

    fn git(&self) -> Git {
        Git::new(self.git_dir.clone())
    }

    /// An empty upper directory, and a copy of the base to change the
    /// same way (`.git` left out).
    fn case(&self, name: &str) -> (PathBuf, PathBuf) {
        let upper = self.dir.path().join(format!("{name}.upper"));
        let full = self.dir.path().join(format!("{name}.full"));
        std::fs::create_dir(&upper).expect("the upper directory");
        std::fs::create_dir(&full).expect("the full tree");
        let copied = Command::new("cp")
            .arg("-a")
            .arg(self.base.join("."))
            .arg(&full)
            .status()
            .expect("cp runs");
        assert!(copied.success());
        let _ = std::fs::remove_dir_all(full.join(".git"));
        let _ = std::fs::remove_file(full.join(".git"));
        (upper, full)
    }

    /// The tree `git add -A` makes of `tree`, with an index of its own.
    fn oracle(&self, tree: &Path) -> String {
        let index = self.dir.path().join("oracle.index");
        let _ = std::fs::remove_file(&index);
        let git = |args: &[&str]| {
            let out = Command::new("git")
                .args(args)
                .env("GIT_DIR", &self.git_dir)
                .env("GIT_WORK_TREE", tree)
                .env("GIT_INDEX_FILE", &index)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_AUTHOR_NAME", "t")
                .env("GIT_AUTHOR_EMAIL", "t@localhost")
                .env("GIT_COMMITTER_NAME", "t")
                .env("GIT_COMMITTER_EMAIL", "t@localhost")
                .current_dir(tree)
                .output()
                .expect("git runs");
            assert!(out.status.success(), "git {args:?}: {out:?}");
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        git(&["add", "-A"]);
        git(&["write-tree"])
    }

    async fn tree_of(&self, upper: &Path, markers: Markers, max: Option<u64>) -> UpperChange {
        let over = Over {
            commit: &self.base_commit,
            rules: &self.base,
        };
        let cached = crate::git::Cached::default();
        let made = commit_upper(&self.git(), &cached, over, upper, markers, "a change", max)
            .await
            .expect("a commit from the upper directory");
        if let Some(made) = &made.made {
            let parent = Command::new("git")
                .args(["rev-parse", &format!("{}^", made.commit)])
                .env("GIT_DIR", &self.git_dir)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .output()
                .expect("git runs");
            let parent = String::from_utf8_lossy(&parent.stdout).trim().to_string();
            assert_eq!(parent, self.base_commit, "the change is not on its base");
            let refs = Command::new("git")
                .args(["for-each-ref"])
                .env("GIT_DIR", &self.git_dir)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .output()
                .expect("git runs");
            assert_eq!(
                String::from_utf8_lossy(&refs.stdout),
                "",
                "a reference was written"
            );
        }
        made
    }

    /// Asserts that `upper` makes the tree `git add -A` makes of `full`.
    async fn check(&self, upper: &Path, full: &Path, markers: Markers) {
        let made = self.tree_of(upper, markers, None).await;
        assert_eq!(made.refused, Vec::<String>::new());
        let expected = self.oracle(full);
        let tree = made.made.expect("a commit").tree;
        if tree != expected {
            let listed = |tree: &str| {
                let out = Command::new("git")
                    .args(["ls-tree", "-r", tree])
                    .env("GIT_DIR", &self.git_dir)
                    .env("GIT_CONFIG_GLOBAL", "/dev/null")
                    .output()
                    .expect("git runs");
                format!("{out:?}")
            };
            panic!(
                "the tree from the upper layer is not the full tree's:\nexpected {expected}: {}\nmade {tree}: {}",
                listed(&expected),
                listed(&tree)
            );
        }
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("directories");
    std::fs::write(path, text).expect("a file");
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("a chmod");
}

fn mkdir(path: &Path) {
    std::fs::create_dir_all(path).expect("a directory");
}

fn set_opaque(dir: &Path, markers: Markers) {
    mkdir(dir);
    let name = format!("{}opaque", markers.prefix());
    xattr::set(dir, name, b"y").expect("an opaque marker");
}

/// Makes a whiteout at `path`: a character device 0/0, which Linux lets
/// anyone make since 5.8, and only root before.
pub(in crate::run::isolation) fn whiteout(path: &Path) -> bool {
    use nix::sys::stat::{Mode, SFlag, makedev, mknod};
    mkdir(path.parent().expect("a parent"));
    match mknod(path, SFlag::S_IFCHR, Mode::empty(), makedev(0, 0)) {
        Ok(()) => true,
        Err(nix::errno::Errno::EPERM) => false,
        Err(e) => panic!("mknod {}: {e}", path.display()),
    }
}

/// A case this machine cannot make: said and passed, but failed in CI,
/// where every case must run.
pub(in crate::run::isolation) fn skipped(why: &str) {
    assert_ne!(
        std::env::var("CI").as_deref(),
        Ok("true"),
        "cannot run in CI: {why}"
    );
    eprintln!("skipped: {why}");
}

fn root() -> bool {
    nix::unistd::geteuid().is_root()
}

#[tokio::test]
async fn new_and_changed_files_modes_and_links_merge_with_the_base() {
    for (bare, format) in [(false, "sha1"), (true, "sha1"), (false, "sha256")] {
        let repo = Repo::of_format(bare, format).await;
        let (upper, full) = repo.case("files");
        for tree in [&upper, &full] {
            write(&tree.join("src/new.rs"), "new\n");
            write(&tree.join("README"), "readme, changed\n");
            write(&tree.join("src/main.rs"), "main\n");
            chmod(&tree.join("src/main.rs"), 0o755);
            write(&tree.join("bin/run.sh"), "#!/bin/sh\n");
            chmod(&tree.join("bin/run.sh"), 0o644);
            write(&tree.join("new/dir/file"), "nested\n");
            // Larger than one read: hashed and compressed as it is read.
            write(&tree.join("src/large.txt"), &"a line\n".repeat(20_000));
            let _ = std::fs::remove_file(tree.join("link"));
            symlink("README", tree.join("link")).expect("a link");
            mkdir(&tree.join("docs"));
            symlink("guide.md", tree.join("docs/to-guide")).expect("a link");
            symlink("../src", tree.join("new/to-src")).expect("a link to a directory");
        }
        repo.check(&upper, &full, Markers::User).await;
    }
}

#[tokio::test]
async fn new_paths_the_ignore_rules_match_stay_out_as_add_a_leaves_them() {
    let repo = Repo::new(false).await;
    let (upper, full) = repo.case("ignored");
    for tree in [&upper, &full] {
        write(&tree.join("build-out/app.bin"), "built\n");
        write(&tree.join("src/scratch.tmp"), "scratch\n");
        write(&tree.join("kept.tmp"), "tracked, and changed\n");
        write(&tree.join("src/real.rs"), "real\n");
    }
    repo.check(&upper, &full, Markers::User).await;
}

#[tokio::test]
async fn a_negated_rule_keeps_a_path_the_other_rules_leave_out() {
    let repo = Repo::new(false).await;
    // On disk in the base, where the rules are read, and new in the change.
    write(&repo.base.join("src/.gitignore"), "!wanted.tmp\n");
    let (upper, full) = repo.case("negated");
    write(&upper.join("src/.gitignore"), "!wanted.tmp\n");
    for tree in [&upper, &full] {
        write(&tree.join("src/wanted.tmp"), "kept\n");
        write(&tree.join("src/unwanted.tmp"), "left out\n");
    }
    repo.check(&upper, &full, Markers::User).await;
}

#[tokio::test]
async fn a_layer_of_a_thousand_paths_merges_the_same() {
    let repo = Repo::new(false).await;
    let (upper, full) = repo.case("many");
    for tree in [&upper, &full] {
        for n in 0..=1000 {
            write(&tree.join(format!("many/{n}.txt")), "n\n");
        }
        write(&tree.join("src/lib.rs"), "lib, changed\n");
    }
    repo.check(&upper, &full, Markers::User).await;
}

#[tokio::test]
async fn whiteouts_delete_a_file_a_link_and_a_whole_directory() {
    let repo = Repo::new(false).await;
    let (upper, full) = repo.case("whiteouts");
    let made = ["src/lib.rs", "src/deep", "link", "docs/with space.md"]
        .iter()
        .all(|path| whiteout(&upper.join(path)));
    if !made {
        return skipped("mknod of a whiteout (0/0) needs CAP_MKNOD on this kernel");
    }
    std::fs::remove_file(full.join("src/lib.rs")).expect("rm");
    std::fs::remove_dir_all(full.join("src/deep")).expect("rm -r");
    std::fs::remove_file(full.join("link")).expect("rm");
    std::fs::remove_file(full.join("docs/with space.md")).expect("rm");
    repo.check(&upper, &full, Markers::User).await;
}

#[tokio::test]
async fn an_opaque_directory_hides_the_base_one() {
    let mut kinds = vec![Markers::User];
    match root() {
        true => kinds.push(Markers::Trusted),
        false => skipped("trusted.overlay.opaque can be set by root only"),
    }
    for markers in kinds {
        let repo = Repo::new(false).await;
        let (upper, full) = repo.case("opaque");
        set_opaque(&upper.join("docs"), markers);
        set_opaque(&upper.join("src/deep"), markers);
        std::fs::remove_dir_all(full.join("docs")).expect("rm -r");
        std::fs::remove_dir_all(full.join("src/deep")).expect("rm -r");
        for tree in [&upper, &full] {
            write(&tree.join("docs/new.md"), "new\n");
            write(&tree.join("src/deep/a.rs"), "a, again\n");
        }
        repo.check(&upper, &full, markers).await;
    }
}

#[tokio::test]
async fn a_directory_replaces_a_file_and_a_file_a_directory() {
    let repo = Repo::new(false).await;
    let (upper, full) = repo.case("trade");
    std::fs::remove_file(full.join("plain")).expect("rm");
    std::fs::remove_dir_all(full.join("tree")).expect("rm -r");
    std::fs::remove_file(full.join("README")).expect("rm");
    for tree in [&upper, &full] {
        write(&tree.join("plain/inside"), "in a directory now\n");
        write(&tree.join("tree"), "a file now\n");
        mkdir(&tree.join("README"));
    }
    repo.check(&upper, &full, Markers::User).await;
}

#[tokio::test]
async fn the_top_level_git_is_never_part_of_a_change() {
    let repo = Repo::new(false).await;
    let (upper, full) = repo.case("dotgit");
    write(&upper.join(".git"), "gitdir: /nowhere\n");
    repo.check(&upper, &full, Markers::User).await;
    std::fs::remove_file(upper.join(".git")).expect("rm");
    write(&upper.join(".git/HEAD"), "ref: refs/heads/main\n");
    let made = repo.tree_of(&upper, Markers::User, None).await;
    let tree = made.made.map(|m| m.tree);
    assert_eq!(tree.as_deref(), Some(repo.base_tree.as_str()));
}

#[tokio::test]
async fn names_with_spaces_tabs_newlines_quotes_and_other_bytes() {
    let repo = Repo::new(false).await;
    let (upper, full) = repo.case("names");
    let names: [&[u8]; 6] = [
        b"with space",
        b"tab\there",
        b"new\nline",
        b"\"quoted",
        b"back\\slash",
        b"caf\xe9",
    ];
    for tree in [&upper, &full] {
        for name in names {
            let path = tree.join("odd").join(OsStr::from_bytes(name));
            write(&path, "odd\n");
        }
        symlink("a\ntarget", tree.join("odd/link\nname")).expect("a link");
    }
    repo.check(&upper, &full, Markers::User).await;
}

#[tokio::test]
async fn what_troupe_cannot_account_for_is_refused_and_no_tree_is_made() {
    let repo = Repo::new(false).await;
    let (upper, _) = repo.case("refused");
    nix::unistd::mkfifo(&upper.join("pipe"), nix::sys::stat::Mode::S_IRWXU).expect("a FIFO");
    let _socket = std::os::unix::net::UnixListener::bind(upper.join("socket")).expect("a socket");
    write(&upper.join("big"), "more than ten bytes\n");
    write(&upper.join("moved"), "");
    xattr::set(upper.join("moved"), "user.overlay.redirect", b"/elsewhere").expect("an xattr");
    write(&upper.join("meta"), "");
    xattr::set(upper.join("meta"), "user.overlay.metacopy", b"").expect("an xattr");
    write(&upper.join("src/xwhiteout"), "");
    xattr::set(upper.join("src/xwhiteout"), "user.overlay.whiteout", b"").expect("an xattr");
    mkdir(&upper.join("docs"));
    xattr::set(upper.join("docs"), "user.overlay.opaque", b"x").expect("an xattr");
    write(&upper.join("nested/.git/HEAD"), "ref: refs/heads/main\n");
    let made = repo.tree_of(&upper, Markers::User, Some(10)).await;
    assert_eq!(made.made, None);
    let expected = [
        "big is 20 bytes, more than --max-file-size 10: troupe takes only files, directories and links of a sane size into a change",
        "docs carries the overlay marker user.overlay.opaque, which troupe's mounts never make: troupe takes only what came through its mount into a change",
        "meta carries the overlay marker user.overlay.metacopy, which troupe's mounts never make: troupe takes only what came through its mount into a change",
        "moved carries the overlay marker user.overlay.redirect, which troupe's mounts never make: troupe takes only what came through its mount into a change",
        "nested/.git is a .git inside the change: troupe takes no nested repository into a change",
        "pipe is a FIFO: troupe takes only files, directories and links of a sane size into a change",
        "socket is a socket: troupe takes only files, directories and links of a sane size into a change",
        "src/xwhiteout carries the overlay marker user.overlay.whiteout, which troupe's mounts never make: troupe takes only what came through its mount into a change",
    ];
    assert_eq!(made.refused, expected);
}

#[tokio::test]
async fn only_twenty_refusals_are_named() {
    let repo = Repo::new(false).await;
    let (upper, _) = repo.case("many");
    for n in 0..25 {
        let fifo = upper.join(format!("pipe-{n:02}"));
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("a FIFO");
    }
    let made = repo.tree_of(&upper, Markers::User, None).await;
    assert_eq!(made.refused.len(), 21);
    assert_eq!(made.refused.last().map(String::as_str), Some("and 5 more"));
}

#[tokio::test]
async fn a_real_overlay_upper_layer_makes_the_merged_tree() {
    let repo = Repo::new(false).await;
    let top = repo.dir.path();
    repo.case("lower");
    for dir in ["upper", "work", "merged", "out"] {
        mkdir(&top.join(dir));
    }
    let unshare = |script: &str| {
        Command::new("unshare")
            .args(["--user", "--map-root-user", "--mount", "sh", "-c", script])
            .current_dir(top)
            .output()
    };
    match unshare("true") {
        Ok(out) if out.status.success() => {}
        other => return skipped(&format!("no unprivileged user namespace here: {other:?}")),
    }
    // What a worker does in its checkout, through the mount, and the
    // merged view it leaves, copied out before the mount goes.
    let script = r#"
        set -eu
        mount -t overlay overlay -o lowerdir=lower.full,upperdir=upper,workdir=work,userxattr,redirect_dir=nofollow,metacopy=off,index=off,xino=off merged || exit 77
        cd merged
        echo new > src/new.rs
        echo more >> README
        rm src/lib.rs
        rm -r docs/old
        rm "docs/with space.md"
        mv src/main.rs src/moved.rs
        mkdir -p fresh/dir && echo f > fresh/dir/f
        rm -r tree && echo now a file > tree
        rm plain && mkdir plain && echo in > plain/in
        rm -r src/deep && mkdir src/deep && echo c > src/deep/c.rs
        chmod +x docs/guide.md
        ln -sfn README link
        mv bin bin2
        cd ..
        cp -a merged/. out/
        umount merged
        chmod -R u+rwx work
    "#;
    let ran = unshare(script).expect("unshare runs");
    match ran.status.code() {
        Some(0) => {}
        Some(77) => return skipped(&format!("no unprivileged overlay mount here: {ran:?}")),
        _ => panic!("the worker's operations through the overlay failed: {ran:?}"),
    }
    repo.check(&top.join("upper"), &top.join("out"), Markers::User)
        .await;
}
