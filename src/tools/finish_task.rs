//! `finish_task`: the worker's report, which ends its run.

use futures_util::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::schema::schema;
use super::{Finish, Tool, ToolContext, ToolError, ToolOutput, parse_args};

pub struct FinishTask;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// Whether the task was completed
    success: bool,
    /// What was done, the files produced, key findings (50-200 words)
    summary: String,
}

impl Tool for FinishTask {
    fn name(&self) -> &'static str {
        "finish_task"
    }

    fn description(&self) -> &'static str {
        "Report that you are done and exit. success: whether the task was completed; summary: what you did, which files you produced, what you found. You cannot continue after this call."
    }

    fn parameters(&self) -> Value {
        schema::<Args>()
    }

    fn is_read_only(&self) -> bool {
        false
    }

    fn changes_workspace(&self) -> bool {
        false
    }

    fn call<'a>(
        &'a self,
        arguments: &'a str,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let args: Args = parse_args(self.name(), arguments)?;
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
        })
    }
}
