//! Transcripts and results as MCP resources, so that a host can read what
//! a sub-agent did: each spawned agent's `conversations.json` and
//! `result.json`, each run's `run.json`, and each step attempt's
//! transcript and result. A subscription to any of them hears of the
//! end of its agent or run, after which they change no more.
//!
//! A URI names an agent, a run, a step and an attempt by their names
//! alone; each name is checked to be one plain path component, so no URI
//! reaches outside the results directory.

use std::path::{Path, PathBuf};

use crate::protocol::SUBAGENT_DIR;
use crate::supervisor::registry;

pub const SCHEME: &str = "troupe://";

/// The URI templates, with what each one is.
pub const TEMPLATES: [(&str, &str); 5] = [
    (
        "troupe://agents/{agent_id}/conversation",
        "a spawned agent's transcript (conversations.json)",
    ),
    (
        "troupe://agents/{agent_id}/result",
        "a spawned agent's result object (result.json), once it ended",
    ),
    (
        "troupe://runs/{run_id}/run",
        "a team run's record (run.json)",
    ),
    (
        "troupe://runs/{run_id}/steps/{step}/{attempt}/conversation",
        "a step attempt's transcript: attempt is worker-N or review-N",
    ),
    (
        "troupe://runs/{run_id}/steps/{step}/{attempt}/result",
        "a step attempt's result object",
    ),
];

/// One resource that exists now.
pub struct Listed {
    pub uri: String,
    pub name: String,
    pub description: String,
}

/// Every resource the results directory holds now.
pub fn list(results: &Path) -> Vec<Listed> {
    let mut out = Vec::new();
    for id in registry::known_ids(results) {
        let dir = registry::agent_dir(results, &id).join(SUBAGENT_DIR);
        for (file, what) in FILES {
            if dir.join(file).is_file() {
                out.push(Listed {
                    uri: format!("{SCHEME}agents/{id}/{what}"),
                    name: format!("agent {id} {what}"),
                    description: format!("agent {id}'s {file}"),
                });
            }
        }
    }
    for run in names(results).filter(|name| name.starts_with("run_")) {
        let run_dir = results.join(&run);
        if !run_dir.join("run.json").is_file() {
            continue;
        }
        out.push(Listed {
            uri: format!("{SCHEME}runs/{run}/run"),
            name: format!("{run} record"),
            description: format!("run {run}'s run.json"),
        });
        for step in names(&run_dir).filter(|n| run_dir.join(n).is_dir()) {
            for attempt in names(&run_dir.join(&step)) {
                let dir = run_dir.join(&step).join(&attempt).join(SUBAGENT_DIR);
                for (file, what) in FILES {
                    if dir.join(file).is_file() {
                        out.push(Listed {
                            uri: format!("{SCHEME}runs/{run}/steps/{step}/{attempt}/{what}"),
                            name: format!("{run} {step} {attempt} {what}"),
                            description: format!("{step}'s {attempt} {file}"),
                        });
                    }
                }
            }
        }
    }
    out
}

/// The file `uri` names, once it exists, or why it names none.
pub fn locate(results: &Path, uri: &str) -> Result<PathBuf, String> {
    let path = path_of(results, uri)?;
    if !path.is_file() {
        return Err(format!(
            "{uri}: there is no such file yet ({})",
            path.display()
        ));
    }
    Ok(path)
}

/// The file `uri` names, there or not yet.
pub fn path_of(results: &Path, uri: &str) -> Result<PathBuf, String> {
    let rest = uri
        .strip_prefix(SCHEME)
        .ok_or_else(|| format!("{uri} is not a troupe:// resource"))?;
    let parts: Vec<&str> = rest.split('/').collect();
    if let Some(bad) = parts.iter().find(|part| !plain(part)) {
        return Err(format!("{uri}: `{bad}` is not a plain name"));
    }
    let path = match parts.as_slice() {
        ["agents", id, what] => {
            let file = file_of(what).ok_or_else(|| unknown(uri))?;
            registry::agent_dir(results, id)
                .join(SUBAGENT_DIR)
                .join(file)
        }
        ["runs", run, "run"] => results.join(run).join("run.json"),
        ["runs", run, "steps", step, attempt, what] => {
            let file = file_of(what).ok_or_else(|| unknown(uri))?;
            results
                .join(run)
                .join(step)
                .join(attempt)
                .join(SUBAGENT_DIR)
                .join(file)
        }
        _ => return Err(unknown(uri)),
    };
    Ok(path)
}

/// Whose end updates a resource, for subscriptions.
pub enum Owner<'a> {
    Agent(&'a str),
    Run(&'a str),
}

/// The agent or run whose end updates `uri`.
pub fn owner_of(uri: &str) -> Option<Owner<'_>> {
    let rest = uri.strip_prefix(SCHEME)?;
    let (kind, rest) = rest.split_once('/')?;
    let name = rest.split('/').next().filter(|name| plain(name))?;
    match kind {
        "agents" => Some(Owner::Agent(name)),
        "runs" => Some(Owner::Run(name)),
        _ => None,
    }
}

const FILES: [(&str, &str); 2] = [
    ("conversations.json", "conversation"),
    ("result.json", "result"),
];

fn file_of(what: &str) -> Option<&'static str> {
    FILES
        .iter()
        .find(|(_, name)| *name == what)
        .map(|(file, _)| *file)
}

fn unknown(uri: &str) -> String {
    format!(
        "{uri} names no resource; the forms are {}",
        TEMPLATES.map(|(template, _)| template).join(", ")
    )
}

/// One path component, not hidden, not `.` or `..`.
fn plain(part: &str) -> bool {
    !part.is_empty() && !part.starts_with('.') && !part.contains(['/', '\\', '\0'])
}

fn names(dir: &Path) -> impl Iterator<Item = String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|name| plain(name))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names.into_iter()
}
