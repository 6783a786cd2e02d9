//! One `git cat-file --batch` for the run, asked for the trees an edit
//! goes through: a tree is read in tens of microseconds over its pipe,
//! where a git process for it would take milliseconds to start. Git
//! still does the reading (packs, deltas, alternates, replaced objects),
//! confined as each of troupe's git calls is.

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::ObjectError;
use crate::run::isolation::git::Git;

/// The largest object troupe reads: far beyond a tree of any real
/// directory, and a bound on what a repository can make troupe hold.
const LARGEST: usize = 256 * 1024 * 1024;

/// One object as git gave it.
pub(super) struct Read {
    pub id: String,
    pub kind: String,
    pub body: Vec<u8>,
}

/// The reader, started when first asked, and started again after a call
/// that failed.
pub(super) struct Reader {
    git: Git,
    live: tokio::sync::Mutex<Option<Live>>,
}

struct Live {
    /// Killed when dropped.
    _child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Reader {
    pub(super) fn new(git: Git) -> Reader {
        Reader {
            git,
            live: tokio::sync::Mutex::new(None),
        }
    }

    /// The object `name` (an id, or `<id>^{tree}`) names.
    pub(super) async fn read(&self, name: &str) -> Result<Read, ObjectError> {
        if name.contains('\n') {
            return Err(unexpected(name, "a name holds no newline"));
        }
        let mut live = self.live.lock().await;
        if live.is_none() {
            let mut child = self
                .git
                .spawn_piped(&Default::default(), &["cat-file", "--batch"])?;
            let (Some(input), Some(output)) = (child.stdin.take(), child.stdout.take()) else {
                return Err(unexpected(name, "git cat-file has no pipes"));
            };
            *live = Some(Live {
                _child: child,
                input,
                output: BufReader::new(output),
            });
        }
        let Some(pipes) = live.as_mut() else {
            return Err(unexpected(name, "git cat-file is not running"));
        };
        let said = || format!("cat-file --batch ({name})");
        let read = self.git.bounded(said, exchange(pipes, name)).await;
        let read = match read {
            Ok(Ok(read)) => Ok(read),
            Ok(Err(e)) => Err(e),
            Err(e) => Err(ObjectError::Git(e)),
        };
        // A reader that failed once may be anywhere in its answer.
        if read
            .as_ref()
            .is_err_and(|e| !matches!(e, ObjectError::Missing { .. }))
        {
            *live = None;
        }
        read
    }
}

async fn exchange(pipes: &mut Live, name: &str) -> Result<Read, ObjectError> {
    let broken = |e: std::io::Error| unexpected(name, &format!("git cat-file: {e}"));
    pipes
        .input
        .write_all(format!("{name}\n").as_bytes())
        .await
        .map_err(broken)?;
    pipes.input.flush().await.map_err(broken)?;
    let mut header = String::new();
    pipes.output.read_line(&mut header).await.map_err(broken)?;
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
    pipes.output.read_exact(&mut body).await.map_err(broken)?;
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
