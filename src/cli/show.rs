//! `troupe show` (an agent, a run, a step, as text or the raw JSON) and
//! `troupe report` (a run as one HTML page).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};

use super::UsageError;
use super::agents::Place;
use crate::inspect::conversation::Render;
use crate::inspect::run::{run_text, step_text};
use crate::inspect::seen::see;
use crate::inspect::{Target, graph, html, load_run, resolve};
use crate::paint::Painter;
use crate::protocol::{AgentStatus, SUBAGENT_DIR};
use crate::supervisor::registry;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Dot,
    Mermaid,
}

impl Format {
    fn name(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Dot => "dot",
            Format::Mermaid => "mermaid",
        }
    }
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  troupe show 1 --full\n  troupe show last\n  troupe show last/step_2 --json\n  troupe show last/extract --result | jq .urls\n  troupe show last --format dot | dot -Tsvg > plan.svg\n  troupe show last --follow"
)]
pub struct ShowArgs {
    /// An agent (agent_1 or 1), a run id, RUN/STEP, RUN/STEP/worker-1, or a
    /// directory of any of these.
    #[arg(value_name = "WHAT")]
    pub target: String,

    /// Print the underlying file (conversations.json, made from the
    /// journal while the agent runs; run.json; or the step's record)
    /// instead of text.
    #[arg(long)]
    pub json: bool,

    /// Show every message whole.
    #[arg(long)]
    pub full: bool,

    /// Keep showing an agent's new messages, or a run's events, until it
    /// ends.
    #[arg(long, short)]
    pub follow: bool,

    /// For a run: text, or its DAG as Graphviz (dot) or Mermaid.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,

    /// For a step of a run made with --isolation worktree: print its last
    /// attempt's change as a diff.
    #[arg(long)]
    pub diff: bool,

    /// For a step with an output_schema: print its result alone, as JSON,
    /// for scripts (`troupe show last/extract --result | jq .urls`); exit
    /// 1 when the step has none (not done, or no schema).
    #[arg(long, conflicts_with_all = ["diff", "json", "follow"])]
    pub result: bool,

    #[command(flatten)]
    pub place: Place,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  troupe report last -o run.html")]
pub struct ReportArgs {
    /// The run: its id or its directory.
    #[arg(value_name = "RUN")]
    pub run: String,

    /// Write the page here instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    #[command(flatten)]
    pub place: Place,
}

pub async fn show(args: ShowArgs) -> anyhow::Result<ExitCode> {
    let target = resolve(&args.place.results(), &args.target).map_err(UsageError::Said)?;
    let render = Render {
        painter: Painter::for_stdout(),
        full: args.full,
    };
    if args.format != Format::Text && !matches!(target, Target::Run(_)) {
        return Err(UsageError::Said(format!(
            "--format {} draws a run's plan; `{}` is not a run",
            args.format.name(),
            args.target
        ))
        .into());
    }
    if args.result && !matches!(target, Target::Step { .. }) {
        return Err(UsageError::Said(format!(
            "--result prints a step's result; `{}` is not a step (name it RUN/STEP)",
            args.target
        ))
        .into());
    }
    if args.diff && !matches!(target, Target::Step { .. }) {
        return Err(UsageError::Said(format!(
            "--diff prints a step's change; `{}` is not a step (name it RUN/STEP)",
            args.target
        ))
        .into());
    }
    match target {
        Target::Agent(dir) => show_agent(&dir, &args, &render).await,
        Target::Run(dir) if args.follow => follow_run(&dir, args.json).await,
        Target::Run(dir) => {
            if args.json {
                // The file as it is (even one this troupe cannot read as a
                // record), unless it died: run.json still says it is under
                // way, and a script must not wait for it.
                match see(&dir) {
                    Ok(seen) if seen.died => {
                        crate::say!("{}", serde_json::to_string_pretty(&seen.to_json()?)?);
                    }
                    _ => crate::console::out(&read(&dir.join("run.json"))?),
                }
                return Ok(ExitCode::SUCCESS);
            }
            let seen = see(&dir).map_err(UsageError::Said)?;
            let run = &seen.record;
            let status = |id: &str| run.step(id).map(|s| s.status);
            let text = match args.format {
                Format::Text => run_text(&seen, &render),
                Format::Dot => graph::dot(&run.live_plan(), &status),
                Format::Mermaid => graph::mermaid(&run.live_plan(), &status),
            };
            crate::console::out(&text);
            Ok(ExitCode::SUCCESS)
        }
        Target::Step { run, step } => {
            let record = load_run(&run).map_err(UsageError::Said)?;
            let found = record.step(&step).ok_or_else(|| {
                UsageError::Said(format!("the run {} has no step {step}", record.run_id))
            })?;
            if args.diff {
                print_diff(&record, found)?;
                return Ok(ExitCode::SUCCESS);
            }
            if args.result {
                return Ok(print_result(found));
            }
            if args.json {
                crate::say!("{}", serde_json::to_string_pretty(found)?);
            } else {
                crate::console::out(&step_text(found, &render));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A step's result alone, or why it has none (exit 1).
fn print_result(step: &crate::record::StepRecord) -> ExitCode {
    match (&step.result, &step.output_schema) {
        (Some(result), _) => {
            crate::say!(
                "{}",
                serde_json::to_string_pretty(result).unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        (None, None) => {
            crate::tell!(
                "troupe: step {} has no output_schema, so no result; its worker's summary is in troupe show RUN/{}",
                step.id,
                step.id
            );
            ExitCode::FAILURE
        }
        (None, Some(_)) => {
            crate::tell!(
                "troupe: step {} has no result yet: it is {}",
                step.id,
                step.status.as_str()
            );
            ExitCode::FAILURE
        }
    }
}

/// The diff of the last attempt of `step` that changed something, from
/// the file the run kept.
fn print_diff(
    run: &crate::record::RunRecord,
    step: &crate::record::StepRecord,
) -> Result<(), UsageError> {
    if run.isolation.is_none() {
        return Err(UsageError::Said(format!(
            "run {} shared its workspace (no --isolation worktree): its steps have no change of their own to show",
            run.run_id
        )));
    }
    let change = step
        .attempts
        .iter()
        .rev()
        .filter_map(|a| a.change.as_ref())
        .find(|c| c.diff.is_some());
    let Some(diff) = change.and_then(|c| c.diff.as_deref()) else {
        return Err(UsageError::Said(format!(
            "step {} has no change yet (no attempt of it changed anything)",
            step.id
        )));
    };
    let path = Path::new(&run.workspace).join(diff);
    crate::console::out(&read(&path)?);
    Ok(())
}

async fn show_agent(dir: &Path, args: &ShowArgs, render: &Render) -> anyhow::Result<ExitCode> {
    let path = dir.join(SUBAGENT_DIR).join("conversations.json");
    // An agent just started has a task file and a supervisor, and its
    // transcript a moment later.
    while args.follow && !crate::transcript::exists(&path) && registry::is_held(dir) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if args.json {
        match crate::fsutil::is_regular(&path) {
            true => crate::console::out(&read(&path)?),
            // Still running: made from its journal, in the shape
            // `conversations.json` will have.
            false => {
                let doc = crate::transcript::load(&path).map_err(UsageError::of)?;
                crate::say!("{}", serde_json::to_string_pretty(&doc)?);
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let load = || crate::transcript::load(&path).map_err(UsageError::of);
    let doc = load()?;
    crate::console::out(&render.header(&doc));
    crate::console::out(&render.messages(&doc.messages, 0));
    if !args.follow {
        return Ok(ExitCode::SUCCESS);
    }
    let mut shown = doc.messages.len();
    let mut doc = doc;
    let supervised = dir.join(SUBAGENT_DIR).join("status.json").exists();
    while doc.status == AgentStatus::Running {
        if supervised && !registry::is_held(dir) {
            crate::say!("(the agent's supervisor is gone; it is lost)");
            return Ok(ExitCode::FAILURE);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        if let Ok(next) = load() {
            crate::console::out(&render.messages(&next.messages, shown));
            shown = next.messages.len();
            doc = next;
        }
    }
    crate::console::out(&render.header(&doc));
    Ok(ExitCode::SUCCESS)
}

/// The run's events as they come, one line each (`--json`: as written),
/// until `run_finished`, or until the run is seen to have ended without
/// it: its record sealed, or no troupe running it any more (it died,
/// exit 1, with the command that resumes it; on stderr with `--json`,
/// whose stdout is events only).
async fn follow_run(dir: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let events = dir.join("events.jsonl");
    let mut seen = 0;
    // A run's events end at its `run_finished`, unless a resume took it up
    // again after (`run_resumed`), or is taking it up now (it holds the
    // run's directory).
    let mut finished = false;
    loop {
        let text = crate::fsutil::read_record(&events).unwrap_or_default();
        let complete = text.rfind('\n').map_or(0, |end| end + 1);
        for line in text[seen.min(complete)..complete].lines() {
            let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if json {
                crate::say!("{line}");
            } else if let Some(said) = event_line(&event) {
                crate::say!("{said}");
            }
            match event["type"].as_str() {
                Some("run_finished") => finished = true,
                Some("run_resumed") => finished = false,
                _ => {}
            }
        }
        seen = complete;
        if finished && !crate::fsutil::dir_lock::is_held(dir) {
            return Ok(ExitCode::SUCCESS);
        }
        match see(dir) {
            Ok(run) if run.died => {
                let note = run.died_note().unwrap_or_default();
                match json {
                    true => crate::tell!("troupe: {note}"),
                    false => crate::say!("(the run died: {note})"),
                }
                return Ok(ExitCode::FAILURE);
            }
            Ok(run)
                if run.record.completed_at.is_some() && !crate::fsutil::dir_lock::is_held(dir) =>
            {
                return Ok(ExitCode::SUCCESS);
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// An event as the run printed it on stderr: its time and its line, and
/// for the plan and the end (which the run shows as a tree and a table)
/// one line each; `None` for one the run does not print. An event troupe
/// cannot read as one of its own (an older troupe's) is shown with its
/// fields.
fn event_line(event: &serde_json::Value) -> Option<String> {
    let seconds = event["elapsed_ms"].as_f64().unwrap_or(0.0) / 1000.0;
    let Ok(read) = serde_json::from_value::<crate::run::RunEvent>(event.clone()) else {
        return Some(fields_line(event));
    };
    let said = match read {
        crate::run::RunEvent::PlanReady {
            summary,
            steps,
            levels,
            ..
        } => Some(format!(
            "plan: {summary} ({} in {})",
            crate::text::count(steps as u64, "step"),
            crate::text::count(levels as u64, "level")
        )),
        crate::run::RunEvent::RunFinished {
            status,
            completed,
            failed,
            skipped,
            unreviewed,
            seconds,
            ..
        } => Some(format!(
            "run {}: {completed} completed, {failed} failed, {skipped} skipped, {unreviewed} unreviewed; {seconds:.1} s",
            status.as_str()
        )),
        other => other.human_line(),
    };
    said.map(|line| format!("[{seconds:6.1}s] {line}"))
}

/// An event as one line: its time, its type, its fields.
fn fields_line(event: &serde_json::Value) -> String {
    let seconds = event["elapsed_ms"].as_f64().unwrap_or(0.0) / 1000.0;
    let mut line = format!("[{seconds:7.1}s] {}", event["type"].as_str().unwrap_or("?"));
    if let Some(fields) = event.as_object() {
        for (key, value) in fields {
            if ["type", "at", "elapsed_ms"].contains(&key.as_str()) {
                continue;
            }
            let shown = match value {
                serde_json::Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            line.push_str(&format!(" {key}={}", crate::text::excerpt(&shown, 80)));
        }
    }
    line
}

pub fn report(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let dir = match resolve(&args.place.results(), &args.run).map_err(UsageError::Said)? {
        Target::Run(dir) => dir,
        _ => return Err(UsageError::Said(format!("`{}` is not a run", args.run)).into()),
    };
    let run = see(&dir).map_err(UsageError::Said)?;
    let page = html::report(&run);
    match &args.output {
        Some(path) => {
            std::fs::write(path, page)
                .with_context(|| format!("cannot write {}", path.display()))?;
            crate::tell!("report written to {}", path.display());
        }
        None => crate::console::out(&page),
    }
    Ok(ExitCode::SUCCESS)
}

fn read(path: &Path) -> Result<String, UsageError> {
    crate::fsutil::read_record(path)
        .map_err(|e| UsageError::Said(format!("cannot read {}: {e}", path.display())))
}
