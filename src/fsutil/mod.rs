//! troupe's own files: records written atomically and read with a bound
//! (`records`), paths opened without following links (`nofollow`),
//! because the workspace they live in is also the agents' to write, and
//! directories held by the process at work in them (`dir_lock`).

pub mod dir_lock;
mod durability;
mod latest;
pub mod nofollow;
mod pace;
mod record_dir;
mod records;

pub use durability::{Durability, set_mode};
pub use latest::LatestWriter;
pub use pace::{Keeper, Taken, keep_latest};

pub use record_dir::RecordDir;
pub use records::{
    RecordError, create_file, is_regular, open_append, read_bounded, read_head, read_json,
    read_record, read_tail, write_atomic, write_json_atomic,
};

use std::path::{Component, Path, PathBuf};

/// Opens every directory under `dir` to its owner, who may then remove
/// them: the kernel makes an overlay's work directories with mode 0,
/// which an ordinary user cannot list, and so cannot empty. Links are
/// not followed.
pub fn open_up_dirs(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            let path = entry.path();
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700));
            open_up_dirs(&path);
        }
    }
}

/// Removes `dir` and all under it, through no link; nothing there is
/// nothing to do.
pub fn remove_dir_if_there(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// `path` with `.` and `..` removed without touching the file system.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Prefix(p) => out.push(p.as_os_str()),
            Component::RootDir => out.push(Component::RootDir.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
        }
    }
    out
}

/// The files under an agent's directory but its `.subagent/` (and the
/// `.subagent-<time>/` of earlier runs), as paths relative to the
/// workspace, sorted: what the agent left as deliverables. At most
/// `protocol::LISTED_FILES` of them, the first the walk finds: an agent
/// that made a million files must not make troupe hold a million names.
pub fn deliverable_files(workspace: &Path, agent_dir: &Path) -> Vec<String> {
    let mut files: Vec<String> = walkdir::WalkDir::new(agent_dir)
        .into_iter()
        .filter_entry(|e| {
            let ours = e
                .file_name()
                .to_string_lossy()
                .starts_with(crate::protocol::SUBAGENT_DIR);
            !(e.depth() == 1 && ours)
        })
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .take(crate::protocol::LISTED_FILES)
        .map(|e| crate::protocol::display_in(workspace, e.path()))
        .collect();
    files.sort();
    files
}
