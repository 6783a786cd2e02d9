//! `finish_task`: the worker's report, which ends its run.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{About, Finish, ToolContext, ToolError, ToolOutput, TypedTool};

pub(super) struct FinishTask;

impl TypedTool for FinishTask {
    type Args = Args;
    const ABOUT: About = About::alone("finish_task", DESCRIPTION);

    async fn run(&self, args: Args, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let mut output = ToolOutput::ok(
            json!({
                "success": true,
                "message": "Task finished; the sub-agent exits now",
                "will_terminate": true
            })
            .to_string(),
        );
        output.finish = Some(Finish {
            success: args.success,
            summary: args.summary,
        });
        Ok(output)
    }
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
