//! The table a person reads when a run ends: each step's status, attempts,
//! duration and tokens, and the totals.

use crate::protocol::{SandboxLevel, SandboxReport};
use crate::record::{RunRecord, RunStatus, StepStatus};
use crate::text::count;

pub fn summary_table(run: &RunRecord) -> String {
    let rows: Vec<[String; 6]> = run
        .steps
        .iter()
        .filter(|s| s.status != StepStatus::Replaced)
        .map(|s| {
            [
                s.id.clone(),
                s.status.as_str().to_string(),
                s.attempts.len().to_string(),
                s.duration_seconds
                    .map(|d| format!("{d:.1} s"))
                    .unwrap_or_else(|| "-".to_string()),
                s.stats.token_usage.total.to_string(),
                s.stats.token_usage.dollars(),
            ]
        })
        .collect();
    let header = ["step", "status", "attempts", "duration", "tokens", "cost"];
    let mut out = String::from("\n");
    if !rows.is_empty() {
        // The cost column only where prices made one.
        let table = match run.totals.token_usage.cost_micros {
            0 => {
                let rows: Vec<[String; 5]> = rows
                    .iter()
                    .map(|row| std::array::from_fn(|i| row[i].clone()))
                    .collect();
                let header = std::array::from_fn(|i| header[i]);
                crate::text::columns("  ", header, &rows)
            }
            _ => crate::text::columns("  ", header, &rows),
        };
        out.push_str(&table);
        out.push('\n');
    }
    let t = &run.totals;
    out.push_str(&format!(
        "run {}: {} of {} completed, {} failed, {} skipped, {} unreviewed; {}, {}, {:.1} s\n",
        run.status.as_str(),
        t.completed,
        count(t.steps as u64, "step"),
        t.failed,
        t.skipped,
        t.unreviewed,
        count(t.agents, "agent"),
        t.token_usage.spent(),
        t.runtime_seconds
    ));
    if t.interrupted > 0 {
        out.push_str(&format!(
            "  {} interrupted; `{}` continues the run\n",
            count(t.interrupted as u64, "step"),
            run.resume_command()
        ));
    }
    if let Some(reason) = &run.reason {
        out.push_str(&format!("  {reason}\n"));
    }
    if run.status == RunStatus::LimitReached {
        out.push_str(&format!(
            "  `{}` continues the run, with a higher limit to keep one (what was spent counts)\n",
            run.resume_command()
        ));
    }
    if let Some(sandbox) = &t.sandbox {
        out.push_str(&format!("  sandbox: {}\n", describe_sandbox(sandbox)));
    }
    out
}

fn describe_sandbox(report: &SandboxReport) -> String {
    let level = match report.status {
        SandboxLevel::FullyEnforced => "fully enforced",
        SandboxLevel::PartiallyEnforced => "partially enforced",
        SandboxLevel::NotEnforced => "not enforced",
        SandboxLevel::Off => "off",
    };
    let mut text = level.to_string();
    if let Some(abi) = report.abi {
        text.push_str(&format!(" (Landlock ABI {abi})"));
    }
    if !report.note.is_empty() && report.status != SandboxLevel::Off {
        text.push_str(&format!(": {}", report.note));
    }
    text
}
