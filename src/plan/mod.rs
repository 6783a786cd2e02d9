//! The plan: `{summary, steps: [{id, description, type, dependencies,
//! output_schema?, powers?}]}`, parsed strictly from what a Planner model
//! wrote.
//!
//! Strict means an invalid plan is an error with the reason, never silently
//! repaired: unique non-empty ids, every dependency declared, no cycle, at
//! least one step, fields of the right types. Only the wrapping is
//! forgiven: the first JSON object is taken out of a Markdown fence or
//! surrounding prose.

mod levels;
pub mod output;
mod parse;
pub mod powers;
#[cfg(test)]
mod proptests;
mod render;
pub mod worst_case;

use serde::{Deserialize, Serialize};

pub use levels::levels;
pub use parse::{PlanError, parse_plan, parse_plan_file, parse_plan_with};
pub use render::render_tree;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    #[serde(default)]
    pub summary: String,
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub id: String,
    pub description: String,
    /// The planner's label (FILE_WRITE, COMMAND, ANALYSIS, ...); shown, not
    /// interpreted.
    #[serde(rename = "type", default = "default_kind")]
    pub kind: String,
    #[serde(default)]
    pub dependencies: Vec<String>,
    /// The JSON Schema of the `result` its worker must return
    /// (`plan::output`); without it, the worker's summary is its result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
    /// What its worker may do, when less than every worker may.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub powers: Option<powers::Powers>,
}

/// The JSON Schema of a plan, for endpoints that hold answers to one
/// (`response_format`); the strict parse stays the judge either way.
pub fn plan_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "summary": {"type": "string"},
            "steps": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "description": {"type": "string"},
                        "type": {"type": "string"},
                        "dependencies": {"type": "array", "items": {"type": "string"}},
                        "output_schema": {"type": "object"},
                        "powers": {"type": "object"}
                    },
                    "required": ["id", "description", "type", "dependencies"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["summary", "steps"],
        "additionalProperties": false
    })
}

fn default_kind() -> String {
    "task".to_string()
}

impl Plan {
    pub fn step(&self, id: &str) -> Option<&Step> {
        self.steps.iter().find(|step| step.id == id)
    }

    /// For each step, the indices of the steps it depends on within this
    /// plan; dependencies outside it (a replan's completed steps) are left
    /// out.
    fn dependency_indices(&self) -> Vec<Vec<usize>> {
        let index: std::collections::HashMap<&str, usize> = self
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| (s.id.as_str(), i))
            .collect();
        self.steps
            .iter()
            .map(|s| {
                s.dependencies
                    .iter()
                    .filter_map(|d| index.get(d.as_str()).copied())
                    .collect()
            })
            .collect()
    }
}
