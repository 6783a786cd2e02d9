//! The tools of MCP servers, as the model sees them: `mcp__<server>__<tool>`
//! with the server's own description and input schema, after the built-in
//! tools.
//!
//! The agent starts each stdio server itself, after its sandbox is in
//! place, so a server runs with the agent's Landlock domain, without
//! capabilities or network, with a scrubbed environment, and in the
//! agent's session (its kill reaches the server). Each is an
//! `mcp::managed::ManagedServer`, whose rules hold: a server that fails is
//! never the agent's end, its tools answer with a tool error that says
//! what happened, and a server that died is started again, once. The
//! tools of the servers troupe reaches for the agent are asked of it over
//! the pipe (`McpRelay`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::{About, Counter, Tool, ToolContext, ToolError, ToolOutput};
use crate::mcp::client::ServerLog;
use crate::mcp::managed::{ManagedServer, Placement};
use crate::protocol::{ListedTool, McpServer, SUBAGENT_DIR, UnstartedServer};

/// The tools of every server the agent was given, and each server that
/// could not be used.
#[derive(Default)]
pub struct Started {
    pub tools: Vec<Arc<dyn Tool>>,
    pub unstarted: Vec<UnstartedServer>,
}

/// Starts `servers` (at once), each in the workspace with its stderr in
/// `.subagent/mcp-<name>.log` and its process group among those that die
/// with the agent, and gives the tools they list.
pub async fn start(servers: &[McpServer], ctx: &ToolContext) -> Started {
    if !servers.is_empty() {
        ctx.commands.await_bounds();
    }
    let starts = servers.iter().map(|server| {
        let placement = Placement {
            workspace: ctx.fence.workspace().to_path_buf(),
            log: Some(ServerLog::new(Arc::clone(&ctx.records), &server.name)),
            narrow: false,
            groups: Some(Arc::clone(&ctx.groups)),
        };
        ManagedServer::start(server.clone(), placement)
    });
    let mut started = Started {
        tools: Vec::new(),
        unstarted: Vec::new(),
    };
    for server in futures_util::future::join_all(starts).await {
        let server = Arc::new(server);
        if let Some(failure) = server.failure() {
            started.unstarted.push(UnstartedServer {
                server: server.name().to_string(),
                error: failure.to_string(),
            });
        }
        for tool in server.tools() {
            let reach = Reach::Own(Arc::clone(&server));
            started.tools.push(Arc::new(McpTool::new(reach, tool)));
        }
    }
    started
}

/// How a tool's server is reached.
enum Reach {
    /// The agent's own server, started by it.
    Own(Arc<ManagedServer>),
    /// One troupe reaches for the agent, over the pipe.
    Relayed {
        relay: Arc<dyn McpRelay>,
        server: String,
    },
}

struct McpTool {
    reach: Reach,
    /// The tool's name on its server.
    remote: String,
    about: About,
    parameters: Value,
    /// Files saved of what a call returned that is not text.
    saved: AtomicU64,
}

impl McpTool {
    /// `tool`, with the server's own description and input schema.
    fn new(reach: Reach, tool: &ListedTool) -> Self {
        // A tool's name and description live as long as the agent, which
        // makes a handful at start: leaked once, they fit `About`, which
        // the built-in tools fill with constants.
        let name: &'static str = Box::leak(tool.name.clone().into_boxed_str());
        let description: &'static str = Box::leak(
            format!("{} (MCP server `{}`)", tool.description, tool.server).into_boxed_str(),
        );
        let mut parameters = tool.input_schema.clone();
        if parameters.get("type").is_none() {
            parameters["type"] = Value::from("object");
        }
        McpTool {
            reach,
            remote: tool.tool.clone(),
            about: About::changing(name, description).counting(Counter::McpCalls),
            parameters,
            saved: AtomicU64::new(0),
        }
    }

    async fn call_reached(
        &self,
        arguments: &str,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let arguments = object_arguments(arguments, self.about.name)?;
        let answer = match &self.reach {
            Reach::Own(server) => server
                .call(&self.remote, arguments)
                .await
                .map_err(|e| e.to_string()),
            Reach::Relayed { relay, server } => {
                relay
                    .call(server, &self.remote, Value::Object(arguments))
                    .await
            }
        };
        Ok(match answer {
            Ok(result) => render(&result, &self.remote, &self.saved, ctx),
            Err(why) => failed(why),
        })
    }
}

/// The call's result as the model reads it: its text, and for an image
/// or a binary resource, the file it was saved to under
/// `.subagent/outputs/` (named after `tool`, counted by `saved`).
fn render(result: &Value, tool: &str, saved: &AtomicU64, ctx: &ToolContext) -> ToolOutput {
    let mut parts: Vec<String> = Vec::new();
    for block in result["content"].as_array().into_iter().flatten() {
        match block["type"].as_str().unwrap_or("") {
            "text" => parts.push(block["text"].as_str().unwrap_or("").to_string()),
            "resource" => {
                let resource = &block["resource"];
                match resource["text"].as_str() {
                    Some(text) => parts.push(text.to_string()),
                    None => parts.push(save(resource["blob"].as_str(), "bin", tool, saved, ctx)),
                }
            }
            "resource_link" => {
                parts.push(format!("resource: {}", block["uri"].as_str().unwrap_or("")))
            }
            "image" | "audio" => {
                let mime = block["mimeType"].as_str().unwrap_or("");
                let extension = mime.rsplit('/').next().unwrap_or("bin");
                parts.push(save(block["data"].as_str(), extension, tool, saved, ctx));
            }
            other => parts.push(format!("(content of type `{other}` left out)")),
        }
    }
    if parts.is_empty()
        && let Some(structured) = result.get("structuredContent")
    {
        parts.push(structured.to_string());
    }
    let text = parts.join("\n");
    match result["isError"].as_bool().unwrap_or(false) {
        true => ToolOutput::failed(format!("the MCP tool {tool} reported an error"), text),
        false => ToolOutput::ok(text),
    }
}

/// Saves base64 `data` under `.subagent/outputs/`; the line that says
/// where.
fn save(
    data: Option<&str>,
    extension: &str,
    tool: &str,
    saved: &AtomicU64,
    ctx: &ToolContext,
) -> String {
    let Some(bytes) = data.and_then(decode_base64) else {
        return "(binary content that is not valid base64, left out)".to_string();
    };
    let n = saved.fetch_add(1, Ordering::Relaxed) + 1;
    let dir = ctx.fence.agent_dir().join(SUBAGENT_DIR).join("outputs");
    let extension: String = extension
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(8)
        .collect();
    let name = format!("{tool}-{n}.{extension}");
    let path = dir.join(&name);
    let written = ctx
        .records
        .subdir("outputs")
        .and_then(|dir| dir.write_atomic(&name, &bytes, crate::fsutil::Durability::Atomic));
    match written {
        Ok(()) => format!("({} bytes saved to {})", bytes.len(), path.display()),
        Err(e) => format!("({} bytes that could not be saved: {e})", bytes.len()),
    }
}

/// Where an agent's calls of a server the parent reaches go: over the
/// pipe (`mcp_call`), answered by the parent.
pub trait McpRelay: Send + Sync {
    fn call<'a>(
        &'a self,
        server: &'a str,
        tool: &'a str,
        arguments: Value,
    ) -> BoxFuture<'a, Result<Value, String>>;
}

/// The tools of the servers the parent reaches, as its task file lists
/// them; without a parent (stand-alone), none.
pub fn relayed(tools: &[ListedTool], relay: Option<Arc<dyn McpRelay>>) -> Vec<Arc<dyn Tool>> {
    let Some(relay) = relay else {
        return Vec::new();
    };
    tools
        .iter()
        .map(|tool| {
            let reach = Reach::Relayed {
                relay: Arc::clone(&relay),
                server: tool.server.clone(),
            };
            Arc::new(McpTool::new(reach, tool)) as Arc<dyn Tool>
        })
        .collect()
}

/// The model's arguments, which must be a JSON object (empty is `{}`).
fn object_arguments(
    arguments: &str,
    tool: &str,
) -> Result<serde_json::Map<String, Value>, ToolError> {
    let text = match arguments.trim().is_empty() {
        true => "{}",
        false => arguments,
    };
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) | Err(_) => Err(ToolError::RespondToModel(format!(
            "the arguments of {tool} must be a JSON object"
        ))),
    }
}

fn failed(error: String) -> ToolOutput {
    ToolOutput::failed(error, "")
}

impl Tool for McpTool {
    fn about(&self) -> About {
        self.about
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    fn call<'a>(
        &'a self,
        arguments: &'a str,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(self.call_reached(arguments, ctx))
    }
}

/// Standard base64, as MCP carries binary content; `None` for anything
/// else.
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .ok()
}
