//! A plan as people read it: its levels, each step with its type and what
//! it waits for, and its status when a run is under way.

use super::{Plan, levels};

/// The plan as an indented tree by level. `status` gives the text shown
/// after each step (its run status), or nothing.
pub fn render_tree(plan: &Plan, status: impl Fn(&str) -> Option<String>) -> String {
    let levels = levels(plan);
    let mut out = String::new();
    let title = if plan.summary.is_empty() {
        "(no summary)"
    } else {
        plan.summary.as_str()
    };
    out.push_str(&format!(
        "Plan: {title}\n{} in {}\n",
        crate::text::count(plan.steps.len() as u64, "step"),
        crate::text::count(levels.len() as u64, "level")
    ));
    let width = plan
        .steps
        .iter()
        .map(|s| s.id.chars().count())
        .max()
        .unwrap_or(0);
    for (n, level) in levels.iter().enumerate() {
        out.push_str(&format!("  level {}\n", n + 1));
        for &i in level {
            let step = &plan.steps[i];
            let mut line = format!(
                "    {:width$}  {} [{}]",
                step.id,
                step.description.trim(),
                step.kind
            );
            if !step.dependencies.is_empty() {
                line.push_str(&format!(" <- {}", step.dependencies.join(", ")));
            }
            if let Some(status) = status(&step.id) {
                line.push_str(&format!("  ({status})"));
            }
            out.push_str(&line);
            out.push('\n');
            let pad = " ".repeat(width + 6);
            if let Some(powers) = &step.powers {
                out.push_str(&format!("{pad}powers: {}\n", powers.describe()));
            }
            if step.output_schema.is_some() {
                out.push_str(&format!("{pad}returns a result (output_schema)\n"));
            }
        }
    }
    out
}
