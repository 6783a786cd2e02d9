//! `--launcher`: a command prefix that places each child elsewhere (`srun
//! --ntasks=1 --`, `ssh node --`, `kubectl exec -i pod --`).
//!
//! The prefix is split into words the way a shell would split them, quotes
//! and backslashes included, but it is never run through a shell: `$HOME`
//! or `;` in it reach the launcher as they are. Each word may hold the
//! placeholders `{run_id}`, `{step_id}`, `{agent_id}`, `{role}` and
//! `{attempt}`; the child's own command line is appended after the last.

use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launcher {
    text: String,
    words: Vec<String>,
}

/// What the placeholders of one child stand for.
#[derive(Debug, Clone)]
pub struct LaunchVars {
    pub run_id: String,
    pub step_id: String,
    pub agent_id: String,
    pub role: String,
    pub attempt: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum LauncherError {
    #[error("--launcher `{0}` has an unclosed quote or a trailing backslash")]
    Unbalanced(String),
    #[error(
        "--launcher is empty; give the command that places a child, e.g. \"srun --ntasks=1 --quiet --unbuffered --\""
    )]
    Empty,
}

impl Launcher {
    pub fn parse(text: &str) -> Result<Self, LauncherError> {
        let words =
            shlex::split(text).ok_or_else(|| LauncherError::Unbalanced(text.to_string()))?;
        if words.is_empty() {
            return Err(LauncherError::Empty);
        }
        Ok(Launcher {
            text: text.trim().to_string(),
            words,
        })
    }

    /// The launcher as the user wrote it, for messages.
    pub fn display(&self) -> String {
        self.text.clone()
    }

    /// The words with the placeholders filled in.
    pub fn expand(&self, vars: &LaunchVars) -> Vec<String> {
        let attempt = vars.attempt.to_string();
        let values = [
            ("run_id", vars.run_id.as_str()),
            ("step_id", vars.step_id.as_str()),
            ("agent_id", vars.agent_id.as_str()),
            ("role", vars.role.as_str()),
            ("attempt", attempt.as_str()),
        ];
        self.words
            .iter()
            .map(|word| crate::text::fill(word, &values))
            .collect()
    }
}

/// A warning when `dir` is on a file system that other machines cannot
/// see, where a launcher would place children that cannot find their task
/// files.
pub fn local_only_warning(dir: &Path) -> Option<String> {
    use nix::sys::statfs::{TMPFS_MAGIC, statfs};
    if statfs(dir).ok()?.filesystem_type() != TMPFS_MAGIC {
        return None;
    }
    let name = "tmpfs";
    Some(format!(
        "the results directory {} is on {name}, which other nodes cannot see: agents the launcher places elsewhere will not find their task files; use a directory on a shared file system",
        dir.display()
    ))
}
