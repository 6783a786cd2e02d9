//! Trees as git stores them, and an edit of one: the base's tree with
//! paths set and removed, where only the trees along those paths are read
//! and written again. Every other entry keeps the id it had, so an edit
//! costs the depth of its paths, not the size of the repository.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Format, ObjectError, Objects};

/// The mode git writes for a tree entry.
const TREE: &[u8] = b"40000";

/// One entry of a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub mode: Vec<u8>,
    pub name: Vec<u8>,
    pub id: String,
}

impl Entry {
    pub fn is_tree(&self) -> bool {
        is_tree(&self.mode)
    }
}

/// The entry at `path` in the tree `id`, read along that path only.
/// Blocking, as every read of a tree is.
pub fn entry_at(objects: &Objects, id: &str, path: &[u8]) -> Result<Option<Entry>, ObjectError> {
    let (last, dirs) = split(path)?;
    let mut tree = objects.tree(id)?;
    for name in dirs {
        let Some(dir) = tree.iter().find(|e| e.name == name && e.is_tree()) else {
            return Ok(None);
        };
        let id = dir.id.clone();
        tree = objects.tree(&id)?;
    }
    Ok(tree.iter().find(|e| e.name == last).cloned())
}

/// The entries of the tree `body`, whose ids are `format`'s.
pub(super) fn parse(body: &[u8], format: Format) -> Result<Vec<Entry>, String> {
    let raw = format.raw_len();
    let mut entries = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let space = rest
            .iter()
            .position(|b| *b == b' ')
            .ok_or("an entry has no mode")?;
        let nul = rest
            .iter()
            .position(|b| *b == 0)
            .ok_or("an entry has no name")?;
        if nul < space || rest.len() < nul + 1 + raw {
            return Err("an entry is cut short".to_string());
        }
        entries.push(Entry {
            mode: rest[..space].to_vec(),
            name: rest[space + 1..nul].to_vec(),
            id: super::hex(&rest[nul + 1..nul + 1 + raw]),
        });
        rest = &rest[nul + 1 + raw..];
    }
    Ok(entries)
}

/// The body of a tree holding `entries`, in git's order: names compared
/// as bytes, a tree's as if it ended in `/`.
fn serialize(mut entries: Vec<Entry>) -> Result<Vec<u8>, String> {
    let key = |e: &Entry| {
        let mut key = e.name.clone();
        if e.mode == TREE {
            key.push(b'/');
        }
        key
    };
    entries.sort_by_cached_key(key);
    let mut body = Vec::new();
    for entry in entries {
        body.extend(&entry.mode);
        body.push(b' ');
        body.extend(&entry.name);
        body.push(0);
        body.extend(
            super::unhex(&entry.id).ok_or_else(|| format!("{} is not an object id", entry.id))?,
        );
    }
    Ok(body)
}

/// A mode as a tree stores it: `040000` is written `40000`.
fn stored(mode: &str) -> Vec<u8> {
    let trimmed = mode.trim_start_matches('0');
    trimmed.as_bytes().to_vec()
}

fn is_tree(mode: &[u8]) -> bool {
    mode == TREE
}

/// A tree being edited: the base's entries, with the directories along
/// the edited paths opened.
#[derive(Default)]
struct Dir {
    entries: BTreeMap<Vec<u8>, Node>,
}

enum Node {
    /// An entry as the base has it.
    Kept { mode: Vec<u8>, id: String },
    /// A directory read to be edited, or made by the edit.
    Open(Dir),
}

impl Dir {
    fn of(entries: &Arc<Vec<Entry>>) -> Dir {
        Dir {
            entries: entries
                .iter()
                .map(|e| {
                    let node = Node::Kept {
                        mode: e.mode.clone(),
                        id: e.id.clone(),
                    };
                    (e.name.clone(), node)
                })
                .collect(),
        }
    }
}

/// An edit of a tree, written as new trees when done. Blocking: its
/// reads and writes are a change's work off the run's thread.
pub struct Edit {
    root: Dir,
}

impl Edit {
    /// An edit of the tree `id`.
    pub fn of(objects: &Objects, id: &str) -> Result<Edit, ObjectError> {
        Ok(Edit {
            root: Dir::of(&objects.tree(id)?),
        })
    }

    /// Sets `path` to the blob (or link, or gitlink) `id` with `mode`;
    /// what stands in the way of its directories (a file) is replaced by
    /// a directory, as a checkout would have it.
    pub fn set(
        &mut self,
        objects: &Objects,
        path: &[u8],
        mode: &str,
        id: &str,
    ) -> Result<(), ObjectError> {
        let (last, dirs) = split(path)?;
        if let Some(dir) = open(&mut self.root, objects, &dirs, true)? {
            let node = Node::Kept {
                mode: stored(mode),
                id: id.to_string(),
            };
            dir.entries.insert(last.to_vec(), node);
        }
        Ok(())
    }

    /// Removes `path` and all under it; nothing there is nothing to do.
    pub fn remove(&mut self, objects: &Objects, path: &[u8]) -> Result<(), ObjectError> {
        let (last, dirs) = split(path)?;
        if let Some(dir) = open(&mut self.root, objects, &dirs, false)? {
            dir.entries.remove(last);
        }
        Ok(())
    }

    /// Writes the trees the edit opened (a directory left empty goes, as
    /// git holds no empty directory); the root tree's id.
    pub fn write(&self, objects: &Objects) -> Result<String, ObjectError> {
        match write_dir(&self.root, objects)? {
            Some(id) => Ok(id),
            None => objects.write_bytes("tree", &[]),
        }
    }
}

/// `path`'s directories and its last name.
fn split(path: &[u8]) -> Result<(&[u8], Vec<&[u8]>), ObjectError> {
    let mut names: Vec<&[u8]> = path.split(|b| *b == b'/').collect();
    if names
        .iter()
        .any(|n| n.is_empty() || *n == b"." || *n == b"..")
    {
        return Err(ObjectError::Unexpected {
            name: String::from_utf8_lossy(path).into_owned(),
            why: "a path of a tree must be plain names".to_string(),
        });
    }
    let last = names.pop().unwrap_or_default();
    Ok((last, names))
}

/// The directory `names` lead to from `dir`, each opened on the way;
/// with `make`, made where missing or where a file stands.
fn open<'a>(
    mut dir: &'a mut Dir,
    objects: &Objects,
    names: &[&[u8]],
    make: bool,
) -> Result<Option<&'a mut Dir>, ObjectError> {
    for name in names {
        if !dir.entries.contains_key(*name) {
            if !make {
                return Ok(None);
            }
            dir.entries
                .insert(name.to_vec(), Node::Open(Dir::default()));
        }
        let Some(node) = dir.entries.get_mut(*name) else {
            return Ok(None);
        };
        if let Node::Kept { mode, id } = node {
            let opened = match (is_tree(mode), make) {
                (true, _) => Dir::of(&objects.tree(id)?),
                (false, true) => Dir::default(),
                (false, false) => return Ok(None),
            };
            *node = Node::Open(opened);
        }
        let Node::Open(next) = node else {
            return Ok(None);
        };
        dir = next;
    }
    Ok(Some(dir))
}

/// Writes `dir` and the directories opened under it; `None` when it
/// holds nothing.
fn write_dir(dir: &Dir, objects: &Objects) -> Result<Option<String>, ObjectError> {
    let mut entries = Vec::new();
    for (name, node) in &dir.entries {
        let (mode, id) = match node {
            Node::Kept { mode, id } => (mode.clone(), id.clone()),
            Node::Open(sub) => match write_dir(sub, objects)? {
                Some(id) => (TREE.to_vec(), id),
                None => continue,
            },
        };
        entries.push(Entry {
            mode,
            name: name.clone(),
            id,
        });
    }
    if entries.is_empty() {
        return Ok(None);
    }
    let body = serialize(entries).map_err(|why| ObjectError::Unexpected {
        name: "a tree troupe wrote".to_string(),
        why,
    })?;
    objects.write_bytes("tree", &body).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(mode: &str, name: &str) -> Entry {
        Entry {
            mode: mode.as_bytes().to_vec(),
            name: name.as_bytes().to_vec(),
            id: "0".repeat(40),
        }
    }

    #[test]
    fn a_tree_sorts_as_if_its_name_ended_in_a_slash() {
        // git's order: "a.txt" < "a/" < "a0"; a file "a" would come first.
        let body = serialize(vec![
            entry("100644", "a0"),
            entry("40000", "a"),
            entry("100644", "a.txt"),
        ])
        .expect("serialized");
        let names: Vec<Vec<u8>> = parse(&body, Format::Sha1)
            .expect("parsed")
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, [b"a.txt".to_vec(), b"a".to_vec(), b"a0".to_vec()]);
    }

    #[test]
    fn a_cut_tree_is_refused() {
        let body = serialize(vec![entry("100644", "a")]).expect("serialized");
        assert!(parse(&body[..body.len() - 1], Format::Sha1).is_err());
    }
}
