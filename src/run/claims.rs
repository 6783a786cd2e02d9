//! What the parent checks of a worker's claims before the review: a
//! fabricated success is caught even when the model is fooled, because the
//! parent looks at the disk and at the tool calls it relayed, not at what
//! the worker says.

use std::path::Path;

use crate::record::Claims;

/// What a worker claims: success or not, the files it lists, and how
/// many calls it made that changed something.
pub struct Claimed<'a> {
    pub success: bool,
    pub files: &'a [String],
    pub changing_calls: u32,
}

/// Whether a listed file is in `workspace` on the disk; it counts as there
/// only inside the workspace, whatever the worker wrote as its path.
pub fn on_disk(workspace: &Path) -> impl Fn(&str) -> bool + '_ {
    move |file| {
        let path = crate::fsutil::normalize(&workspace.join(file));
        path.starts_with(workspace) && path.symlink_metadata().is_ok()
    }
}

/// The claims against what the attempt holds (`present`), and against
/// its diff when there is one (`changed`).
pub fn check(
    present: &dyn Fn(&str) -> bool,
    claimed: Claimed<'_>,
    changed: Option<&[String]>,
) -> Claims {
    let listed = claimed.files.to_vec();
    let missing: Vec<String> = listed
        .iter()
        .filter(|file| !present(file))
        .cloned()
        .collect();
    let unchanged: Vec<String> = match changed {
        Some(changed) => listed
            .iter()
            .filter(|file| !missing.contains(file))
            .filter(|file| {
                let file = crate::fsutil::normalize(Path::new(file.as_str()));
                !changed.iter().any(|c| Path::new(c) == file)
            })
            .cloned()
            .collect(),
        None => Vec::new(),
    };
    let nothing_changed = changed.is_some_and(<[String]>::is_empty);
    let suspicious =
        claimed.success && (claimed.changing_calls == 0 || !missing.is_empty() || nothing_changed);
    Claims {
        success_claimed: claimed.success,
        listed,
        missing,
        changing_calls: claimed.changing_calls,
        changed: changed.map(<[String]>::to_vec),
        unchanged,
        suspicious,
    }
}

impl Claims {
    /// The check in words, for the reviewer's brief.
    pub fn describe(&self) -> String {
        let mut lines = Vec::new();
        if self.listed.is_empty() {
            lines.push("The worker lists no deliverable files.".to_string());
        } else {
            let files: Vec<String> = self
                .listed
                .iter()
                .map(|f| {
                    let state = if self.missing.contains(f) {
                        "MISSING"
                    } else {
                        "exists"
                    };
                    format!("{f} ({state})")
                })
                .collect();
            lines.push(format!("The worker lists: {}.", files.join(", ")));
        }
        if self.changing_calls == 0 {
            lines.push(
                "It made no successful call that changes anything (write_file, edit_file, run_command)."
                    .to_string(),
            );
        } else {
            let what = match self.changing_calls {
                1 => "changes files or runs a command",
                _ => "change files or run commands",
            };
            lines.push(format!(
                "It made {} that {what}.",
                crate::text::count(self.changing_calls, "successful call")
            ));
        }
        match &self.changed {
            Some(changed) if changed.is_empty() => {
                lines.push("Its checkout differs in nothing from the step's base.".to_string());
            }
            Some(changed) => lines.push(format!(
                "Its diff against the step's base changes {}.",
                crate::text::count(changed.len(), "file")
            )),
            None => {}
        }
        if !self.unchanged.is_empty() {
            lines.push(format!(
                "Listed but not changed by this attempt: {}.",
                self.unchanged.join(", ")
            ));
        }
        if self.suspicious {
            lines.push(
                "WARNING: it claims success, but the evidence above does not support that. Verify everything yourself."
                    .to_string(),
            );
        }
        lines.join("\n")
    }
}
