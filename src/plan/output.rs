//! A step's `output_schema`: the JSON Schema its worker's `result` must
//! match. Checked as a schema when the plan is read, and against the
//! result when the worker reports it: by the parent, which believes only
//! what it can check. No schema reaches out for a remote `$ref`.

use std::time::Duration;

use serde_json::Value;

/// The most validation errors said back to a worker at once.
const ERRORS_SAID: usize = 10;

/// The largest result troupe takes, as JSON: a dependent's brief and the
/// run's record carry it whole.
pub const MAX_RESULT: usize = 256 * 1024;

/// `result` as the run's record keeps it: one over `MAX_RESULT` is
/// refused, and stays in its agent's own `result.json` alone, not twice
/// more in `run.json`.
pub fn recorded(result: Option<&Value>) -> Option<Value> {
    result
        .filter(|r| serde_json::to_string(r).is_ok_and(|text| text.len() <= MAX_RESULT))
        .cloned()
}

/// Why `schema` is not a JSON Schema troupe can check results against.
pub fn schema_error(schema: &Value) -> Option<String> {
    if !schema.is_object() {
        return Some("it must be a JSON Schema object".to_string());
    }
    validator(schema).err()
}

/// The most steps a backtracking pattern may take on one string, for a
/// schema whose patterns the linear engine cannot run (look-around,
/// back-references): past it, the string does not match.
const BACKTRACK_LIMIT: usize = 100_000;

/// A validator of `schema`. Its patterns run on the `regex` crate's
/// engine, linear in the string, where they can: a worker's result is
/// checked by the parent, and a backtracking pattern over a long string
/// held a run's thread for 15 s. A pattern only a backtracking engine
/// takes gets one with a bounded number of steps.
fn validator(schema: &Value) -> Result<jsonschema::Validator, String> {
    jsonschema::options()
        .with_pattern_options(jsonschema::PatternOptions::regex())
        .build(schema)
        .or_else(|_| {
            jsonschema::options()
                .with_pattern_options(
                    jsonschema::PatternOptions::fancy_regex().backtrack_limit(BACKTRACK_LIMIT),
                )
                .build(schema)
        })
        .map_err(|e| e.to_string())
}

/// What is wrong with `result` under `schema`, each error with where in
/// the result it is; empty when it matches. A missing result is one
/// error.
pub fn result_errors(schema: &Value, result: Option<&Value>) -> Vec<String> {
    let Some(result) = result else {
        return vec![
            "finish_task was called without `result`; this step must return one that matches its output_schema".to_string(),
        ];
    };
    let size = serde_json::to_string(result).map_or(usize::MAX, |text| text.len());
    if size > MAX_RESULT {
        return vec![format!(
            "the result is {size} bytes of JSON, more than the {MAX_RESULT} troupe takes; keep it small, and put what is bulky in a file among your deliverables, named in the result"
        )];
    }
    let validator = match validator(schema) {
        Ok(validator) => validator,
        Err(e) => return vec![format!("the step's output_schema cannot be used: {e}")],
    };
    validator
        .iter_errors(result)
        .take(ERRORS_SAID)
        .map(|e| {
            let at = e.instance_path().to_string();
            match at.is_empty() {
                true => format!("the result: {e}"),
                false => format!("at {at}: {e}"),
            }
        })
        .collect()
}

/// How long troupe spends checking one result before it gives up on it.
pub const CHECK_BUDGET: Duration = Duration::from_secs(2);

/// `result_errors`, worked out off the run's thread and given up after
/// `budget`: a schema's patterns, bounded one string at a time, can still
/// add up over thousands of strings, and the run's other steps (and its
/// deadline) wait for nothing of it. The check given up on goes on in the
/// background until its bound ends it; the result is refused.
pub async fn result_errors_within(
    schema: &Value,
    result: Option<&Value>,
    budget: Duration,
) -> Vec<String> {
    let (schema, result) = (schema.clone(), result.cloned());
    let check = tokio::task::spawn_blocking(move || result_errors(&schema, result.as_ref()));
    match tokio::time::timeout(budget, check).await {
        Ok(Ok(errors)) => errors,
        Ok(Err(e)) => vec![format!("troupe could not check the result: {e}")],
        Err(_) => vec![format!(
            "troupe gave up checking the result against the step's output_schema after {} s; return a smaller result, with fewer and shorter strings",
            budget.as_secs_f64()
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // Regression (the fourth adversarial trial): a Planner-written
    // pattern that backtracks held the run's thread for 13-15 s over a
    // result of 300 strings.
    #[test]
    fn a_backtracking_pattern_is_bounded() {
        // A back-reference: only a backtracking engine runs it.
        let schema = json!({"type": "array", "items": {"type": "string", "pattern": "^(a+)+\\1$"}});
        assert!(schema_error(&schema).is_none());
        let strings: Vec<String> = (0..300).map(|_| format!("{}c", "a".repeat(40))).collect();
        let errors = result_errors(&schema, Some(&json!(strings)));
        assert!(!errors.is_empty());
        // One the linear engine takes is linear.
        let schema = json!({"type": "array", "items": {"type": "string", "pattern": "^(a+)+$"}});
        assert!(!result_errors(&schema, Some(&json!(strings))).is_empty());
    }

    #[tokio::test]
    async fn a_check_past_its_budget_is_given_up_off_the_run_s_thread() {
        let schema = json!({"type": "array", "items": {"type": "string", "pattern": "^(a+)+\\1$"}});
        let strings: Vec<String> = (0..3000).map(|_| format!("{}c", "a".repeat(40))).collect();
        let errors =
            result_errors_within(&schema, Some(&json!(strings)), Duration::from_millis(1)).await;
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("troupe gave up checking"), "{errors:?}");
        let fine = result_errors_within(&schema, Some(&json!([])), CHECK_BUDGET).await;
        assert!(fine.is_empty(), "{fine:?}");
    }

    #[test]
    fn a_result_is_checked_against_its_schema_with_where_it_is_wrong() {
        let schema = json!({"type": "object", "properties": {"urls": {"type": "array", "items": {"type": "string"}}}, "required": ["urls"]});
        assert!(schema_error(&schema).is_none());
        assert!(result_errors(&schema, Some(&json!({"urls": ["a"]}))).is_empty());
        let errors = result_errors(&schema, Some(&json!({"urls": [1]})));
        assert_eq!(errors, ["at /urls/0: 1 is not of type \"string\""]);
        assert_eq!(result_errors(&schema, None).len(), 1);
        let bulky = json!({"urls": vec!["x".repeat(1000); 300]});
        let errors = result_errors(&schema, Some(&bulky));
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].contains("more than the 262144 troupe takes"),
            "{errors:?}"
        );
    }

    #[test]
    fn a_schema_that_is_not_one_is_said_so() {
        assert!(schema_error(&json!({"type": 12})).is_some());
        assert!(schema_error(&json!("object")).is_some());
        let remote = json!({"$ref": "http://127.0.0.1:9/schema.json"});
        assert!(schema_error(&remote).is_some(), "no remote reference");
    }
}
