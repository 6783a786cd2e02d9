//! An agent started only to see which MCP tools it gets: `troupe mcp list`
//! runs one of each role its servers serve, in the sandbox an agent of a
//! run gets with the same flags and config, so "listed" means "an agent
//! can start it". Its model is troupe's own: it keeps the tools the first
//! request offers and ends the agent at once.

use std::path::Path;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;

use crate::chat::{Message, ToolCall, ToolSpec, Usage};
use crate::llm::{ChatModel, Completion, CompletionRequest, LlmError};
use crate::protocol::{AgentId, AgentRole, TaskFile, UnstartedServer};
use crate::signal::StopSignal;
use crate::supervisor::AgentSettings;
use crate::supervisor::events::{AgentEvent, EventSink};
use crate::supervisor::spawn::{Existing, SpawnConfig, guard, prepare, run_prepared};

/// What an agent of one role was given.
pub struct Probed {
    /// The MCP tools it was offered (`mcp__<server>__<tool>`).
    pub tools: Vec<ToolSpec>,
    /// The servers it could not start, with why.
    pub unstarted: Vec<UnstartedServer>,
    /// Why the agent itself did not get as far as asking its model.
    pub failure: Option<String>,
}

/// Runs an agent of `role` in `workspace`, its directory under `scratch`,
/// and says what it was given.
pub async fn probe(
    role: AgentRole,
    workspace: &Path,
    scratch: &Path,
    settings: &AgentSettings,
) -> anyhow::Result<Probed> {
    let mut task = TaskFile::new(
        AgentId::new(format!("mcp-list-{}", role.as_str())),
        role,
        "list the MCP tools".to_string(),
        "Say you are done; troupe mcp list only looks at your tools.".to_string(),
        workspace.to_path_buf(),
        scratch.join(role.as_str()),
    );
    settings.fill(&mut task);
    guard(&mut task);
    prepare(&task, Existing::Refuse, &Warnings).await?;
    let model = Arc::new(Lister::default());
    let config = SpawnConfig::new(task, settings, StopSignal::default(), "mcp-list");
    let run = run_prepared(config, Arc::clone(&model) as Arc<dyn ChatModel>, &Warnings).await?;
    let offered = model.offered.lock().ok().and_then(|mut o| o.take());
    let failure = match &offered {
        Some(_) => None,
        None => Some(
            run.result
                .error
                .unwrap_or_else(|| format!("the agent ended {}", run.result.status)),
        ),
    };
    Ok(Probed {
        tools: offered
            .unwrap_or_default()
            .into_iter()
            .filter(|tool| tool.name.starts_with("mcp__"))
            .collect(),
        unstarted: run.result.stats.mcp_unstarted,
        failure,
    })
}

/// The model of a probe: the tools of the first request kept, and the
/// agent told it is done (a worker by `finish_task`, a reviewer by a
/// verdict).
#[derive(Default)]
struct Lister {
    offered: Mutex<Option<Vec<ToolSpec>>>,
}

impl ChatModel for Lister {
    fn complete(&self, request: CompletionRequest) -> BoxFuture<'_, Result<Completion, LlmError>> {
        if let Ok(mut offered) = self.offered.lock() {
            offered.get_or_insert_with(|| request.tools.clone());
        }
        let message = match &request.schema {
            Some(_) => Message::assistant(
                serde_json::json!({
                    "approved": true,
                    "summary": "troupe mcp list looked at the tools",
                    "issues": [],
                    "suggestions": [],
                    "retry": false,
                })
                .to_string(),
            ),
            None => {
                let arguments = serde_json::json!({
                    "success": true,
                    "summary": "troupe mcp list looked at the tools",
                });
                Message {
                    tool_calls: vec![ToolCall::new(
                        "mcp-list",
                        "finish_task",
                        arguments.to_string(),
                    )],
                    ..Message::assistant("")
                }
            }
        };
        Box::pin(async move {
            Ok(Completion {
                message,
                usage: Usage::default(),
                truncated: false,
            })
        })
    }
}

/// The probe's events: only what went wrong is said.
struct Warnings;

impl EventSink for Warnings {
    fn event(&self, agent: &str, event: AgentEvent<'_>) {
        if let AgentEvent::Warning { message } = event {
            crate::tell!("troupe: {agent}: {message}");
        }
    }
}
