//! The objects of a run's changes and landings, written by troupe itself
//! instead of by a git process for each: an attempt's blobs, the trees
//! along its paths and its commit, and the merge commits of landings that
//! need no merge. Each of those was a `git fast-import` and the
//! `unpack-objects` it starts, some fifteen milliseconds alone and many
//! times that when twenty attempts end together on two cores; hashing a
//! small file and writing it takes microseconds. Trees are read through
//! one long-lived `git cat-file --batch` ([`reader`]), so git still reads
//! what only git knows how to (packs, deltas, alternates), and every
//! merge that needs a merge is still git's (`merge-tree`).

mod loose;
mod reader;
pub mod tree;

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use crate::fsutil::{Durability, nofollow};
use crate::git::{Git, GitError, Place};

/// How many trees are kept once read, before the cache starts again:
/// a run edits along a few paths of a few heads.
const TREES_KEPT: usize = 16 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("cannot write a git object into {dir}: {source}", dir = .dir.display())]
    Write {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("the repository has no object {name}")]
    Missing { name: String },
    #[error("git's object {name} is not what troupe expected: {why}")]
    Unexpected { name: String, why: String },
}

/// The hash a repository names its objects by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Sha1,
    Sha256,
}

impl Format {
    /// The length of an id in a tree entry.
    fn raw_len(self) -> usize {
        match self {
            Format::Sha1 => 20,
            Format::Sha256 => 32,
        }
    }
}

/// A repository's objects, as troupe reads and writes them.
pub struct Objects {
    format: Format,
    /// The objects directory, opened without following a link: a link
    /// planted there would send troupe's writes elsewhere.
    dir: OwnedFd,
    dir_path: PathBuf,
    reader: reader::Reader,
    /// Held while the reader is asked, so that of the attempts that ask
    /// for the same tree at once (twenty made from one head) only the
    /// first waits for git: the others find it kept.
    asking: Mutex<()>,
    trees: Mutex<HashMap<String, Arc<Vec<tree::Entry>>>>,
    /// Commits' trees, as `tree_of` found them.
    commits: Mutex<HashMap<String, String>>,
}

impl Objects {
    /// The objects of `git`'s repository: its common directory's
    /// `objects`, which must be a directory there, not a link.
    pub async fn open(git: Git) -> Result<Objects, ObjectError> {
        let asked = [
            "rev-parse",
            "--path-format=absolute",
            "--git-common-dir",
            "--show-object-format",
        ];
        let said = git.run(&Place::default(), asked).await?;
        let mut lines = said.lines();
        let common = PathBuf::from(lines.next().unwrap_or_default());
        let format = match lines.next().unwrap_or_default().trim() {
            "sha1" => Format::Sha1,
            "sha256" => Format::Sha256,
            other => {
                return Err(ObjectError::Unexpected {
                    name: common.display().to_string(),
                    why: format!("its object format is {other:?}"),
                });
            }
        };
        let dir_path = common.join("objects");
        let opened = std::fs::canonicalize(&common).and_then(|common| {
            let common = nofollow::open_dir(&common)?;
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY;
            nofollow::open_beneath(common.as_fd(), Path::new("objects"), flags, Mode::empty())
        });
        let dir = opened.map_err(|source| ObjectError::Write {
            dir: dir_path.clone(),
            source,
        })?;
        Ok(Objects {
            format,
            dir,
            dir_path,
            reader: reader::Reader::new(git),
            asking: Mutex::new(()),
            trees: Mutex::new(HashMap::new()),
            commits: Mutex::new(HashMap::new()),
        })
    }

    /// Starts the reader the blocking work below asks; on the run's
    /// thread.
    pub fn start(&self) -> Result<(), ObjectError> {
        self.reader.start()
    }

    /// Ends a reader that does not answer (a change's work past its
    /// bound): what waits on it fails.
    pub fn kill(&self) {
        self.reader.kill();
    }

    /// The entries of the tree `id`. Blocking.
    pub fn tree(&self, id: &str) -> Result<Arc<Vec<tree::Entry>>, ObjectError> {
        if let Some(known) = self.known(id) {
            return Ok(known);
        }
        let _asking = self.asking.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = self.known(id) {
            return Ok(known);
        }
        let read = self.reader.read(id)?;
        self.keep(read)
    }

    /// The id of `commit`'s tree, its entries kept for the edit that
    /// follows; remembered for a commit named by its id (a name such as
    /// `HEAD` may name another commit next time). Blocking.
    pub fn tree_of(&self, commit: &str) -> Result<String, ObjectError> {
        let found = || {
            let commits = self.commits.lock().unwrap_or_else(|e| e.into_inner());
            commits.get(commit).cloned()
        };
        if let Some(tree) = found() {
            return Ok(tree);
        }
        let _asking = self.asking.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tree) = found() {
            return Ok(tree);
        }
        let read = self.reader.read(&format!("{commit}^{{tree}}"))?;
        let id = read.id.clone();
        self.keep(read)?;
        let named_by_id = commit.len() == 2 * self.format.raw_len()
            && commit.bytes().all(|b| b.is_ascii_hexdigit());
        if named_by_id {
            let mut commits = self.commits.lock().unwrap_or_else(|e| e.into_inner());
            if commits.len() >= TREES_KEPT {
                commits.clear();
            }
            commits.insert(commit.to_string(), id.clone());
        }
        Ok(id)
    }

    fn known(&self, id: &str) -> Option<Arc<Vec<tree::Entry>>> {
        self.trees
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
    }

    fn keep(&self, read: reader::Read) -> Result<Arc<Vec<tree::Entry>>, ObjectError> {
        let unexpected = |why: String| ObjectError::Unexpected {
            name: read.id.clone(),
            why,
        };
        if read.kind != "tree" {
            return Err(unexpected(format!("it is a {}, not a tree", read.kind)));
        }
        let entries = Arc::new(tree::parse(&read.body, self.format).map_err(unexpected)?);
        let mut trees = self.trees.lock().unwrap_or_else(|e| e.into_inner());
        if trees.len() >= TREES_KEPT {
            trees.clear();
        }
        trees.insert(read.id.clone(), Arc::clone(&entries));
        Ok(entries)
    }

    /// Writes `body` as an object of `kind` (unless it is there already);
    /// its id. Blocking: file work, for `spawn_blocking`.
    pub fn write_bytes(&self, kind: &str, body: &[u8]) -> Result<String, ObjectError> {
        let id = loose::id_of(self.format, kind, body);
        if loose::has(self.dir.as_fd(), &id) {
            return Ok(id);
        }
        let size = body.len() as u64;
        let mut read = body;
        loose::write(
            self.dir.as_fd(),
            self.format,
            kind,
            size,
            &mut read,
            flushes(),
        )
        .map_err(|source| self.failed(source))
    }

    /// Writes the `size` bytes of the open regular file `file` as a blob;
    /// its id. Blocking, as `write_bytes`.
    pub fn write_file(&self, file: std::fs::File, size: u64) -> Result<String, ObjectError> {
        let mut read = std::io::Read::take(file, size + 1);
        loose::write(
            self.dir.as_fd(),
            self.format,
            "blob",
            size,
            &mut read,
            flushes(),
        )
        .map_err(|source| self.failed(source))
    }

    /// A commit of `tree` on `parents`, troupe's, made now; its id.
    /// Blocking, as `write_bytes`.
    pub fn write_commit(
        &self,
        tree: &str,
        parents: &[&str],
        message: &str,
    ) -> Result<String, ObjectError> {
        let now = chrono::Utc::now().timestamp();
        let mut body = format!("tree {tree}\n");
        for parent in parents {
            body.push_str(&format!("parent {parent}\n"));
        }
        let who = format!("troupe <troupe@localhost> {now} +0000");
        body.push_str(&format!("author {who}\ncommitter {who}\n\n{message}\n"));
        self.write_bytes("commit", body.as_bytes())
    }

    fn failed(&self, source: std::io::Error) -> ObjectError {
        ObjectError::Write {
            dir: self.dir_path.clone(),
            source,
        }
    }
}

/// Whether objects are flushed as they are written (`--durability
/// strict`, as git's `core.fsync=committed` does for troupe's calls);
/// otherwise a landing flushes them with the rest before the branch
/// moves.
fn flushes() -> bool {
    Durability::Atomic.flushes()
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    text
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(text.get(at..at + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    fn git(dir: &Path, args: &[&str], input: Option<&[u8]>) -> String {
        use std::io::Write as _;
        let mut child = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@localhost")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@localhost")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("git runs");
        if let (Some(mut stdin), Some(input)) = (child.stdin.take(), input) {
            stdin.write_all(input).expect("git reads");
        }
        let out = child.wait_with_output().expect("git ends");
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn repository() -> (tempfile::TempDir, Git) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        git(dir.path(), &["init", "-q"], None);
        std::fs::write(dir.path().join("a.txt"), "a\n").expect("a file");
        git(dir.path(), &["add", "-A"], None);
        git(dir.path(), &["commit", "-q", "-m", "one"], None);
        let repo = Git::new(dir.path().join(".git"));
        (dir, repo)
    }

    #[tokio::test]
    async fn what_troupe_writes_git_reads_as_the_same_object() {
        let (dir, repo) = repository();
        let objects = Objects::open(repo).await.expect("the objects");
        let body = b"some bytes\n\0and a NUL\n";
        let written = objects.write_bytes("blob", body).expect("written");
        let hashed = git(dir.path(), &["hash-object", "--stdin"], Some(body));
        assert_eq!(written, hashed);
        let read = git(dir.path(), &["cat-file", "blob", &written], None);
        assert_eq!(read.as_bytes(), b"some bytes\n\0and a NUL");
        git(dir.path(), &["fsck", "--strict", "--no-dangling"], None);
    }

    #[tokio::test]
    async fn a_killed_reader_fails_what_waits_on_it_and_starts_again() {
        let (_dir, repo) = repository();
        let objects = Objects::open(repo).await.expect("the objects");
        objects.start().expect("started");
        let tree = objects.tree_of("HEAD").expect("HEAD's tree");
        objects.kill();
        // Nothing kept answers for it: the killed reader must.
        assert!(objects.reader.read(&tree).is_err());
        objects.start().expect("started again");
        assert_eq!(objects.tree(&tree).expect("read").len(), 1);
    }
}
