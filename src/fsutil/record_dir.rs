//! A directory of records held open (see `RecordDir`).

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use nix::unistd::{UnlinkatFlags, unlinkat};
use serde::Serialize;

use super::durability::Durability;
use super::nofollow;
use super::records::{TEMP_PREFIX, create_file_in, pretty_json, write_atomic_in};

/// A directory whose records are written through a descriptor held open,
/// names resolved beneath it without following a link. An agent holds its
/// `.subagent/` this way from before the directory is made read-only in
/// its mount namespace: writes through the descriptor go to the mount it
/// was opened on, which its commands, without the descriptor, cannot
/// reach.
#[derive(Debug)]
pub struct RecordDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl RecordDir {
    /// The directory `path`, reached without a link.
    pub fn open(path: &Path) -> io::Result<RecordDir> {
        Ok(RecordDir {
            fd: nofollow::open_dir(path)?,
            path: path.to_path_buf(),
        })
    }

    /// The open directory `fd`, which is `path`.
    pub fn from_fd(fd: OwnedFd, path: PathBuf) -> RecordDir {
        RecordDir { fd, path }
    }

    /// `name` in it, as a path through this process's descriptor of it:
    /// short whatever the directory's own path, and the directory this
    /// descriptor opened, for a Unix socket's address.
    pub fn through_descriptor(&self, name: &str) -> PathBuf {
        use std::os::fd::AsRawFd;
        PathBuf::from(format!("/proc/self/fd/{}/{name}", self.fd.as_raw_fd()))
    }

    /// Where it is, to name its files in messages and to read them.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces `name` with `bytes` in one rename.
    pub fn write_atomic(&self, name: &str, bytes: &[u8], durability: Durability) -> io::Result<()> {
        write_atomic_in(self.fd.as_fd(), OsStr::new(name), bytes, durability)
    }

    /// `value` as pretty JSON, written atomically.
    pub fn write_json_atomic<T: Serialize>(
        &self,
        name: &str,
        value: &T,
        durability: Durability,
    ) -> io::Result<()> {
        self.write_atomic(name, &pretty_json(value)?, durability)
    }

    /// A new, empty file `name`, replacing whatever was there.
    pub fn create_file(&self, name: &str) -> io::Result<File> {
        create_file_in(self.fd.as_fd(), OsStr::new(name))
    }

    /// `name` opened to append to, created if missing; a regular file
    /// with no other name.
    pub fn open_append(&self, name: &str) -> io::Result<File> {
        let fd = nofollow::open_beneath(
            self.fd.as_fd(),
            Path::new(name),
            OFlag::O_WRONLY | OFlag::O_APPEND | OFlag::O_CREAT,
            Mode::from_bits_truncate(0o644),
        )?;
        nofollow::sole_regular_file(fd.as_fd())?;
        Ok(File::from(fd))
    }

    /// Removes the file `name`; one already gone is fine.
    pub fn remove(&self, name: &str) -> io::Result<()> {
        match unlinkat(self.fd.as_fd(), name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes what writes cut short left: the temporary files of
    /// `write_atomic`, once no writer can be at work in the directory (its
    /// agent and everything it started are gone).
    pub fn remove_torn_writes(&self) -> io::Result<()> {
        let listing = nix::dir::Dir::openat(
            self.fd.as_fd(),
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        let torn: Vec<std::ffi::CString> = listing
            .into_iter()
            .flatten()
            .filter(|entry| {
                entry
                    .file_name()
                    .to_bytes()
                    .starts_with(TEMP_PREFIX.as_bytes())
            })
            .map(|entry| entry.file_name().to_owned())
            .collect();
        for name in torn {
            match unlinkat(self.fd.as_fd(), name.as_c_str(), UnlinkatFlags::NoRemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// The directory `name` in it, made if missing.
    pub fn subdir(&self, name: &str) -> io::Result<RecordDir> {
        let fd = nofollow::create_dirs_beneath(self.fd.as_fd(), Path::new(name))?;
        // The walk hands back a descriptor to name the directory with; one
        // that can make files in it is opened from there.
        let fd = nix::fcntl::openat(
            fd.as_fd(),
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        Ok(RecordDir {
            fd,
            path: self.path.join(name),
        })
    }
}
