//! `write_file`: create or replace a whole file.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutput, parse_args};
use crate::llm::BoxFuture;

pub struct WriteFile;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    content: String,
}

impl Tool for WriteFile {
    fn name(&self) -> &'static str {
        "write_file"
    }

    fn description(&self) -> &'static str {
        "Create a file, or replace its whole content. Parent directories are created."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace"},
                "content": {"type": "string", "description": "The complete new content"}
            },
            "required": ["path", "content"]
        })
    }

    fn is_read_only(&self) -> bool {
        false
    }

    fn call<'a>(
        &'a self,
        arguments: &'a str,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let args: Args = parse_args(self.name(), arguments)?;
            let path = ctx.fence.resolve_write(&args.path)?;
            let shown = ctx.fence.display(&path);
            let fail =
                |e: std::io::Error| ToolError::RespondToModel(format!("cannot write {shown}: {e}"));
            if path.is_dir() {
                return Err(ToolError::RespondToModel(format!("{shown} is a directory")));
            }
            if let Some(parent) = path.parent() {
                tokio::fs::create_dir_all(parent).await.map_err(fail)?;
            }
            tokio::fs::write(&path, args.content.as_bytes())
                .await
                .map_err(fail)?;
            ctx.record_written(path.clone());
            Ok(ToolOutput::ok(format!(
                "wrote {} bytes to {shown}",
                args.content.len()
            )))
        })
    }
}
