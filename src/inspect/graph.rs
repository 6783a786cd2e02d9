//! The DAG of a plan or run as Graphviz, Mermaid, or an SVG drawn here:
//! steps in columns by level, an edge from each dependency, each node
//! coloured by its status.

use crate::plan::{Plan, levels};
use crate::record::StepStatus;

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

/// A node is as wide as its longest id needs, within these bounds; an id
/// longer than the widest node is cut, whole in the node's tooltip.
const MIN_NODE_W: usize = 180;
const MAX_NODE_W: usize = 420;
/// What one character of an id takes, in pixels, at least: ids are drawn
/// in the reader's monospace font at 14 px, whose characters are about
/// 0.6 em (8.4 px) wide in every common monospace font, so the box fits
/// the id whichever font the browser picks.
const CHAR_W: usize = 9;
const NODE_H: usize = 54;
const GAP_X: usize = 70;
const GAP_Y: usize = 24;
const MARGIN: usize = 20;

/// The DAG as an inline SVG element (no namespace URL: it lives inside an
/// HTML page), one `<g class="node" data-step=… data-status=…>` per step.
/// Edges leave and enter a node at ports of their own, spread over its
/// side, so that arrows fanning into one step stay apart.
pub fn svg(plan: &Plan, status: StatusOf<'_>) -> String {
    let levels = levels(plan);
    let longest = plan
        .steps
        .iter()
        .map(|s| s.id.chars().count())
        .max()
        .unwrap_or(0);
    let node_w = (longest * CHAR_W + 20).clamp(MIN_NODE_W, MAX_NODE_W);
    let mut place = vec![(0usize, 0usize); plan.steps.len()];
    for (column, level) in levels.iter().enumerate() {
        for (row, &index) in level.iter().enumerate() {
            place[index] = (
                MARGIN + column * (node_w + GAP_X),
                MARGIN + row * (NODE_H + GAP_Y),
            );
        }
    }
    let rows = levels.iter().map(Vec::len).max().unwrap_or(1);
    let width = 2 * MARGIN + levels.len() * (node_w + GAP_X) - GAP_X;
    let height = 2 * MARGIN + rows * (NODE_H + GAP_Y) - GAP_Y;
    let mut out = format!(
        "<svg class=\"dag\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\">\n\
         <defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto\">\
         <path d=\"M0,0 L10,5 L0,10 z\" fill=\"#607d8b\"/></marker></defs>\n"
    );
    let edges = edges(plan, &place);
    let port = |count: usize, nth: usize| NODE_H * (nth + 1) / (count + 1);
    for edge in &edges {
        let (from, to) = (edge.from, edge.to);
        let x1 = place[from].0 + node_w;
        let y1 = place[from].1 + port(edge.outs, edge.out_nth);
        let x2 = place[to].0;
        let y2 = place[to].1 + port(edge.ins, edge.in_nth);
        let mid = (x1 + x2) / 2;
        out.push_str(&format!(
            "<path class=\"edge\" data-from=\"{}\" data-to=\"{}\" d=\"M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}\" fill=\"none\" stroke=\"#607d8b\" stroke-width=\"1.5\" marker-end=\"url(#arrow)\"/>\n",
            xml(&plan.steps[from].id),
            xml(&plan.steps[to].id)
        ));
    }
    let fits = (node_w - 20) / CHAR_W;
    for (i, step) in plan.steps.iter().enumerate() {
        let (x, y) = place[i];
        let state = status(&step.id);
        let shown = state.map_or_else(|| step.kind.clone(), |s| s.as_str().to_string());
        out.push_str(&format!(
            "<g class=\"node\" data-step=\"{id}\" data-status=\"{st}\"><title>{id}: {title}</title>\
             <rect x=\"{x}\" y=\"{y}\" width=\"{node_w}\" height=\"{NODE_H}\" rx=\"8\" fill=\"{fill}\" stroke=\"#455a64\"/>\
             <text x=\"{tx}\" y=\"{ty1}\" font-family=\"monospace\" font-size=\"14\" font-weight=\"bold\">{shown_id}</text>\
             <text x=\"{tx}\" y=\"{ty2}\" font-family=\"monospace\" font-size=\"12\">{shown}</text></g>\n",
            id = xml(&step.id),
            shown_id = xml(&cut(&step.id, fits)),
            st = state.map_or("", StepStatus::as_str),
            title = xml(&step.description),
            fill = fill(state),
            tx = x + 10,
            ty1 = y + 22,
            ty2 = y + 42,
            shown = xml(&cut(&shown, fits)),
        ));
    }
    out.push_str("</svg>\n");
    out
}

/// One dependency drawn: from and to (step indices), and which of its
/// node's outgoing and incoming edges it is.
struct Edge {
    from: usize,
    to: usize,
    outs: usize,
    out_nth: usize,
    ins: usize,
    in_nth: usize,
}

/// Two indices: a dependency's from and to, or a node and a position.
type Pair = (usize, usize);

fn edges(plan: &Plan, place: &[(usize, usize)]) -> Vec<Edge> {
    let index: std::collections::HashMap<&str, usize> = plan
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    let pairs: Vec<(usize, usize)> = plan
        .steps
        .iter()
        .enumerate()
        .flat_map(|(to, step)| {
            step.dependencies
                .iter()
                .filter_map(|dep| index.get(dep.as_str()).map(|&from| (from, to)))
                .collect::<Vec<_>>()
        })
        .collect();
    // A node's ports go top to bottom in the order of the nodes at the
    // other end, so that its edges do not cross each other.
    let nth_by = |key: &dyn Fn(&Pair) -> Pair| {
        let mut order: Vec<usize> = (0..pairs.len()).collect();
        order.sort_by_key(|&i| key(&pairs[i]));
        let mut nth = vec![0; pairs.len()];
        let mut count = vec![0; plan.steps.len()];
        for i in order {
            let node = key(&pairs[i]).0;
            nth[i] = count[node];
            count[node] += 1;
        }
        (nth, count)
    };
    let (out_nth, outs) = nth_by(&|&(from, to)| (from, place[to].1));
    let (in_nth, ins) = nth_by(&|&(from, to)| (to, place[from].1));
    pairs
        .iter()
        .enumerate()
        .map(|(i, &(from, to))| Edge {
            from,
            to,
            outs: outs[from],
            out_nth: out_nth[i],
            ins: ins[to],
            in_nth: in_nth[i],
        })
        .collect()
}

/// `text` cut to `chars` characters, with `…` where it was cut.
fn cut(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars.saturating_sub(1)) {
        Some((end, _)) if text.chars().count() > chars => format!("{}…", &text[..end]),
        _ => text.to_string(),
    }
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
