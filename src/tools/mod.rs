//! The tools an agent can call: one per file, behind one trait.
//!
//! A tool never panics on what the model sends: bad arguments, a path
//! outside the fence, a missing file all come back to the model as a
//! failed result it can act on (`ToolError::RespondToModel`). Only a
//! failure of the agent's own machinery ends the agent (`ToolError::Fatal`).

mod bounds;
mod edit_file;
mod fence;
mod finish_task;
mod list_dir;
pub mod mcp;
mod read_file;
mod run_command;
mod schema;
mod search_workspace;
mod spill;
pub mod web;
mod write_file;

use std::collections::BTreeSet;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::chat::ToolSpec;
use crate::fsutil::RecordDir;
use crate::protocol::AgentLimits;

use crate::process::ProcessGroups;
pub use fence::{FenceError, PathFence};
pub use spill::cap_output;

tokio::task_local! {
    /// The span of the tool call being run, which its command is started
    /// in (`TRACEPARENT`); unset when the agent's run is not traced.
    pub static CALL_TRACE: Option<crate::protocol::TraceParent>;
}

/// The largest file read_file and edit_file read whole; larger ones are
/// for commands (`head`, `grep`).
const MAX_READ_BYTES: u64 = 64 * 1024 * 1024;

/// What a tool's use adds to the seed's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    FilesRead,
    Searches,
    Commands,
    McpCalls,
    WebPages,
}

/// What `finish_task` hands back to the loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finish {
    pub success: bool,
    pub summary: String,
    /// A step's typed result (`finish_task` with `result`).
    pub result: Option<Value>,
}

/// The structured result every tool returns; the model sees it as JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolOutput {
    pub success: bool,
    pub content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip)]
    pub finish: Option<Finish>,
}

impl ToolOutput {
    pub fn ok(content: impl Into<String>) -> Self {
        ToolOutput {
            success: true,
            content: content.into(),
            error: None,
            finish: None,
        }
    }

    pub fn failed(error: impl Into<String>, content: impl Into<String>) -> Self {
        ToolOutput {
            success: false,
            content: content.into(),
            error: Some(error.into()),
            finish: None,
        }
    }

    /// The text of the `tool` message the model reads.
    pub fn model_text(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| self.content.clone())
    }

    /// One line for progress: the error, or the first line of the content.
    pub fn summary(&self) -> String {
        let text = self.error.as_deref().unwrap_or(&self.content);
        crate::text::excerpt(text.lines().next().unwrap_or(""), 160)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The model's mistake or the world's: reported to the model as the
    /// tool's failed result.
    #[error("{0}")]
    RespondToModel(String),
    /// The agent cannot go on.
    #[error("{0}")]
    Fatal(String),
}

impl From<FenceError> for ToolError {
    fn from(error: FenceError) -> Self {
        ToolError::RespondToModel(error.to_string())
    }
}

/// What every tool may use: the path fence, the limits, the registry of
/// process groups that must die with the agent, and the record of files
/// written (for the result's deliverables list).
pub struct ToolContext {
    pub fence: PathFence,
    /// The agent's `.subagent/`, where tools save what they spill.
    pub records: Arc<RecordDir>,
    pub limits: AgentLimits,
    pub commands: CommandSetting,
    /// Shared with the MCP servers the agent starts, which join it.
    pub groups: Arc<ProcessGroups>,
    pub written: Mutex<BTreeSet<PathBuf>>,
}

/// What `run_command` and the MCP servers an agent starts need to know of
/// the agent's sandbox.
#[derive(Debug, Clone, Default)]
pub struct CommandSetting {
    /// The files that count the times the agent's control group hit a
    /// bound, to tell a command that hit one.
    pub limit_events: Vec<PathBuf>,
    /// The agent's bounds, to name in that message.
    pub memory: Option<u64>,
    pub processes: Option<u64>,
    /// Variables that are an MCP server's alone, kept from commands.
    pub withheld_env: Vec<String>,
    /// The agent's proxy to its step's broker, which commands are given
    /// as their HTTP proxy.
    pub proxy: Option<String>,
}

impl CommandSetting {
    /// Waits, the first time, until the agent is inside its bounds (see
    /// `sandbox::await_bounds`): before it starts a process of its own.
    pub fn await_bounds(&self) {
        if let Some(warning) = crate::sandbox::await_bounds(self.memory, self.processes) {
            crate::tell!("troupe-agent: {warning}");
        }
    }
}

impl ToolContext {
    pub fn new(
        fence: PathFence,
        records: Arc<RecordDir>,
        limits: AgentLimits,
        commands: CommandSetting,
    ) -> Self {
        ToolContext {
            fence,
            records,
            limits,
            commands,
            groups: Arc::default(),
            written: Mutex::new(BTreeSet::new()),
        }
    }

    fn record_written(&self, path: PathBuf) {
        if let Ok(mut written) = self.written.lock() {
            written.insert(path);
        }
    }
}

/// What a tool is, for the model and for the loop that runs it.
#[derive(Debug, Clone, Copy)]
pub struct About {
    pub name: &'static str,
    pub description: &'static str,
    /// Read-only tools may run in parallel and are what a Reviewer gets.
    pub read_only: bool,
    /// What a call adds to the seed's counters.
    pub counter: Option<Counter>,
    /// Whether a successful call changed the workspace or ran something:
    /// the evidence of work behind a claim of success.
    pub changes_workspace: bool,
}

impl About {
    /// A tool that only reads: it may run beside other reads, and a
    /// Reviewer gets it.
    pub const fn reading(name: &'static str, description: &'static str) -> Self {
        About {
            name,
            description,
            read_only: true,
            counter: None,
            changes_workspace: false,
        }
    }

    /// A tool that changes the workspace or runs something.
    pub const fn changing(name: &'static str, description: &'static str) -> Self {
        About {
            read_only: false,
            changes_workspace: true,
            ..About::reading(name, description)
        }
    }

    /// A tool that runs alone and changes nothing (`finish_task`).
    pub const fn alone(name: &'static str, description: &'static str) -> Self {
        About {
            read_only: false,
            ..About::reading(name, description)
        }
    }

    pub const fn counting(self, counter: Counter) -> Self {
        About {
            counter: Some(counter),
            ..self
        }
    }
}

/// A tool as the registry holds it.
pub trait Tool: Send + Sync {
    fn about(&self) -> About;
    /// JSON Schema of the arguments.
    fn parameters(&self) -> Value;
    fn call<'a>(
        &'a self,
        arguments: &'a str,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>>;

    fn spec(&self) -> ToolSpec {
        let about = self.about();
        ToolSpec {
            name: about.name.to_string(),
            description: about.description.to_string(),
            parameters: self.parameters(),
        }
    }
}

/// One tool with typed arguments: what each tool's file implements.
pub trait TypedTool: Send + Sync + 'static {
    /// What the model sends, read strictly; the schema the model is shown
    /// is derived from it.
    type Args: DeserializeOwned + JsonSchema + Send;
    const ABOUT: About;
    fn run(
        &self,
        args: Self::Args,
        ctx: &ToolContext,
    ) -> impl Future<Output = Result<ToolOutput, ToolError>> + Send;
}

impl<T: TypedTool> Tool for T {
    fn about(&self) -> About {
        T::ABOUT
    }

    fn parameters(&self) -> Value {
        schema::schema::<T::Args>()
    }

    fn call<'a>(
        &'a self,
        arguments: &'a str,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let args = parse_args::<T::Args>(T::ABOUT.name, arguments)?;
            self.run(args, ctx).await
        })
    }
}

/// Runs a tool's file work on a blocking thread, off the agent's one
/// runtime thread, so that parallel reads, the heartbeat and a cancel go on
/// while a large file is read.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| match e.try_into_panic() {
            Ok(panic) => panicked("the tool", panic.as_ref()),
            Err(e) => ToolError::Fatal(format!("the tool's work failed: {e}")),
        })?
}

/// A tool that panicked: a bug in troupe, which the model is told of as
/// the tool's failure; the agent goes on.
pub fn panicked(tool: &str, panic: &(dyn std::any::Any + Send)) -> ToolError {
    ToolError::RespondToModel(format!(
        "{tool} failed unexpectedly ({}); this is a bug in troupe, not in your call",
        crate::text::panic_message(panic)
    ))
}

/// Refuses to make `shown` a file of `bytes` bytes when that is more than
/// `max` (`--max-file-size`, which also bounds what commands write).
fn within_file_limit(max: Option<u64>, shown: &str, bytes: usize) -> Result<(), ToolError> {
    let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
    match max {
        Some(max) if bytes > max => Err(ToolError::RespondToModel(format!(
            "{shown} would be {bytes} bytes, more than the {max} a file may have here (--max-file-size); write less, or in parts"
        ))),
        _ => Ok(()),
    }
}

/// Parses a call's JSON arguments into the tool's own type; text that is
/// not JSON (often an answer cut off mid-call) and a mismatch are the
/// model's to fix, and it is told which.
pub fn parse_args<T: DeserializeOwned>(tool: &str, arguments: &str) -> Result<T, ToolError> {
    let text = if arguments.trim().is_empty() {
        "{}"
    } else {
        arguments
    };
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        ToolError::RespondToModel(format!(
            "the arguments of {tool} are not valid JSON: {e}; call {tool} again with its arguments as one JSON object"
        ))
    })?;
    serde_json::from_value(value)
        .map_err(|e| ToolError::RespondToModel(format!("invalid arguments for {tool}: {e}")))
}

/// The tools of one role, in the order the model sees them.
#[derive(Clone)]
pub struct ToolRegistry {
    tools: Vec<Arc<dyn Tool>>,
}

impl ToolRegistry {
    /// Everything a Worker may use.
    pub fn worker() -> Self {
        ToolRegistry {
            tools: vec![
                Arc::new(read_file::ReadFile),
                Arc::new(write_file::WriteFile),
                Arc::new(edit_file::EditFile),
                Arc::new(list_dir::ListDir),
                Arc::new(search_workspace::SearchWorkspace),
                Arc::new(run_command::RunCommand),
                Arc::new(finish_task::FinishTask),
            ],
        }
    }

    /// What a Reviewer may use: the read-only tools, so it can inspect the
    /// real workspace and change nothing, and `run_command` for checks when
    /// `with_shell`: only where the sandbox keeps its commands from writing.
    pub fn reviewer(with_shell: bool) -> Self {
        ToolRegistry {
            tools: Self::worker()
                .tools
                .into_iter()
                .filter(|tool| {
                    let about = tool.about();
                    about.read_only || (with_shell && about.name == "run_command")
                })
                .collect(),
        }
    }

    /// The registry with only the built-in tools `names` (a step's
    /// `powers.tools`) and `finish_task`, and the names of those left out.
    pub fn only(mut self, names: &[String]) -> (Self, Vec<String>) {
        let mut withheld = Vec::new();
        self.tools.retain(|tool| {
            let name = tool.about().name;
            let kept = name == "finish_task" || names.iter().any(|n| n == name);
            if !kept {
                withheld.push(name.to_string());
            }
            kept
        });
        (self, withheld)
    }

    /// The registry whose `finish_task` takes a `result` matching
    /// `schema` (a step's `output_schema`).
    pub fn returning(mut self, schema: Value) -> Self {
        let finish: Arc<dyn Tool> = Arc::new(finish_task::FinishWithResult::new(schema));
        for tool in &mut self.tools {
            if tool.about().name == finish.about().name {
                *tool = Arc::clone(&finish);
            }
        }
        self
    }

    /// The registry with `tools` after the built-in ones (an MCP server's);
    /// a name already taken keeps its first tool.
    pub fn with(mut self, tools: Vec<Arc<dyn Tool>>) -> Self {
        for tool in tools {
            if self.get(tool.about().name).is_none() {
                self.tools.push(tool);
            }
        }
        self
    }

    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.iter().map(|tool| tool.spec()).collect()
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools
            .iter()
            .find(|tool| tool.about().name == name)
            .cloned()
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.tools.iter().map(|tool| tool.about().name).collect()
    }
}

#[cfg(test)]
mod registry_tests {
    use super::*;

    #[test]
    fn the_tools_a_plan_may_name_are_the_workers() {
        assert_eq!(
            ToolRegistry::worker().names(),
            crate::plan::powers::WORKER_TOOLS
        );
    }
}
