//! A change that did not merge: which paths conflicted, git's messages,
//! and the conflicting hunks as the merge left them (with their markers),
//! for the worker's next attempt.

use crate::git::{Git, Place};

/// The most of the hunks kept for the feedback.
const HUNKS_CAP: usize = 4000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub paths: Vec<String>,
    /// git's words (`CONFLICT (content): Merge conflict in a.txt`).
    pub messages: Vec<String>,
    /// The conflicting regions, marker lines included, path by path.
    pub hunks: String,
}

impl Conflict {
    /// From the output of `merge-tree --write-tree --name-only` that
    /// exited 1: the tree, the conflicted paths, a blank line, messages.
    pub async fn read(git: &Git, output: &str) -> Conflict {
        let mut lines = output.lines();
        let tree = lines.next().unwrap_or("").to_string();
        let mut paths: Vec<String> = Vec::new();
        for line in lines.by_ref() {
            if line.is_empty() {
                break;
            }
            if !paths.iter().any(|p| p == line) {
                paths.push(line.to_string());
            }
        }
        let messages = lines
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect();
        let mut hunks = String::new();
        for path in &paths {
            let object = format!("{tree}:{path}");
            let Ok(text) = git
                .run(&Place::default(), ["cat-file", "-p", &object])
                .await
            else {
                continue;
            };
            let regions = regions(&text);
            if !regions.is_empty() {
                hunks.push_str(&format!("--- {path}\n{regions}"));
            }
        }
        Conflict {
            paths,
            messages,
            hunks: crate::text::excerpt(&hunks, HUNKS_CAP),
        }
    }

    /// The conflict as a reviewer's rejection would say it.
    pub fn issues(&self) -> Vec<String> {
        let mut issues = vec![format!(
            "Your change conflicts with work that landed meanwhile, in {}. Your next attempt starts from the new state: redo the change on top of it.",
            self.paths.join(", ")
        )];
        issues.extend(self.messages.iter().cloned());
        if !self.hunks.is_empty() {
            issues.push(format!("The conflicting hunks:\n{}", self.hunks));
        }
        issues
    }
}

/// The lines from each `<<<<<<<` to its `>>>>>>>`.
fn regions(text: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in text.lines() {
        if line.starts_with("<<<<<<<") {
            inside = true;
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
        if line.starts_with(">>>>>>>") {
            inside = false;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::regions;

    #[test]
    fn only_the_conflicting_regions_are_kept() {
        let text = "a\n<<<<<<< ours\nx\n=======\ny\n>>>>>>> theirs\nb\n";
        assert_eq!(
            regions(text),
            "<<<<<<< ours\nx\n=======\ny\n>>>>>>> theirs\n"
        );
        assert_eq!(regions("no markers\n"), "");
    }
}
