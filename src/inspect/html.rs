//! `troupe report`: one self-contained HTML page for a run: the DAG as an
//! inline SVG, a table of steps, and every agent's transcript, collapsed.
//! No scripts, no fonts, no stylesheets from elsewhere: the page opens
//! offline, and can be mailed or archived as one file.

use std::path::Path;

use super::Shown;
use super::graph::{svg, xml};
use super::seen::SeenRun;
use crate::protocol::SUBAGENT_DIR;
use crate::record::RunRecord;
use crate::record::{AgentRecord, StepRecord};
use crate::text::count;

const STYLE: &str = "body{font-family:sans-serif;margin:2em;color:#263238;max-width:1200px}\
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:2em}\
table{border-collapse:collapse}td,th{border:1px solid #cfd8dc;padding:4px 8px;text-align:left;vertical-align:top;white-space:nowrap}\
.status{padding:1px 6px;border-radius:4px;background:#eceff1}.completed{background:#c8e6c9}\
.approved{background:#c8e6c9}.rejected{background:#ffe0b2}\
.failed,.died,.unreviewed,.error,.timeout,.idle_timeout,.context_exhausted{background:#ffcdd2}\
td.id,td.outcome,td.desc{white-space:normal;overflow-wrap:anywhere}td.id{min-width:6em;max-width:18em}.dag{max-width:100%;height:auto}\
.args{margin:.2em 0 .2em 1em}.args dt{font-family:monospace;color:#00695c}.args dd{margin:0 0 .3em 1em}\
.result.error pre{background:#fdecea}.running,.reviewing{background:#fff3c4}\
details{margin:.4em 0;border:1px solid #cfd8dc;border-radius:6px;padding:.3em .6em}\
summary{cursor:pointer;font-weight:bold}.msg{margin:.5em 0}.who{font-size:.8em;color:#546e7a;text-transform:uppercase}\
pre{white-space:pre-wrap;word-break:break-word;background:#f5f7f8;padding:.5em;margin:.2em 0}\
.call{font-family:monospace;color:#00695c}";

pub fn report(seen: &SeenRun) -> String {
    let run = &seen.record;
    let workspace = Path::new(&run.workspace);
    let plan = run.live_plan();
    let status = |id: &str| run.step(id).map(|s| s.status);
    let t = &run.totals;
    let mut out = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>troupe run {id}</title><style>{STYLE}</style></head><body>\n\
         <h1>Run {id} <span class=\"status {st}\">{st}</span></h1>\n<p>{goal}</p>\n\
         <p>{steps}: {completed} completed, {failed} failed, {skipped} skipped, {unreviewed} unreviewed · {agents} · {tokens} · {secs:.1} s · {replans}</p>\n",
        id = xml(&run.run_id),
        st = seen.state().word(),
        goal = xml(&run.goal),
        steps = count(t.steps as u64, "step"),
        completed = t.completed,
        failed = t.failed,
        skipped = t.skipped,
        unreviewed = t.unreviewed,
        agents = count(t.agents, "agent"),
        tokens = t.token_usage.spent(),
        secs = t.runtime_seconds,
        replans = count(run.replans, "replan"),
    );
    if let Some(apply) = super::run::apply_note(run) {
        out.push_str(&format!("<p class=\"apply\">{}</p>\n", xml(&apply)));
    }
    if let Some(reason) = &run.reason {
        out.push_str(&format!("<p class=\"reason\">{}</p>\n", xml(reason)));
    }
    if let Some(note) = seen.died_note() {
        out.push_str(&format!("<p class=\"died\">{}</p>\n", xml(&note)));
    }
    if let Some(resumed) = resumes(workspace, run) {
        out.push_str(&format!("<p class=\"resumed\">{}</p>\n", xml(&resumed)));
    }
    out.push_str("<h2>Plan</h2>\n");
    out.push_str(&svg(&plan, &status));
    out.push_str("<h2>Steps</h2>\n<table class=\"steps\"><tr><th>step</th><th>status</th><th>attempts</th><th>outcome</th><th>duration</th><th>tokens</th><th>description</th></tr>\n");
    for step in &run.steps {
        out.push_str(&format!(
            "<tr data-step=\"{id}\"><td class=\"id\">{id}</td><td><span class=\"status {st}\">{st}</span></td><td>{n}</td><td class=\"outcome\">{outcome}</td><td>{dur}</td><td>{tokens}</td><td class=\"desc\">{desc}</td></tr>\n",
            id = xml(&step.id),
            st = step.status.as_str(),
            n = step.attempts.len(),
            outcome = xml(&outcome(step)),
            dur = step.duration_seconds.map(|d| format!("{d:.1} s")).unwrap_or_default(),
            tokens = step.stats.token_usage.total,
            desc = xml(&step.description),
        ));
    }
    out.push_str("</table>\n");
    out.push_str(&changes(run));
    out.push_str(&planner_section(workspace, run));
    out.push_str("<h2>Agents</h2>\n");
    for step in &run.steps {
        for attempt in &step.attempts {
            let cut = attempt.cut_short.iter();
            let agents = cut.chain(&attempt.worker).chain(&attempt.reviews);
            for agent in agents {
                out.push_str(&agent_section(workspace, &step.id, agent));
            }
        }
    }
    out.push_str("</body></html>\n");
    out
}

/// With `--isolation worktree`: the branch, and each attempt's base,
/// change, landing and conflicts.
fn changes(run: &RunRecord) -> String {
    let Some(isolation) = &run.isolation else {
        return String::new();
    };
    let short = |id: &str| xml(&id.chars().take(10).collect::<String>());
    let mut out = format!(
        "<h2>Changes</h2>\n<p>Each step attempt worked in a checkout of its own; the result is branch <code>{}</code> (from snapshot <code>{}</code>).</p>\n<table class=\"changes\"><tr><th>step</th><th>attempt</th><th>base</th><th>change</th><th>landed</th><th>conflicts</th></tr>\n",
        xml(&isolation.branch),
        short(&isolation.snapshot)
    );
    for step in &run.steps {
        for attempt in &step.attempts {
            let Some(change) = &attempt.change else {
                continue;
            };
            let stat = change.stat.lines().last().unwrap_or("nothing").trim();
            out.push_str(&format!(
                "<tr><td class=\"id\">{id}</td><td>{n}</td><td><code>{base}</code></td><td>{stat}{diff}</td><td><code>{merge}</code></td><td>{conflicts}</td></tr>\n",
                id = xml(&step.id),
                n = attempt.attempt,
                base = short(&change.base),
                stat = xml(stat),
                diff = diff_of(Path::new(&run.workspace), change.diff.as_deref()),
                merge = change.merge.as_deref().map(short).unwrap_or_default(),
                conflicts = xml(&change.conflicts.join(", ")),
            ));
        }
    }
    out.push_str("</table>\n");
    out
}

/// The most of one attempt's diff a report carries; the rest is named.
const DIFF_IN_REPORT: u64 = 64 * 1024;

/// An attempt's diff (`diff`, shown relative to `workspace`), collapsed,
/// at most `DIFF_IN_REPORT` bytes of it.
fn diff_of(workspace: &Path, diff: Option<&str>) -> String {
    let Some(diff) = diff else {
        return String::new();
    };
    let path = workspace.join(diff);
    match crate::fsutil::read_head(&path, DIFF_IN_REPORT) {
        Ok((text, cut)) if !text.is_empty() => format!(
            "<details class=\"diff\"><summary>diff</summary><pre>{}</pre>{}</details>",
            xml(&text),
            match cut {
                true => format!(
                    "<p>(its first {DIFF_IN_REPORT} bytes; all of it is in {})</p>",
                    xml(diff)
                ),
                false => String::new(),
            }
        ),
        _ => String::new(),
    }
}

/// How often the run was interrupted and taken up again, from its
/// events; `None` for a run that never was.
fn resumes(workspace: &Path, run: &RunRecord) -> Option<String> {
    let events = workspace.join(&run.run_dir).join("events.jsonl");
    let text = crate::fsutil::read_record(&events).ok()?;
    let resumed = text
        .lines()
        .filter(|line| line.contains("\"type\":\"run_resumed\""))
        .count();
    (resumed > 0).then(|| {
        format!(
            "interrupted and resumed {}",
            match resumed {
                1 => "once".to_string(),
                n => format!("{n} times"),
            }
        )
    })
}

/// The Planner's conversation: how the plan (and each replan) came to be.
fn planner_section(workspace: &Path, run: &RunRecord) -> String {
    let path = workspace
        .join(&run.run_dir)
        .join("planner")
        .join("conversations.json");
    match crate::transcript::load(&path) {
        Ok(doc) => format!(
            "<h2>Planner</h2>\n<details class=\"planner\"><summary>the Planner's conversation</summary>\n{}</details>\n",
            super::html_messages::messages(&doc.messages)
        ),
        Err(_) => String::new(),
    }
}

/// What became of a step, in one line: its reason when it did not
/// complete, else what each review said.
fn outcome(step: &StepRecord) -> String {
    if let Some(reason) = &step.reason {
        return reason.clone();
    }
    let verdicts: Vec<String> = step
        .attempts
        .iter()
        .flat_map(|a| &a.reviews)
        .map(|r| match &r.verdict {
            Some(v) if v.approved => "approved".to_string(),
            Some(v) => format!("rejected: {}", v.issues.first().unwrap_or(&v.summary)),
            None => format!(
                "review {}: {}",
                r.status,
                r.error.as_deref().unwrap_or("no verdict")
            ),
        })
        .collect();
    match verdicts.is_empty() {
        false => verdicts.join("; "),
        true => step
            .attempts
            .iter()
            .rev()
            .find_map(|a| a.worker.as_ref()?.error.clone())
            .unwrap_or_default(),
    }
}

/// A reviewer's badge is its verdict; anyone else's its status.
fn badge(agent: &AgentRecord) -> (&'static str, String) {
    match &agent.verdict {
        Some(verdict) if verdict.approved => ("approved", "approved".to_string()),
        Some(_) => ("rejected", "rejected".to_string()),
        None => (agent.status.as_str(), agent.status.to_string()),
    }
}

fn agent_section(workspace: &Path, step: &str, agent: &AgentRecord) -> String {
    let name = agent.dir.rsplit('/').next().unwrap_or(&agent.dir);
    let (class, word) = badge(agent);
    let said = match &agent.verdict {
        Some(verdict) => verdict.summary.clone(),
        None => agent.error.clone().unwrap_or_else(|| agent.summary.clone()),
    };
    let mut out = format!(
        "<details class=\"agent\" data-agent=\"{step}/{name}\"><summary>{step} / {name} <span class=\"status {class}\">{word}</span></summary>\n<p>{said}</p>\n",
        step = xml(step),
        name = xml(name),
        said = xml(&said),
    );
    let path = workspace
        .join(&agent.dir)
        .join(SUBAGENT_DIR)
        .join("conversations.json");
    match crate::transcript::load(&path) {
        Ok(doc) => out.push_str(&super::html_messages::messages(&doc.messages)),
        Err(e) => out.push_str(&format!("<p>{}</p>\n", xml(&e.to_string()))),
    }
    out.push_str("</details>\n");
    out
}
