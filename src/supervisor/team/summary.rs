//! The table a person reads when a run ends: each step's status, attempts,
//! duration and tokens, and the totals.

use super::record::{RunRecord, StepStatus};
use crate::protocol::{SandboxLevel, SandboxReport};

pub fn summary_table(run: &RunRecord) -> String {
    let rows: Vec<[String; 5]> = run
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
            ]
        })
        .collect();
    let header = ["step", "status", "attempts", "duration", "tokens"];
    let mut out = String::from("\n");
    out.push_str(&crate::text::columns("  ", header, &rows));
    let t = &run.totals;
    out.push_str(&format!(
        "\nrun {}: {} of {} steps completed, {} failed, {} skipped, {} unreviewed; {} agents, {} tokens, {:.1} s\n",
        run.status.as_str(),
        t.completed,
        t.steps,
        t.failed,
        t.skipped,
        t.unreviewed,
        t.agents,
        t.token_usage.total,
        t.runtime_seconds
    ));
    if t.interrupted > 0 {
        out.push_str(&format!(
            "  {} steps were interrupted; `troupe run --resume {}` continues the run\n",
            t.interrupted, run.run_id
        ));
    }
    if let Some(reason) = &run.reason {
        out.push_str(&format!("  {reason}\n"));
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
