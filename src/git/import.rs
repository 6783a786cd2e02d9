//! Commits written by one `git fast-import` each call: an attempt's
//! change on its base, or a chain of landings that need no merge. git
//! reads the base's trees along the changed paths and writes the new
//! ones; no index is read or written (a repository's is most of a
//! megabyte per 10,000 files) and no reference is moved: the stream names
//! a branch only because a commit must have one, and resets it to nothing
//! before it ends.
//!
//! Every file's bytes go into the stream from troupe, never by path: each
//! is read from a descriptor opened without following a link and checked
//! to be a regular file, so a link or a FIFO swapped in is never read,
//! and one whose size changes while it is read is refused rather than
//! half-taken. The stream is written to an unnamed temporary file first,
//! so a change of any size costs troupe no memory beyond a buffer.

use std::io::{Read, Seek, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use super::{Git, GitError, Place};

/// The branch the stream's commits are made on, which it never writes.
const SCRATCH: &str = "refs/troupe/import";

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("cannot read {path} into a change: {source}", path = .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write git fast-import's input into a temporary file: {0}")]
    Stream(std::io::Error),
    #[error("git fast-import answered {answered} of {asked} commits: {said}")]
    Unanswered {
        asked: usize,
        answered: usize,
        said: String,
    },
}

/// One commit of a stream.
pub struct Commit {
    /// Its second parent: the change a landing merges.
    pub merge: Option<String>,
    pub message: String,
    /// Paths removed (and all under them), before any is set: no blob
    /// meets a path it replaces.
    pub removed: Vec<Vec<u8>>,
    pub set: Vec<Entry>,
}

/// A path a commit sets.
pub struct Entry {
    pub path: Vec<u8>,
    /// `100644`, `100755` or `120000`.
    pub mode: String,
    pub data: Data,
}

pub enum Data {
    /// An object the repository has.
    Id(String),
    /// Bytes troupe holds: a link's target.
    Bytes(Vec<u8>),
    /// A regular file, read by troupe as the stream is written.
    File(PathBuf),
}

/// Writes `commits` into `git`'s repository, the first on `base` and
/// each later one on the one before; each one's id and its tree's.
pub async fn import(
    git: &Git,
    base: &str,
    commits: Vec<Commit>,
) -> Result<Vec<(String, String)>, ImportError> {
    let asked = commits.len();
    let base = base.to_string();
    let stream = tokio::task::spawn_blocking(move || stream(&base, &commits))
        .await
        .map_err(|e| ImportError::Stream(std::io::Error::other(e)))??;
    // Loose however many there are, as `prune` removes an unlanded
    // attempt's objects only when loose.
    let args = [
        "-c",
        "fastimport.unpackLimit=2147483647",
        "fast-import",
        "--quiet",
    ];
    let out = git.run_fed(&Place::default(), &args, stream).await?;
    let text = String::from_utf8_lossy(&out);
    let made = answers(&text);
    match made.len() == asked {
        true => Ok(made),
        false => Err(ImportError::Unanswered {
            asked,
            answered: made.len(),
            said: crate::text::excerpt(text.trim(), 600),
        }),
    }
}

/// `commit` written on `base`: its id and its tree's.
pub async fn commit(
    git: &Git,
    base: &str,
    commit: Commit,
) -> Result<(String, String), ImportError> {
    let mut made = import(git, base, vec![commit]).await?;
    made.pop().ok_or(ImportError::Unanswered {
        asked: 1,
        answered: 0,
        said: String::new(),
    })
}

/// The stream, in an unnamed temporary file rewound to its start.
/// Blocking.
fn stream(base: &str, commits: &[Commit]) -> Result<std::fs::File, ImportError> {
    let file = tempfile::tempfile().map_err(ImportError::Stream)?;
    let mut out = std::io::BufWriter::new(file);
    let now = chrono::Utc::now().timestamp();
    let w = |e: std::io::Error| ImportError::Stream(e);
    out.write_all(b"feature done\n").map_err(w)?;
    for (at, commit) in commits.iter().enumerate() {
        let mut head = format!("commit {SCRATCH}\nmark :{}\n", at + 1);
        head.push_str(&format!(
            "committer troupe <troupe@localhost> {now} +0000\n"
        ));
        out.write_all(head.as_bytes()).map_err(w)?;
        data(commit.message.as_bytes(), &mut out).map_err(w)?;
        let from = match at {
            0 => format!("from {base}\n"),
            _ => format!("from :{at}\n"),
        };
        out.write_all(from.as_bytes()).map_err(w)?;
        if let Some(merged) = &commit.merge {
            out.write_all(format!("merge {merged}\n").as_bytes())
                .map_err(w)?;
        }
        for path in &commit.removed {
            out.write_all(&[b"D ", quoted(path).as_slice(), b"\n"].concat())
                .map_err(w)?;
        }
        for entry in &commit.set {
            let id = match &entry.data {
                Data::Id(id) => id.as_str(),
                Data::Bytes(_) | Data::File(_) => "inline",
            };
            let line = format!("M {} {id} ", entry.mode);
            out.write_all(&[line.as_bytes(), &quoted(&entry.path), b"\n"].concat())
                .map_err(w)?;
            match &entry.data {
                Data::Id(_) => {}
                Data::Bytes(bytes) => data(bytes, &mut out).map_err(w)?,
                Data::File(path) => file_data(path, &mut out)?,
            }
        }
        out.write_all(b"\n").map_err(w)?;
    }
    for mark in 1..=commits.len() {
        out.write_all(format!("get-mark :{mark}\nls :{mark} \"\"\n").as_bytes())
            .map_err(w)?;
    }
    out.write_all(format!("reset {SCRATCH}\ndone\n").as_bytes())
        .map_err(w)?;
    let mut file = out.into_inner().map_err(|e| w(e.into_error()))?;
    file.rewind().map_err(w)?;
    Ok(file)
}

/// A `data` command holding `bytes`, counted.
fn data(bytes: &[u8], out: &mut impl Write) -> std::io::Result<()> {
    out.write_all(format!("data {}\n", bytes.len()).as_bytes())?;
    out.write_all(bytes)?;
    out.write_all(b"\n")
}

/// A `data` command holding the regular file at `path`, which must hold
/// as many bytes when read as when it was opened.
fn file_data(path: &Path, out: &mut impl Write) -> Result<(), ImportError> {
    let read = |source| ImportError::Read {
        path: path.to_path_buf(),
        source,
    };
    let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK;
    let fd = crate::fsutil::nofollow::open(path, flags, Mode::empty()).map_err(read)?;
    let stat = crate::fsutil::nofollow::regular_file(fd.as_fd()).map_err(read)?;
    let size = u64::try_from(stat.st_size).unwrap_or_default();
    out.write_all(format!("data {size}\n").as_bytes())
        .map_err(ImportError::Stream)?;
    let mut file = std::fs::File::from(fd).take(size + 1);
    let copied = std::io::copy(&mut file, out).map_err(read)?;
    if copied != size {
        return Err(read(std::io::Error::other(format!(
            "it was {size} bytes when opened and {copied} when read: it changed while troupe read it"
        ))));
    }
    out.write_all(b"\n").map_err(ImportError::Stream)
}

/// `path` C-quoted, as fast-import reads a path that starts with a
/// quote: a name may hold a newline or a quote.
fn quoted(path: &[u8]) -> Vec<u8> {
    let mut out = vec![b'"'];
    for &byte in path {
        match byte {
            b'"' | b'\\' => out.extend([b'\\', byte]),
            0..0x20 | 0x7f => out.extend(format!("\\{byte:03o}").as_bytes()),
            _ => out.push(byte),
        }
    }
    out.push(b'"');
    out
}

/// Pairs of a commit (`get-mark`) and its root tree (`ls`, `040000 tree
/// <id>\t`), every id checked to be one.
fn answers(text: &str) -> Vec<(String, String)> {
    let hex = |id: &str| id.len() >= 40 && id.bytes().all(|b| b.is_ascii_hexdigit());
    let mut lines = text.lines();
    let mut made = Vec::new();
    while let (Some(commit), Some(listed)) = (lines.next(), lines.next()) {
        let commit = commit.trim();
        let tree = listed.split_whitespace().nth(2).unwrap_or_default();
        if !hex(commit) || !hex(tree) {
            break;
        }
        made.push((commit.to_string(), tree.to_string()));
    }
    made
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@localhost")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@localhost")
            .output()
            .expect("git runs");
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn repository() -> (tempfile::TempDir, Git) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        git(dir.path(), &["init", "-q"]);
        std::fs::write(dir.path().join("a.txt"), "a\n").expect("a file");
        git(dir.path(), &["add", "-A"]);
        git(dir.path(), &["commit", "-q", "-m", "one"]);
        let repo = Git::new(dir.path().join(".git"));
        (dir, repo)
    }

    fn set(path: &str, data: Data) -> Entry {
        Entry {
            path: path.as_bytes().to_vec(),
            mode: "100644".to_string(),
            data,
        }
    }

    fn commit(merge: Option<&str>, set: Vec<Entry>) -> Commit {
        Commit {
            merge: merge.map(str::to_string),
            message: "m".to_string(),
            removed: Vec::new(),
            set,
        }
    }

    #[tokio::test]
    async fn a_chain_of_merges_is_one_on_the_other_and_git_reads_it_whole() {
        let (dir, repo) = repository();
        let head = git(dir.path(), &["rev-parse", "HEAD"]);
        let blob = git(dir.path(), &["hash-object", "-w", "a.txt"]);
        let file = dir.path().join("b.txt");
        std::fs::write(&file, "b\n").expect("a file");
        let commits = vec![
            commit(None, vec![set("d/b.txt", Data::File(file))]),
            commit(Some(&head), vec![set("c.txt", Data::Id(blob))]),
        ];
        let made = import(&repo, &head, commits).await.expect("imported");
        assert_eq!(made.len(), 2);
        let (second, tree) = &made[1];
        assert_eq!(
            &git(dir.path(), &["rev-parse", &format!("{second}^{{tree}}")]),
            tree
        );
        assert_eq!(
            git(dir.path(), &["rev-parse", &format!("{second}^1")]),
            made[0].0
        );
        assert_eq!(
            git(dir.path(), &["rev-parse", &format!("{second}^2")]),
            head
        );
        let listed = git(dir.path(), &["ls-tree", "-r", "--name-only", second]);
        assert_eq!(listed, "a.txt\nc.txt\nd/b.txt");
        assert_eq!(
            git(dir.path(), &["show", &format!("{second}:d/b.txt")]),
            "b"
        );
        // No reference is left behind.
        assert_eq!(git(dir.path(), &["for-each-ref", "refs/troupe"]), "");
        git(dir.path(), &["fsck", "--strict", "--no-dangling"]);
    }

    #[tokio::test]
    async fn a_link_or_a_file_whose_size_is_not_what_it_holds_is_not_read() {
        let (dir, repo) = repository();
        let head = git(dir.path(), &["rev-parse", "HEAD"]);
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("a.txt", &link).expect("a link");
        // A regular file that says it holds 0 bytes and holds more, as
        // one that grew while it was read.
        let grown = PathBuf::from("/proc/self/status");
        for path in [link, grown] {
            let one = commit(None, vec![set("x", Data::File(path.clone()))]);
            match super::commit(&repo, &head, one).await {
                Err(ImportError::Read { path: named, .. }) => assert_eq!(named, path),
                other => panic!("{} was read: {other:?}", path.display()),
            }
        }
    }
}
