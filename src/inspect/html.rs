//! `troupe report`: one self-contained HTML page for a run: the DAG as an
//! inline SVG, a table of steps, and every agent's transcript, collapsed.
//! No scripts, no fonts, no stylesheets from elsewhere: the page opens
//! offline, and can be mailed or archived as one file.

use std::path::Path;

use super::graph::{svg, xml};
use crate::chat::{Message, Role};
use crate::protocol::SUBAGENT_DIR;
use crate::supervisor::team::RunRecord;
use crate::supervisor::team::record::AgentRecord;
use crate::text::count;

const STYLE: &str = "body{font-family:sans-serif;margin:2em;color:#263238;max-width:1200px}\
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:2em}\
table{border-collapse:collapse}td,th{border:1px solid #cfd8dc;padding:4px 8px;text-align:left;vertical-align:top}\
.status{padding:1px 6px;border-radius:4px;background:#eceff1}.completed{background:#c8e6c9}\
.failed,.unreviewed,.error,.timeout,.idle_timeout{background:#ffcdd2}.running,.reviewing{background:#fff3c4}\
details{margin:.4em 0;border:1px solid #cfd8dc;border-radius:6px;padding:.3em .6em}\
summary{cursor:pointer;font-weight:bold}.msg{margin:.5em 0}.who{font-size:.8em;color:#546e7a;text-transform:uppercase}\
pre{white-space:pre-wrap;word-break:break-word;background:#f5f7f8;padding:.5em;margin:.2em 0}\
.call{font-family:monospace;color:#00695c}";

pub fn report(run: &RunRecord) -> String {
    let workspace = Path::new(&run.workspace);
    let plan = run.live_plan();
    let status = |id: &str| run.step(id).map(|s| s.status);
    let t = &run.totals;
    let mut out = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>troupe run {id}</title><style>{STYLE}</style></head><body>\n\
         <h1>Run {id} <span class=\"status {st}\">{st}</span></h1>\n<p>{goal}</p>\n\
         <p>{steps}: {completed} completed, {failed} failed, {skipped} skipped, {unreviewed} unreviewed · {agents} · {tokens} · {secs:.1} s · {replans}</p>\n",
        id = xml(&run.run_id),
        st = run.status.as_str(),
        goal = xml(&run.goal),
        steps = count(t.steps as u64, "step"),
        completed = t.completed,
        failed = t.failed,
        skipped = t.skipped,
        unreviewed = t.unreviewed,
        agents = count(t.agents, "agent"),
        tokens = count(t.token_usage.total, "token"),
        secs = t.runtime_seconds,
        replans = count(run.replans, "replan"),
    );
    if let Some(reason) = &run.reason {
        out.push_str(&format!("<p>{}</p>\n", xml(reason)));
    }
    out.push_str("<h2>Plan</h2>\n");
    out.push_str(&svg(&plan, &status));
    out.push_str("<h2>Steps</h2>\n<table><tr><th>step</th><th>status</th><th>attempts</th><th>verdicts</th><th>duration</th><th>tokens</th><th>description</th></tr>\n");
    for step in &run.steps {
        let verdicts: Vec<String> = step
            .attempts
            .iter()
            .flat_map(|a| &a.reviews)
            .map(|r| match &r.verdict {
                Some(v) if v.approved => "approved".to_string(),
                Some(v) => format!("rejected: {}", v.issues.first().unwrap_or(&v.summary)),
                None => r.status.to_string(),
            })
            .collect();
        out.push_str(&format!(
            "<tr><td>{id}</td><td><span class=\"status {st}\">{st}</span></td><td>{n}</td><td>{verdicts}</td><td>{dur}</td><td>{tokens}</td><td>{desc}</td></tr>\n",
            id = xml(&step.id),
            st = step.status.as_str(),
            n = step.attempts.len(),
            verdicts = xml(&verdicts.join("; ")),
            dur = step.duration_seconds.map(|d| format!("{d:.1} s")).unwrap_or_default(),
            tokens = step.stats.token_usage.total,
            desc = xml(&step.description),
        ));
    }
    out.push_str("</table>\n<h2>Agents</h2>\n");
    for step in &run.steps {
        for attempt in &step.attempts {
            let agents = attempt.worker.iter().chain(&attempt.reviews);
            for agent in agents {
                out.push_str(&agent_section(workspace, &step.id, agent));
            }
        }
    }
    out.push_str("</body></html>\n");
    out
}

fn agent_section(workspace: &Path, step: &str, agent: &AgentRecord) -> String {
    let name = agent.dir.rsplit('/').next().unwrap_or(&agent.dir);
    let mut out = format!(
        "<details><summary>{step} / {name} <span class=\"status {st}\">{st}</span></summary>\n<p>{summary}</p>\n",
        step = xml(step),
        name = xml(name),
        st = agent.status,
        summary = xml(agent.error.as_deref().unwrap_or(&agent.summary)),
    );
    let path = workspace
        .join(&agent.dir)
        .join(SUBAGENT_DIR)
        .join("conversations.json");
    match crate::transcript::load(&path) {
        Ok(doc) => {
            for message in &doc.messages {
                out.push_str(&message_html(message));
            }
        }
        Err(e) => out.push_str(&format!("<p>{}</p>\n", xml(&e.to_string()))),
    }
    out.push_str("</details>\n");
    out
}

fn message_html(message: &Message) -> String {
    let who = match message.role {
        Role::System => "system".to_string(),
        Role::User => "user".to_string(),
        Role::Assistant => "assistant".to_string(),
        Role::Tool => format!("tool {}", message.tool_call_id.as_deref().unwrap_or("")),
    };
    let mut out = format!("<div class=\"msg\"><div class=\"who\">{}</div>", xml(&who));
    if !message.text().is_empty() {
        out.push_str(&format!("<pre>{}</pre>", xml(message.text())));
    }
    for call in &message.tool_calls {
        out.push_str(&format!(
            "<div class=\"call\">-&gt; {} {}</div>",
            xml(call.name()),
            xml(&call.function.arguments)
        ));
    }
    out.push_str("</div>\n");
    out
}
