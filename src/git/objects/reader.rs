//! One `git cat-file --batch` for the run, asked for the trees an edit
//! goes through: a tree is read in tens of microseconds over its pipe,
//! where a git process for it would take milliseconds to start. Git
//! still does the reading (packs, deltas, alternates, replaced objects),
//! confined as each of troupe's git calls is.
//!
//! It is asked from the blocking thread that does the rest of a change's
//! work, so a change makes one trip off the run's thread and back rather
//! than one for each tree: with twenty agents ending at once on two
//! cores, each trip back waits its turn for the CPU.

use std::io::{BufRead, Read as _, Write};

use super::ObjectError;
use crate::git::piped::{Piped, Pipes};
use crate::git::{Git, Place};

/// The largest object troupe reads: far beyond a tree of any real
/// directory, and a bound on what a repository can make troupe hold.
const LARGEST: usize = 256 * 1024 * 1024;

/// One object as git gave it.
pub(super) struct Read {
    pub id: String,
    pub kind: String,
    pub body: Vec<u8>,
}

/// The reader, started before a change's work needs it, and started
/// again after one that failed.
pub(super) struct Reader {
    git: Git,
    piped: Piped,
}

impl Reader {
    pub(super) fn new(git: Git) -> Reader {
        Reader {
            git,
            piped: Piped::default(),
        }
    }

    /// Starts the reader unless it runs. On the run's thread.
    pub(super) fn start(&self) -> Result<(), ObjectError> {
        let args = ["cat-file", "--batch"];
        Ok(self.piped.start(&self.git, &Place::default(), &args)?)
    }

    /// Ends a reader that does not answer; the read waiting on it fails.
    pub(super) fn kill(&self) {
        self.piped.kill();
    }

    /// The object `name` (an id, or `<id>^{tree}`) names. Blocking.
    pub(super) fn read(&self, name: &str) -> Result<Read, ObjectError> {
        if name.contains('\n') {
            return Err(unexpected(name, "a name holds no newline"));
        }
        let missing = |e: &ObjectError| matches!(e, ObjectError::Missing { .. });
        self.piped
            .ask(|pipes| exchange(pipes, name), missing)
            .unwrap_or_else(|| Err(unexpected(name, "git cat-file is not running")))
    }
}

fn exchange(pipes: &mut Pipes, name: &str) -> Result<Read, ObjectError> {
    let broken = |e: std::io::Error| unexpected(name, &format!("git cat-file: {e}"));
    pipes
        .input
        .write_all(format!("{name}\n").as_bytes())
        .map_err(broken)?;
    let mut header = String::new();
    pipes.output.read_line(&mut header).map_err(broken)?;
    let fields: Vec<&str> = header.split_whitespace().collect();
    let (id, kind, size) = match fields.as_slice() {
        [id, kind, size] => (*id, *kind, *size),
        [_, "missing" | "ambiguous"] => {
            return Err(ObjectError::Missing {
                name: name.to_string(),
            });
        }
        _ => {
            return Err(unexpected(
                name,
                &format!("git cat-file answered {header:?}"),
            ));
        }
    };
    let size: usize = size
        .parse()
        .map_err(|_| unexpected(name, &format!("git cat-file answered {header:?}")))?;
    if size > LARGEST {
        return Err(unexpected(
            name,
            &format!("it is {size} bytes, over troupe's {LARGEST}"),
        ));
    }
    let mut body = vec![0; size + 1];
    pipes.output.read_exact(&mut body).map_err(broken)?;
    if body.pop() != Some(b'\n') {
        return Err(unexpected(
            name,
            "git cat-file's answer did not end in a newline",
        ));
    }
    Ok(Read {
        id: id.to_string(),
        kind: kind.to_string(),
        body,
    })
}

fn unexpected(name: &str, why: &str) -> ObjectError {
    ObjectError::Unexpected {
        name: name.to_string(),
        why: why.to_string(),
    }
}
