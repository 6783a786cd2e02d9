//! `list_dir`: the entries of one directory.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutput, parse_args};
use crate::llm::BoxFuture;

const MAX_ENTRIES: usize = 1000;

pub struct ListDir;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    #[serde(default)]
    path: Option<String>,
}

impl Tool for ListDir {
    fn name(&self) -> &'static str {
        "list_dir"
    }

    fn description(&self) -> &'static str {
        "List a directory: subdirectories end with /, files show their size. Defaults to the workspace root."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Directory, relative to the workspace (default .)"}
            }
        })
    }

    fn is_read_only(&self) -> bool {
        true
    }

    fn call<'a>(
        &'a self,
        arguments: &'a str,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let args: Args = parse_args(self.name(), arguments)?;
            let path = ctx
                .fence
                .resolve_read(args.path.as_deref().unwrap_or("."))?;
            let shown = ctx.fence.display(&path);
            let refuse =
                |e: std::io::Error| ToolError::RespondToModel(format!("cannot list {shown}: {e}"));
            let mut dir = tokio::fs::read_dir(&path).await.map_err(refuse)?;
            let mut entries = Vec::new();
            while let Some(entry) = dir.next_entry().await.map_err(refuse)? {
                let name = entry.file_name().to_string_lossy().into_owned();
                let line = match entry.metadata().await {
                    Ok(meta) if meta.is_dir() => format!("{name}/"),
                    Ok(meta) if meta.is_symlink() => match tokio::fs::read_link(entry.path()).await
                    {
                        Ok(target) => format!("{name} -> {}", target.display()),
                        Err(_) => format!("{name} -> ?"),
                    },
                    Ok(meta) => format!("{name}  ({} bytes)", meta.len()),
                    Err(_) => name,
                };
                entries.push(line);
            }
            entries.sort();
            let total = entries.len();
            if total == 0 {
                return Ok(ToolOutput::ok(format!("{shown} is empty")));
            }
            entries.truncate(MAX_ENTRIES);
            let mut out = entries.join("\n");
            if total > MAX_ENTRIES {
                out.push_str(&format!("\n[{MAX_ENTRIES} of {total} entries shown]"));
            }
            Ok(ToolOutput::ok(out))
        })
    }
}
