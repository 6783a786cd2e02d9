//! Completion notices, as the seed words them: when an agent or a run a
//! session started in the background ends, the host is told who, what,
//! how long, what it did and where its results are, both as a
//! `notifications/message` and in the next tool result of the session,
//! since many hosts show a tool's result and drop a server's messages.

use serde_json::Value;

use super::Server;
use super::session::{Notice, Session, agent_key, run_key};
use crate::cli::agents::{look, result_object};
use crate::inspect::Shown;

/// The notices of the background agents and runs of `session` that ended
/// since the last look, each kept once in the session and returned.
pub fn gather(server: &Server, session: &Session) -> Vec<Notice> {
    let (agents, runs) = session.unnoticed();
    let mut fresh = Vec::new();
    for id in agents {
        let seen = look(&server.results, &id);
        if !seen.ended() {
            continue;
        }
        let result = result_object(&server.results, &id, &seen);
        let notice = Notice {
            key: agent_key(&id),
            text: agent_text(&id, &result),
            result,
        };
        if session.notice(notice.clone()) {
            fresh.push(notice);
        }
    }
    for run_id in runs {
        let Some((status, text)) = run_end(server, &run_id) else {
            continue;
        };
        let notice = Notice {
            key: run_key(&run_id),
            text,
            result: serde_json::json!({ "run_id": run_id, "status": status }),
        };
        if session.notice(notice.clone()) {
            fresh.push(notice);
        }
    }
    fresh
}

/// The seed's words for an agent's end, from its result object.
pub fn agent_text(id: &str, result: &Value) -> String {
    let text = |key: &str| result[key].as_str().unwrap_or_default().to_string();
    let count = |key: &str| {
        result["stats"][key]
            .as_u64()
            .or_else(|| result[key].as_u64())
            .unwrap_or(0)
    };
    let runtime = result["stats"]["runtime_seconds"]
        .as_f64()
        .or_else(|| result["runtime_seconds"].as_f64())
        .unwrap_or(0.0);
    let summary = text("summary");
    let status = text("status");
    let spent =
        serde_json::from_value::<crate::chat::Usage>(result["stats"]["token_usage"].clone())
            .map(|usage| usage.spent())
            .unwrap_or_else(|_| "no tokens".to_string());
    let outcome = match text("result_summary") {
        done if !done.is_empty() => done,
        _ => text("message"),
    };
    format!(
        "Sub-agent {id} ({summary}) ended: {status}.\n\
         Runtime: {runtime} s; read {} files, searched {} times, viewed {} web pages, ran {} commands; spent {spent}.\n\
         Deliverables: {}\n\
         Result: {outcome}",
        count("files_read"),
        count("searches"),
        count("web_pages"),
        count("commands"),
        text("deliverables_dir"),
    )
}

/// A run's status word and its notice text, once it ended.
pub fn run_end(server: &Server, run_id: &str) -> Option<(String, String)> {
    let dir = server.results.join(run_id);
    let seen = crate::inspect::seen::see(&dir).ok()?;
    if seen.record.status.is_under_way() && !seen.died {
        return None;
    }
    let record = &seen.record;
    let status = match seen.died {
        true => "died".to_string(),
        false => record.status.word().to_string(),
    };
    let done = record
        .steps
        .iter()
        .filter(|step| step.status == crate::record::StepStatus::Completed)
        .count();
    let text = format!(
        "Run {run_id} ({}) ended: {status}.\n\
         Steps completed: {done} of {}.\n\
         Records: {}\n\
         See get_run_status for each step's attempts, verdicts and results.",
        crate::text::excerpt(&record.goal, 80),
        record.steps.len(),
        record.run_dir,
    );
    Some((status, text))
}
