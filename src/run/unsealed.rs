//! Transcripts a full disk kept from being sealed: an agent that could
//! not write its `conversations.json`, or whose parent could not, leaves
//! only its journal, which says `running` for ever. Once the run's end is
//! written in the space kept for it, what is left of that space seals
//! them, each with the end `run.json` gives its agent; one that still
//! does not fit stays a journal, which readers rebuild as before.

use std::path::Path;

use crate::protocol::{AgentStatus, SUBAGENT_DIR};
use crate::record::RunRecord;

/// Seals the transcripts of `record`'s agents that ended but are not
/// sealed; how many it sealed.
pub fn seal_left(workspace: &Path, record: &RunRecord) -> usize {
    let agents = record
        .steps
        .iter()
        .flat_map(|step| &step.attempts)
        .flat_map(|a| a.cut_short.iter().chain(&a.worker).chain(&a.reviews))
        .filter(|agent| agent.status != AgentStatus::Running);
    let mut sealed = 0;
    for agent in agents {
        let path = workspace
            .join(&agent.dir)
            .join(SUBAGENT_DIR)
            .join("conversations.json");
        let Ok(doc) = crate::transcript::load(&path) else {
            continue;
        };
        if doc.status != AgentStatus::Running {
            continue;
        }
        let done = crate::transcript::seal(
            &path,
            || doc.clone(),
            agent.status,
            agent.stats.clone(),
            agent.error.clone(),
        );
        sealed += usize::from(done.is_ok());
    }
    sealed
}
