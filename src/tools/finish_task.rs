//! `finish_task`: the worker's report, which ends its run; for a step with
//! an `output_schema`, with the step's typed `result`.

use futures_util::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{About, Finish, Tool, ToolContext, ToolError, ToolOutput, TypedTool};

pub(super) struct FinishTask;

impl TypedTool for FinishTask {
    type Args = Args;
    const ABOUT: About = About::alone("finish_task", DESCRIPTION);

    async fn run(&self, args: Args, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(finished(Finish {
            success: args.success,
            summary: args.summary,
            result: None,
        }))
    }
}

/// The tool's answer, which ends the loop with `finish`.
fn finished(finish: Finish) -> ToolOutput {
    let mut output = ToolOutput::ok(
        json!({
            "success": true,
            "message": "Task finished; the sub-agent exits now",
            "will_terminate": true
        })
        .to_string(),
    );
    output.finish = Some(finish);
    output
}

/// `finish_task` of a step with an `output_schema`: `result` is required
/// and shown to the model with the step's schema. The agent does not
/// judge it; troupe checks it when the worker has ended, and an invalid
/// one comes back as a rejection.
pub(super) struct FinishWithResult {
    schema: Value,
}

impl FinishWithResult {
    pub(super) fn new(schema: Value) -> Self {
        FinishWithResult { schema }
    }
}

impl Tool for FinishWithResult {
    fn about(&self) -> About {
        About::alone("finish_task", DESCRIPTION_WITH_RESULT)
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "success": {"type": "boolean", "description": "Whether the task was completed"},
                "summary": {"type": "string", "description": "What was done, the files produced, key findings (50-200 words)"},
                "result": self.schema,
            },
            "required": ["success", "summary", "result"],
            "additionalProperties": false
        })
    }

    fn call<'a>(
        &'a self,
        arguments: &'a str,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let args: WithResult = super::parse_args("finish_task", arguments)?;
            Ok(finished(Finish {
                success: args.success,
                summary: args.summary,
                result: args.result,
            }))
        })
    }
}

const DESCRIPTION_WITH_RESULT: &str = "Report that you are done and exit. success: whether the task was completed; summary: what you did, which files you produced, what you found; result: the step's result, a JSON value of the shape its schema gives (troupe checks it, and sends it back to you if it does not match). You cannot continue after this call.";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WithResult {
    success: bool,
    summary: String,
    result: Option<Value>,
}

/// What the model is told of the tool.
const DESCRIPTION: &str = "Report that you are done and exit. success: whether the task was completed; summary: what you did, which files you produced, what you found. You cannot continue after this call.";

/// What the model sends.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct Args {
    /// Whether the task was completed
    success: bool,
    /// What was done, the files produced, key findings (50-200 words)
    summary: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_is_shown_the_steps_schema_as_the_result_it_must_give() {
        let schema = json!({"type": "object", "required": ["urls"]});
        let tool = FinishWithResult::new(schema.clone());
        let parameters = tool.parameters();
        assert_eq!(parameters["properties"]["result"], schema);
        assert_eq!(
            parameters["required"],
            json!(["success", "summary", "result"])
        );
    }
}
