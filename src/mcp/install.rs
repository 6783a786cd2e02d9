//! Where a stdio server is installed, as far as its command line tells:
//! the program (found on PATH), the interpreter its `#!` line names, each
//! argument that is an absolute path, and the prefix each lies in (the
//! directory above its `bin/`, `lib/` or outermost `node_modules/`). The
//! user configured the server, so the agents that start it may read these
//! wherever they are (a venv, `~/.cache`, `~/.local`, `~/.npm`), which the
//! default read scope and the masked home directories would close.

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::protocol::{McpServer, Transport};

/// The paths `server` reads to start; none for a server troupe reaches.
/// Paths that do not exist are left out.
pub fn read_paths(server: &McpServer) -> Vec<PathBuf> {
    let Transport::Stdio { command, args } = &server.transport else {
        return Vec::new();
    };
    let mut paths = Vec::new();
    if let Some(program) = on_path(command) {
        paths.extend(installed(&program));
        if let Some(interpreter) = interpreter(&program) {
            paths.extend(installed(&interpreter));
        }
    }
    for arg in args.iter().map(Path::new).filter(|p| p.is_absolute()) {
        paths.extend(installed(arg));
    }
    paths.sort();
    paths.dedup();
    paths
}

/// `command` as the agent would find it: a path as it is, a bare name on
/// PATH.
fn on_path(command: &str) -> Option<PathBuf> {
    let command = Path::new(command);
    if command.components().count() > 1 {
        return command.is_absolute().then(|| command.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(command))
        .find(|candidate| candidate.is_file())
}

/// What to read for the file (or directory) at `path`, as named and as
/// its links resolve: its prefix, or, with none, the path and the
/// directory it is in; never a home directory or `/` (a server given `/`
/// to serve is given no more to read).
fn installed(path: &Path) -> Vec<PathBuf> {
    let Ok(real) = path.canonicalize() else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for named in [path.to_path_buf(), real] {
        if too_wide(&named) {
            continue;
        }
        match prefix(&named) {
            Some(prefix) => found.push(prefix),
            None => {
                found.push(named.clone());
                found.extend(
                    named
                        .parent()
                        .filter(|dir| !too_wide(dir))
                        .map(Path::to_path_buf),
                );
            }
        }
    }
    found
}

/// The directory above the outermost `node_modules` on the way to `path`
/// (a package needs its siblings), else above the nearest `bin`, `sbin`,
/// `lib`, `lib64` or `libexec`; never a home directory or `/`.
fn prefix(path: &Path) -> Option<PathBuf> {
    let named = |names: &[&str], dir: &Path| {
        dir.file_name()
            .and_then(OsStr::to_str)
            .is_some_and(|name| names.contains(&name))
    };
    let dirs = path.ancestors().skip(1);
    let modules = dirs
        .clone()
        .filter(|dir| named(&["node_modules"], dir))
        .last();
    let found = modules.or_else(|| {
        dirs.clone()
            .find(|dir| named(&["bin", "sbin", "lib", "lib64", "libexec"], dir))
    })?;
    found
        .parent()
        .filter(|dir| !too_wide(dir))
        .map(Path::to_path_buf)
}

/// A directory too wide to open for one server: `/`, or a home directory
/// (`/root`, `/home/NAME`, `$HOME`).
fn too_wide(dir: &Path) -> bool {
    dir.parent().is_none()
        || dir == Path::new("/root")
        || dir == Path::new("/home")
        || dir.parent() == Some(Path::new("/home"))
        || std::env::var_os("HOME").is_some_and(|home| dir == Path::new(&home))
}

/// The interpreter a script's `#!` line names, found on PATH through
/// `env` as the kernel and `env` would.
fn interpreter(program: &Path) -> Option<PathBuf> {
    let mut head = [0u8; 256];
    let read = std::fs::File::open(program)
        .and_then(|mut file| file.read(&mut head))
        .ok()?;
    let line = head[..read].strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    let first = Path::new(words.next()?);
    if first.file_name() != Some(OsStr::new("env")) {
        return Some(first.to_path_buf());
    }
    let name = words.find(|word| !word.starts_with('-') && !word.contains('='))?;
    on_path(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_is_above_bin_or_the_outermost_node_modules() {
        assert_eq!(
            prefix(Path::new("/opt/venv/bin/python3")),
            Some(PathBuf::from("/opt/venv"))
        );
        assert_eq!(
            prefix(Path::new(
                "/srv/mcp/node_modules/@scope/server/node_modules/dep/index.js"
            )),
            Some(PathBuf::from("/srv/mcp"))
        );
        assert_eq!(
            prefix(Path::new("/srv/py/lib/python3.11/site-packages/x.py")),
            Some(PathBuf::from("/srv/py"))
        );
        assert_eq!(prefix(Path::new("/srv/tools/server.py")), None);
    }

    #[test]
    fn a_home_directory_or_the_root_is_never_a_prefix() {
        assert_eq!(prefix(Path::new("/root/bin/server")), None);
        assert_eq!(prefix(Path::new("/home/ann/bin/server")), None);
        assert_eq!(prefix(Path::new("/bin/server")), None);
        assert_eq!(
            prefix(Path::new("/home/ann/.local/bin/server")),
            Some(PathBuf::from("/home/ann/.local"))
        );
    }
}
