//! The DAG of a plan or run as Graphviz, Mermaid, or an SVG drawn here:
//! steps in columns by level, an edge from each dependency, each node
//! coloured by its status.

use crate::supervisor::plan::{Plan, levels};
use crate::supervisor::team::StepStatus;

/// A node's status, or `None` for a plan not yet run.
pub type StatusOf<'a> = &'a dyn Fn(&str) -> Option<StepStatus>;

fn fill(status: Option<StepStatus>) -> &'static str {
    match status {
        Some(StepStatus::Completed) => "#c8e6c9",
        Some(StepStatus::Failed | StepStatus::Unreviewed) => "#ffcdd2",
        Some(StepStatus::Running | StepStatus::Reviewing) => "#fff3c4",
        Some(StepStatus::Skipped | StepStatus::Interrupted | StepStatus::Replaced) => "#e0e0e0",
        Some(StepStatus::Pending) | None => "#e3f2fd",
    }
}

pub fn dot(plan: &Plan, status: StatusOf<'_>) -> String {
    let mut out = String::from(
        "digraph plan {\n  rankdir=LR;\n  node [shape=box, style=\"rounded,filled\", fontname=\"sans-serif\"];\n",
    );
    for step in &plan.steps {
        let state = status(&step.id);
        let label = match state {
            Some(s) => format!("{}\\n{}", step.id, s.as_str()),
            None => step.id.clone(),
        };
        out.push_str(&format!(
            "  \"{}\" [label=\"{}\", tooltip=\"{}\", fillcolor=\"{}\"];\n",
            step.id,
            label,
            dot_escape(&step.description),
            fill(state)
        ));
    }
    for step in &plan.steps {
        for dep in &step.dependencies {
            out.push_str(&format!("  \"{dep}\" -> \"{}\";\n", step.id));
        }
    }
    out.push_str("}\n");
    out
}

fn dot_escape(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', " ")
}

pub fn mermaid(plan: &Plan, status: StatusOf<'_>) -> String {
    let node = |id: &str| id.replace(|c: char| !c.is_ascii_alphanumeric(), "_");
    let mut out = String::from("flowchart LR\n");
    for step in &plan.steps {
        let label = mermaid_escape(&step.description);
        let class = status(&step.id)
            .map(|s| format!(":::{}", s.as_str()))
            .unwrap_or_default();
        out.push_str(&format!(
            "  {}[\"{}: {}\"]{class}\n",
            node(&step.id),
            step.id,
            label
        ));
    }
    for step in &plan.steps {
        for dep in &step.dependencies {
            out.push_str(&format!("  {} --> {}\n", node(dep), node(&step.id)));
        }
    }
    for state in StepStatus::ALL {
        out.push_str(&format!(
            "  classDef {} fill:{}\n",
            state.as_str(),
            fill(Some(state))
        ));
    }
    out
}

fn mermaid_escape(text: &str) -> String {
    crate::text::excerpt(&text.replace('"', "'").replace('\n', " "), 60)
}

const NODE_W: usize = 180;
const NODE_H: usize = 54;
const GAP_X: usize = 70;
const GAP_Y: usize = 24;
const MARGIN: usize = 20;

/// The DAG as an inline SVG element (no namespace URL: it lives inside an
/// HTML page), one `<g class="node" data-step=… data-status=…>` per step.
pub fn svg(plan: &Plan, status: StatusOf<'_>) -> String {
    let levels = levels(plan);
    let mut place = vec![(0usize, 0usize); plan.steps.len()];
    for (column, level) in levels.iter().enumerate() {
        for (row, &index) in level.iter().enumerate() {
            place[index] = (
                MARGIN + column * (NODE_W + GAP_X),
                MARGIN + row * (NODE_H + GAP_Y),
            );
        }
    }
    let rows = levels.iter().map(Vec::len).max().unwrap_or(1);
    let width = 2 * MARGIN + levels.len() * (NODE_W + GAP_X) - GAP_X;
    let height = 2 * MARGIN + rows * (NODE_H + GAP_Y) - GAP_Y;
    let mut out = format!(
        "<svg class=\"dag\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\">\n\
         <defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto\">\
         <path d=\"M0,0 L10,5 L0,10 z\" fill=\"#607d8b\"/></marker></defs>\n"
    );
    let index: std::collections::HashMap<&str, usize> = plan
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    for (i, step) in plan.steps.iter().enumerate() {
        for dep in &step.dependencies {
            let Some(&d) = index.get(dep.as_str()) else {
                continue;
            };
            let (x1, y1) = (place[d].0 + NODE_W, place[d].1 + NODE_H / 2);
            let (x2, y2) = (place[i].0, place[i].1 + NODE_H / 2);
            let mid = (x1 + x2) / 2;
            out.push_str(&format!(
                "<path class=\"edge\" data-from=\"{}\" data-to=\"{}\" d=\"M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}\" fill=\"none\" stroke=\"#607d8b\" stroke-width=\"1.5\" marker-end=\"url(#arrow)\"/>\n",
                xml(dep),
                xml(&step.id)
            ));
        }
    }
    for (i, step) in plan.steps.iter().enumerate() {
        let (x, y) = place[i];
        let state = status(&step.id);
        let shown = state.map_or_else(|| step.kind.clone(), |s| s.as_str().to_string());
        out.push_str(&format!(
            "<g class=\"node\" data-step=\"{id}\" data-status=\"{st}\"><title>{title}</title>\
             <rect x=\"{x}\" y=\"{y}\" width=\"{NODE_W}\" height=\"{NODE_H}\" rx=\"8\" fill=\"{fill}\" stroke=\"#455a64\"/>\
             <text x=\"{tx}\" y=\"{ty1}\" font-weight=\"bold\">{id}</text>\
             <text x=\"{tx}\" y=\"{ty2}\" font-size=\"12\">{shown}</text></g>\n",
            id = xml(&step.id),
            st = state.map_or("", StepStatus::as_str),
            title = xml(&step.description),
            fill = fill(state),
            tx = x + 10,
            ty1 = y + 22,
            ty2 = y + 42,
            shown = xml(&crate::text::excerpt(&shown, 24)),
        ));
    }
    out.push_str("</svg>\n");
    out
}

/// Text safe inside XML or HTML, in content and in attributes.
pub fn xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
