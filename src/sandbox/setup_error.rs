//! Why one step of an agent's confinement failed. A system call keeps its
//! errno, so that a caller can tell what the kernel refuses (`EPERM`,
//! `EINVAL`, `ENOSYS`: a layer this machine does not give) from a
//! failure; a reason with no call behind it (a planted link, a path troupe
//! will not use) is said as it is.

use nix::errno::Errno;

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A system call failed with `errno`; `what` says what it was for
    /// (and on which path).
    #[error("{what}: {errno}")]
    Call { what: String, errno: Errno },
    /// A file troupe reads or writes for the sandbox.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A reason with no failed call behind it.
    #[error("{0}")]
    Refused(String),
}

impl SetupError {
    /// A failed call's error, said as `what` it was for.
    pub fn call(what: impl Into<String>) -> impl FnOnce(Errno) -> SetupError {
        let what = what.into();
        move |errno| SetupError::Call { what, errno }
    }

    /// A failed file operation's error, said as `what` it was for.
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SetupError {
        let what = what.into();
        move |source| SetupError::Io { what, source }
    }

    /// The kernel's refusal, when a call failed.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            SetupError::Call { errno, .. } => Some(*errno),
            SetupError::Io { source, .. } => source.raw_os_error().map(Errno::from_raw),
            SetupError::Refused(_) => None,
        }
    }
}

impl From<String> for SetupError {
    fn from(reason: String) -> Self {
        SetupError::Refused(reason)
    }
}
