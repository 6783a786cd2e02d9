//! Symbolic links followed the way the kernel will follow them once they
//! are in the user's tree: through the other links of the same tree. A
//! link judged alone can look harmless and still lead out, as
//! `d/up -> ..` with `out -> d/up/d/up/../../etc` does: each stays inside
//! read as text, but the second climbs past the top through the first.
//! The two can come from one change, or from two steps whose merge joins
//! them, so a change is judged in its own tree and an apply in the tree it
//! writes.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::git::{Git, GitError, Place};

/// The mode git gives a symbolic link.
const LINK_MODE: &[u8] = b"120000";

/// How many links a walk follows before it stops, as the kernel's
/// `ELOOP` does: what loops reaches nothing.
const MAX_HOPS: usize = 40;

/// The links of `commit`'s tree that lead outside it and that `changed`
/// had a hand in (the link itself, or one its walk passes through), each
/// as a sentence naming the path. The tree is read only when one of
/// `changed` is a link there.
pub async fn leading_out(
    git: &Git,
    commit: &str,
    changed: &[String],
) -> Result<Vec<String>, GitError> {
    let here = Place::default();
    let listed = git
        .run_bytes(&here, &["ls-tree", "-r", "-z", "--full-tree", commit], None)
        .await?;
    let ids: Vec<(PathBuf, String)> = listed.split(|b| *b == 0).filter_map(link_entry).collect();
    let changed: HashSet<&Path> = changed.iter().map(Path::new).collect();
    if !ids.iter().any(|(path, _)| changed.contains(path.as_path())) {
        return Ok(Vec::new());
    }
    let mut input = Vec::new();
    for (_, id) in &ids {
        input.extend_from_slice(id.as_bytes());
        input.push(b'\n');
    }
    let read = git
        .run_bytes(&here, &["cat-file", "--batch"], Some(input))
        .await?;
    let targets = batch_bodies(&read, ids.len()).ok_or_else(|| GitError::Failed {
        args: "cat-file --batch".to_string(),
        status: "exit 0".to_string(),
        stderr: "its answer is not the links troupe asked for".to_string(),
    })?;
    let links: HashMap<PathBuf, PathBuf> = ids
        .into_iter()
        .map(|(path, _)| path)
        .zip(
            targets
                .into_iter()
                .map(|t| PathBuf::from(OsStr::from_bytes(t))),
        )
        .collect();
    let mut out: Vec<String> = links
        .iter()
        .filter_map(|(link, target)| {
            let walk = walk(&links, link);
            let touched = walk.through.iter().any(|p| changed.contains(p.as_path()));
            (walk.leaves && touched).then(|| said(link, target, &walk.through))
        })
        .collect();
    out.sort();
    Ok(super::named(out))
}

/// The path and blob of one `ls-tree -z` record, if it is a link.
fn link_entry(record: &[u8]) -> Option<(PathBuf, String)> {
    let tab = record.iter().position(|b| *b == b'\t')?;
    let (meta, path) = (&record[..tab], &record[tab + 1..]);
    let mut fields = meta.split(|b| *b == b' ');
    if fields.next()? != LINK_MODE {
        return None;
    }
    let id = std::str::from_utf8(fields.nth(1)?).ok()?.to_string();
    Some((PathBuf::from(OsStr::from_bytes(path)), id))
}

/// The bodies of `count` objects as `cat-file --batch` prints them
/// (`id kind size\n body \n`, one after another).
fn batch_bodies(mut out: &[u8], count: usize) -> Option<Vec<&[u8]>> {
    let mut bodies = Vec::with_capacity(count);
    for _ in 0..count {
        let newline = out.iter().position(|b| *b == b'\n')?;
        let header = std::str::from_utf8(&out[..newline]).ok()?;
        let size: usize = header.rsplit(' ').next()?.parse().ok()?;
        let start = newline + 1;
        bodies.push(out.get(start..start + size)?);
        out = out.get(start + size + 1..)?;
    }
    Some(bodies)
}

/// Where following a link in the tree took the walk.
#[derive(Debug, PartialEq, Eq)]
struct Walk {
    /// Past the tree's top, or to an absolute path.
    leaves: bool,
    /// Every link followed, the first one included, each once.
    through: Vec<PathBuf>,
}

/// Follows `link` through `links` as the kernel would, from the directory
/// it is in: a `..` at the top, or an absolute target, leaves the tree.
fn walk(links: &HashMap<PathBuf, PathBuf>, link: &Path) -> Walk {
    let mut at: Vec<&OsStr> = link.parent().into_iter().flatten().collect();
    let mut through = vec![link.to_path_buf()];
    let mut pending: Vec<Component> = links
        .get(link)
        .into_iter()
        .flat_map(|t| t.components().rev())
        .collect();
    let mut hops = 0;
    let leaves = 'walk: {
        while let Some(component) = pending.pop() {
            match component {
                Component::RootDir | Component::Prefix(_) => break 'walk true,
                Component::CurDir => {}
                Component::ParentDir => {
                    if at.pop().is_none() {
                        break 'walk true;
                    }
                }
                Component::Normal(name) => {
                    at.push(name);
                    let here: PathBuf = at.iter().collect();
                    let Some(target) = links.get(&here) else {
                        continue;
                    };
                    hops += 1;
                    if hops > MAX_HOPS {
                        break;
                    }
                    at.pop();
                    if !through.contains(&here) {
                        through.push(here);
                    }
                    pending.extend(target.components().rev());
                }
            }
        }
        false
    };
    Walk { leaves, through }
}

/// Why `link` is refused, in words.
fn said(link: &Path, target: &Path, through: &[PathBuf]) -> String {
    let others: Vec<String> = through[1..]
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    match others.is_empty() {
        true => format!(
            "{} is a symbolic link to {}, outside the workspace",
            link.display(),
            target.display()
        ),
        false => format!(
            "{} is a symbolic link to {} that leads outside the workspace through the link{} {}",
            link.display(),
            target.display(),
            if others.len() == 1 { "" } else { "s" },
            others.join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(links: &[(&str, &str)]) -> HashMap<PathBuf, PathBuf> {
        links
            .iter()
            .map(|(l, t)| (PathBuf::from(l), PathBuf::from(t)))
            .collect()
    }

    #[test]
    fn a_link_alone_leaves_when_its_target_climbs_past_the_top() {
        let links = tree(&[
            ("a", "/etc/shadow"),
            ("b", "../x"),
            ("d/c", "../../x"),
            ("d/e", "x/../../../y"),
            ("d/f", "../x"),
        ]);
        for (link, leaves) in [
            ("a", true),
            ("b", true),
            ("d/c", true),
            ("d/e", true),
            ("d/f", false),
        ] {
            assert_eq!(walk(&links, Path::new(link)).leaves, leaves, "{link}");
        }
    }

    #[test]
    fn a_chain_of_links_that_each_stay_inside_can_lead_out() {
        let links = tree(&[("d/up", ".."), ("out", "d/up/d/up/../../etc/passwd")]);
        assert!(!walk(&links, Path::new("d/up")).leaves);
        let out = walk(&links, Path::new("out"));
        assert!(out.leaves);
        assert_eq!(out.through, [PathBuf::from("out"), PathBuf::from("d/up")]);
    }

    #[test]
    fn a_chain_that_stays_inside_and_a_loop_lead_nowhere_out() {
        let links = tree(&[
            ("lib", "lib64"),
            ("lib64", "usr/lib64"),
            ("so", "lib/libx.so"),
            ("x", "y"),
            ("y", "x"),
        ]);
        for link in ["so", "x"] {
            assert!(!walk(&links, Path::new(link)).leaves, "{link}");
        }
    }

    #[test]
    fn batch_bodies_are_cut_at_their_sizes() {
        let out = b"aa blob 2\n..\nbb blob 11\nd/up/../x y\n";
        assert_eq!(
            batch_bodies(out, 2),
            Some(vec![&b".."[..], &b"d/up/../x y"[..]])
        );
        assert_eq!(batch_bodies(b"aa blob 9\n..\n", 1), None);
    }
}
