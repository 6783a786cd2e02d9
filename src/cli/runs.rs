//! `troupe runs`: the runs of a workspace, newest first.

use std::process::ExitCode;

use clap::Args;

use super::agents::Place;
use crate::inspect::conversation::Render;
use crate::inspect::runs::records;
use crate::paint::Painter;
use crate::record::{ApplyState, RunStatus};
use crate::text::{columns, excerpt};

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  troupe runs\n  troupe runs --workspace ./repo --json\n  troupe show last        # the newest run"
)]
pub struct RunsArgs {
    /// One JSON object per run (its run.json), one per line; a run that
    /// died has "status": "died" and run.json's word in "recorded_status".
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub place: Place,
}

pub fn runs(args: RunsArgs) -> anyhow::Result<ExitCode> {
    let results = args.place.results();
    let runs = records(&results);
    if args.json {
        for run in &runs {
            crate::say!("{}", serde_json::to_string(&run.to_json()?)?);
        }
        return Ok(ExitCode::SUCCESS);
    }
    if runs.is_empty() {
        crate::tell!("troupe: no runs in {}", results.display());
        return Ok(ExitCode::SUCCESS);
    }
    let render = Render {
        painter: Painter::for_stdout(),
        full: false,
    };
    let rows: Vec<[String; 8]> = runs
        .iter()
        .map(|seen| {
            let run = &seen.record;
            let t = &run.totals;
            [
                run.run_id.clone(),
                render.status(&seen.state()),
                format!("{}/{}", t.completed, t.steps),
                t.agents.to_string(),
                t.token_usage.total.to_string(),
                t.token_usage.dollars(),
                format!("{:.1} s", t.runtime_seconds),
                excerpt(&run.goal.replace('\n', " "), 60),
            ]
        })
        .collect();
    let header = [
        "run", "status", "steps", "agents", "tokens", "cost", "duration", "goal",
    ];
    crate::console::out(&columns("", header, &rows));
    let mut notes: Vec<String> = runs
        .iter()
        .filter_map(|seen| {
            let note = seen.died_note()?;
            Some(format!("{} died: {note}\n", seen.record.run_id))
        })
        .collect();
    // A completed run whose result is not in the workspace is named, as
    // a died one is: nothing else in the table would say it.
    notes.extend(runs.iter().filter_map(|seen| {
        let run = &seen.record;
        let due = run.status == RunStatus::Completed
            && run
                .apply
                .as_ref()
                .is_some_and(|a| a.state != ApplyState::Applied);
        let note = crate::inspect::run::apply_note(run).filter(|_| due)?;
        Some(format!("{} {note}\n", run.run_id))
    }));
    if !notes.is_empty() {
        crate::console::out(&format!("\n{}", notes.concat()));
    }
    Ok(ExitCode::SUCCESS)
}
