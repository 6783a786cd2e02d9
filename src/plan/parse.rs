//! Text in, a valid plan or the precise reason out.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::{Plan, Step, default_kind};
use crate::text::{excerpt, first_json_object};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("there is no JSON object in the planner's answer: {excerpt}")]
    NoJson { excerpt: String },
    /// A plan file that is not one JSON object; serde's message has the
    /// line and column.
    #[error("it is not valid JSON: {0}")]
    NotJson(String),
    #[error("{at} has the field `{field}`, which plans do not have (they have {known})")]
    UnknownField {
        at: String,
        field: String,
        known: &'static str,
    },
    #[error("the plan has no `steps` list")]
    NoStepList,
    #[error("the plan has no steps")]
    NoSteps,
    #[error("`{field}` of the plan must be {expected}")]
    PlanField {
        field: &'static str,
        expected: &'static str,
    },
    #[error("step {number}{id}: `{field}` must be {expected}")]
    StepField {
        number: usize,
        id: String,
        field: &'static str,
        expected: &'static str,
    },
    #[error("step {number} has an empty id")]
    EmptyId { number: usize },
    #[error(
        "step {number} has the id `{id}`; ids name directories, so use letters, digits, `_`, `-` and `.` only"
    )]
    BadId { number: usize, id: String },
    #[error(
        "step {number} has the id `{id}`, which starts with a dot: ids name directories, and such a name is hidden (`.` and `..` name directories already); start it with a letter or digit"
    )]
    DotId { number: usize, id: String },
    #[error(
        "step {number} has the id `{id}`, a name troupe's own records take in the run's directory (`planner`, `bases`, `repo.git`, and names ending in .json, .jsonl, .index, .diff or .git); give the step another"
    )]
    ReservedId { number: usize, id: String },
    #[error("the id `{id}` is used by steps {first} and {second}")]
    DuplicateId {
        id: String,
        first: usize,
        second: usize,
    },
    #[error("step `{step}` depends on `{dependency}`, which no step declares")]
    UnknownDependency { step: String, dependency: String },
    #[error(
        "step `{step}` depends on `{dependency}`, which did not complete; depend on completed steps or new ones"
    )]
    UnfinishedDependency { step: String, dependency: String },
    #[error(
        "step `{step}`: its output_schema is not a JSON Schema troupe can check results against: {why}"
    )]
    OutputSchema { step: String, why: String },
    #[error("step `{step}`: its powers are not what powers are: {why}")]
    Powers { step: String, why: String },
    #[error("the dependencies form a cycle: {}", .cycle.join(" -> "))]
    Cycle { cycle: Vec<String> },
}

/// A plan for a fresh run.
pub fn parse_plan(text: &str) -> Result<Plan, PlanError> {
    parse_plan_with(text, &HashSet::new(), &HashSet::new()).map(|(plan, _)| plan)
}

const PLAN_FIELDS: &[&str] = &["summary", "steps"];
const STEP_FIELDS: &[&str] = &[
    "id",
    "description",
    "type",
    "dependencies",
    "output_schema",
    "powers",
];

/// A plan file (`--plan`, `troupe validate`), written by hand or by
/// `troupe plan`: one JSON object and nothing after it, every field one a
/// plan has. The leniency of `parse_plan` is for a model's answers only.
pub fn parse_plan_file(text: &str) -> Result<Plan, PlanError> {
    let value: Map<String, Value> =
        serde_json::from_str(text).map_err(|e| PlanError::NotJson(e.to_string()))?;
    known_fields("the plan", &value, PLAN_FIELDS, "summary and steps")?;
    if let Some(Value::Array(steps)) = value.get("steps") {
        for (i, step) in steps.iter().enumerate() {
            if let Value::Object(fields) = step {
                let id = fields.get("id").and_then(Value::as_str).unwrap_or_default();
                let at = format!(
                    "step {}{}",
                    i + 1,
                    if id.is_empty() {
                        String::new()
                    } else {
                        format!(" (`{id}`)")
                    }
                );
                known_fields(
                    &at,
                    fields,
                    STEP_FIELDS,
                    "id, description, type, dependencies, output_schema and powers",
                )?;
            }
        }
    }
    plan_from(&value, &HashSet::new(), &HashSet::new()).map(|(plan, _)| plan)
}

fn known_fields(
    at: &str,
    fields: &Map<String, Value>,
    known: &[&str],
    said: &'static str,
) -> Result<(), PlanError> {
    match fields.keys().find(|key| !known.contains(&key.as_str())) {
        Some(field) => Err(PlanError::UnknownField {
            at: at.to_string(),
            field: field.clone(),
            known: said,
        }),
        None => Ok(()),
    }
}

/// A replan of a run under way: its steps may depend on the ids in `done`
/// (the completed ones); one that reuses an id in `taken` (every step the
/// run already has) is renamed `ID-2` (or the next number free), and the
/// plan's own dependencies on it follow it. Each renaming is returned, old
/// id first: a Planner that names a step as before is not a reason to end
/// the run.
pub fn parse_plan_with(
    text: &str,
    taken: &HashSet<String>,
    done: &HashSet<String>,
) -> Result<(Plan, Vec<(String, String)>), PlanError> {
    let object = first_json_object(text).ok_or_else(|| PlanError::NoJson {
        excerpt: excerpt(text, 200),
    })?;
    let value: Map<String, Value> =
        serde_json::from_str(object).map_err(|_| PlanError::NoJson {
            excerpt: excerpt(text, 200),
        })?;
    plan_from(&value, taken, done)
}

/// The plan `value` holds, checked.
fn plan_from(
    value: &Map<String, Value>,
    taken: &HashSet<String>,
    done: &HashSet<String>,
) -> Result<(Plan, Vec<(String, String)>), PlanError> {
    let summary = match value.get("summary") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(_) => {
            return Err(PlanError::PlanField {
                field: "summary",
                expected: "a string",
            });
        }
    };
    let list = match value.get("steps") {
        Some(Value::Array(list)) => list,
        Some(_) => {
            return Err(PlanError::PlanField {
                field: "steps",
                expected: "a list of steps",
            });
        }
        None => return Err(PlanError::NoStepList),
    };
    if list.is_empty() {
        return Err(PlanError::NoSteps);
    }
    let mut steps = list
        .iter()
        .enumerate()
        .map(|(i, value)| step_from(i + 1, value))
        .collect::<Result<Vec<_>, _>>()?;
    let renamed = rename_taken(&mut steps, taken);
    let plan = Plan { summary, steps };
    check_ids(&plan)?;
    check_dependencies(&plan, taken, done)?;
    if let Some(cycle) = find_cycle(&plan) {
        return Err(PlanError::Cycle { cycle });
    }
    Ok((plan, renamed))
}

/// Gives each step whose id is in `taken` the first `ID-N` (N from 2)
/// that neither the run nor the plan uses, and points the plan's
/// dependencies on it there; the renamings.
fn rename_taken(steps: &mut [Step], taken: &HashSet<String>) -> Vec<(String, String)> {
    let mut used: HashSet<String> = taken.iter().cloned().collect();
    used.extend(steps.iter().map(|s| s.id.clone()));
    let mut renamed = Vec::new();
    for step in steps.iter_mut().filter(|s| taken.contains(&s.id)) {
        let new = (2..)
            .map(|n| format!("{}-{n}", step.id))
            .find(|id| !used.contains(id))
            .unwrap_or_default();
        used.insert(new.clone());
        renamed.push((std::mem::replace(&mut step.id, new.clone()), new));
    }
    for step in steps.iter_mut() {
        for dep in &mut step.dependencies {
            if let Some((_, new)) = renamed.iter().find(|(old, _)| old == dep) {
                *dep = new.clone();
            }
        }
    }
    renamed
}

fn step_from(number: usize, value: &Value) -> Result<Step, PlanError> {
    let Value::Object(fields) = value else {
        return Err(PlanError::StepField {
            number,
            id: String::new(),
            field: "(the step)",
            expected: "an object",
        });
    };
    let id = match fields.get("id") {
        Some(Value::String(id)) => id.trim().to_string(),
        _ => {
            return Err(PlanError::StepField {
                number,
                id: String::new(),
                field: "id",
                expected: "a string",
            });
        }
    };
    if id.is_empty() {
        return Err(PlanError::EmptyId { number });
    }
    let safe = id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
    if id.starts_with('.') {
        return Err(PlanError::DotId { number, id });
    }
    if !safe || id.len() > 100 {
        return Err(PlanError::BadId { number, id });
    }
    if reserved(&id) {
        return Err(PlanError::ReservedId { number, id });
    }
    let wrong = |field, expected| PlanError::StepField {
        number,
        id: format!(" (`{id}`)"),
        field,
        expected,
    };
    let description = match fields.get("description") {
        Some(Value::String(text)) if !text.trim().is_empty() => text.clone(),
        _ => return Err(wrong("description", "a non-empty string")),
    };
    let kind = match fields.get("type") {
        None | Some(Value::Null) => default_kind(),
        Some(Value::String(kind)) => kind.clone(),
        Some(_) => return Err(wrong("type", "a string")),
    };
    let dependencies = match fields.get("dependencies") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list
            .iter()
            .map(|dep| dep.as_str().map(|d| d.trim().to_string()))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| wrong("dependencies", "a list of step ids (strings)"))?,
        Some(_) => return Err(wrong("dependencies", "a list of step ids (strings)")),
    };
    let output_schema = match fields.get("output_schema") {
        None | Some(Value::Null) => None,
        Some(schema) => match super::output::schema_error(schema) {
            None => Some(schema.clone()),
            Some(why) => {
                return Err(PlanError::OutputSchema {
                    step: id.clone(),
                    why,
                });
            }
        },
    };
    let powers = match fields.get("powers") {
        None | Some(Value::Null) => None,
        Some(value) => {
            Some(
                super::powers::Powers::from_value(value).map_err(|why| PlanError::Powers {
                    step: id.clone(),
                    why,
                })?,
            )
        }
    };
    Ok(Step {
        id,
        description,
        kind,
        dependencies,
        output_schema,
        powers,
    })
}

/// Whether `id`, as a step's directory in the run's, would be one of the
/// run's own records: a step may not be named so.
fn reserved(id: &str) -> bool {
    const OWN: [&str; 3] = ["planner", "bases", "repo.git"];
    const ENDINGS: [&str; 5] = [".json", ".jsonl", ".index", ".diff", ".git"];
    let lower = id.to_ascii_lowercase();
    OWN.contains(&lower.as_str()) || ENDINGS.iter().any(|end| lower.ends_with(end))
}

fn check_ids(plan: &Plan) -> Result<(), PlanError> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, step) in plan.steps.iter().enumerate() {
        if let Some(first) = seen.insert(&step.id, i + 1) {
            return Err(PlanError::DuplicateId {
                id: step.id.clone(),
                first,
                second: i + 1,
            });
        }
    }
    Ok(())
}

fn check_dependencies(
    plan: &Plan,
    taken: &HashSet<String>,
    done: &HashSet<String>,
) -> Result<(), PlanError> {
    let ids: HashSet<&str> = plan.steps.iter().map(|s| s.id.as_str()).collect();
    for step in &plan.steps {
        for dep in &step.dependencies {
            if ids.contains(dep.as_str()) || done.contains(dep) {
                continue;
            }
            let (step, dependency) = (step.id.clone(), dep.clone());
            return Err(if taken.contains(dep) {
                PlanError::UnfinishedDependency { step, dependency }
            } else {
                PlanError::UnknownDependency { step, dependency }
            });
        }
    }
    Ok(())
}

/// A cycle among the plan's own steps, as the ids along it with the first
/// repeated at the end, or `None`. Iterative, so a long chain cannot
/// overflow the stack.
fn find_cycle(plan: &Plan) -> Option<Vec<String>> {
    let deps = plan.dependency_indices();
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    let mut mark = vec![Mark::New; plan.steps.len()];
    for root in 0..plan.steps.len() {
        if mark[root] != Mark::New {
            continue;
        }
        let mut path: Vec<(usize, usize)> = vec![(root, 0)];
        mark[root] = Mark::OnPath;
        while let Some(top) = path.last_mut() {
            let node = top.0;
            let Some(&dep) = deps[node].get(top.1) else {
                mark[node] = Mark::Done;
                path.pop();
                continue;
            };
            top.1 += 1;
            match mark[dep] {
                Mark::New => {
                    mark[dep] = Mark::OnPath;
                    path.push((dep, 0));
                }
                Mark::OnPath => {
                    let from = path.iter().position(|&(n, _)| n == dep).unwrap_or(0);
                    let mut cycle: Vec<String> = path[from..]
                        .iter()
                        .map(|&(n, _)| plan.steps[n].id.clone())
                        .collect();
                    cycle.push(plan.steps[dep].id.clone());
                    return Some(cycle);
                }
                Mark::Done => {}
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(steps: &str) -> Result<Plan, PlanError> {
        parse_plan(&format!("{{\"summary\": \"s\", \"steps\": {steps}}}"))
    }

    #[test]
    fn a_cycle_is_named() {
        let err = plan(
            r#"[{"id":"a","description":"x","dependencies":["c"]},
                          {"id":"b","description":"x","dependencies":["a"]},
                          {"id":"c","description":"x","dependencies":["b"]}]"#,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "the dependencies form a cycle: a -> c -> b -> a"
        );
    }

    #[test]
    fn field_types_are_checked() {
        let err = plan(r#"[{"id":"a","description":"x","dependencies":"b"}]"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "step 1 (`a`): `dependencies` must be a list of step ids (strings)"
        );
        let err = plan(r#"[{"id":3,"description":"x"}]"#).unwrap_err();
        assert_eq!(err.to_string(), "step 1: `id` must be a string");
    }

    #[test]
    fn replans_may_depend_on_done_steps_and_a_reused_id_is_renamed() {
        let done: HashSet<String> = ["step_1".to_string()].into();
        let taken: HashSet<String> = ["step_1".to_string(), "step_2".to_string()].into();
        let text = r#"{"steps":[{"id":"step_3","description":"x","dependencies":["step_1"]}]}"#;
        assert!(parse_plan_with(text, &taken, &done).is_ok());
        // A taken id is renamed, and the plan's own dependencies follow.
        let text = r#"{"steps":[{"id":"step_1","description":"x"},{"id":"step_1-2","description":"y"},{"id":"z","description":"z","dependencies":["step_1"]}]}"#;
        let (plan, renamed) = parse_plan_with(text, &taken, &done).unwrap();
        assert_eq!(renamed, [("step_1".to_string(), "step_1-3".to_string())]);
        assert_eq!(plan.steps[0].id, "step_1-3");
        assert_eq!(plan.steps[2].dependencies, ["step_1-3"]);
        let text = r#"{"steps":[{"id":"step_3","description":"x","dependencies":["step_2"]}]}"#;
        let unfinished = parse_plan_with(text, &taken, &done);
        assert!(matches!(
            unfinished,
            Err(PlanError::UnfinishedDependency { .. })
        ));
    }
}
