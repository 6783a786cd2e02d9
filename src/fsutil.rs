//! Writing files so that a reader never sees half of one, and a crash
//! never loses the last complete copy.
//!
//! Every JSON state file troupe keeps (transcripts, task and result files,
//! run.json) goes through `write_atomic`: a temporary file in the same
//! directory, flushed to disk, renamed over the old one, and the directory
//! flushed too, so the rename itself survives a power cut.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use serde::Serialize;

/// Replaces `path` with `bytes` in one rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut temp = tempfile::Builder::new().prefix(".tmp-").tempfile_in(dir)?;
    temp.write_all(bytes)?;
    temp.as_file().sync_data()?;
    temp.persist(path).map_err(|e| e.error)?;
    File::open(dir)?.sync_all()
}

/// `value` as pretty JSON with a final newline, written atomically.
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value)?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

/// Every file under an agent's directory but its `.subagent/` (and the
/// `.subagent-<time>/` of earlier runs), as paths relative to the
/// workspace, sorted: what the agent left as deliverables.
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
        .map(|e| crate::protocol::display_in(workspace, e.path()))
        .collect();
    files.sort();
    files
}
