//! The scripted model (`--model scripted:PATH`): a
//! deterministic replay that the parent serves like any endpoint.
//!
//! Each agent takes the first rule whose given keys match it and walks that
//! rule's replies with a cursor of its own, repeating the last one when the
//! list runs out; parallel agents therefore stay deterministic.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{ChatModel, Completion, CompletionRequest, LlmError};
use crate::chat::{AgentKey, Message, Role, ToolCall, Usage};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptFile {
    #[serde(default)]
    latency_ms: u64,
    rules: Vec<Rule>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Rule {
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    step: Option<StepId>,
    #[serde(default)]
    attempt: Option<u32>,
    reply: Vec<Reply>,
}

/// A step id written as a string, or as a number for `troupe spawn --id 3`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum StepId {
    Text(String),
    Number(u64),
}

impl StepId {
    fn matches(&self, step: Option<&str>) -> bool {
        match (self, step) {
            (StepId::Text(want), Some(step)) => want == step,
            (StepId::Number(want), Some(step)) => want.to_string() == step,
            (_, None) => false,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Reply {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ScriptedCall>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    delay_ms: Option<u64>,
    #[serde(default)]
    usage: Option<ScriptedUsage>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    status: Option<u16>,
    /// `length` makes the answer one cut at its limit.
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptedCall {
    name: String,
    #[serde(default)]
    arguments: Map<String, Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptedUsage {
    #[serde(default)]
    prompt: u64,
    #[serde(default)]
    completion: u64,
    /// What the answer cost, in dollars, as a provider that reports its
    /// own cost says it: nothing unless set.
    #[serde(default)]
    cost: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error("cannot read the model script {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the model script {path} is not valid: {source}")]
    Invalid {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("the model script {path}: rule {index} has an empty `reply` list")]
    EmptyRule { path: PathBuf, index: usize },
}

pub struct ScriptedModel {
    source: String,
    latency: Duration,
    rules: Vec<Rule>,
    /// Per agent: its rule, the next reply, and the next call id.
    cursors: Mutex<HashMap<AgentKey, Cursor>>,
}

#[derive(Debug, Clone, Copy)]
struct Cursor {
    rule: usize,
    next: usize,
    calls: u64,
}

impl ScriptedModel {
    pub fn load(path: &Path) -> Result<Self, ScriptError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScriptError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let file: ScriptFile =
            serde_json::from_str(&text).map_err(|source| ScriptError::Invalid {
                path: path.to_path_buf(),
                source,
            })?;
        if let Some(index) = file.rules.iter().position(|rule| rule.reply.is_empty()) {
            return Err(ScriptError::EmptyRule {
                path: path.to_path_buf(),
                index,
            });
        }
        Ok(ScriptedModel {
            source: format!("scripted:{}", path.display()),
            latency: Duration::from_millis(file.latency_ms),
            rules: file.rules,
            cursors: Mutex::new(HashMap::new()),
        })
    }

    fn find_rule(&self, agent: &AgentKey) -> Option<usize> {
        self.rules.iter().position(|rule| {
            rule.role
                .as_deref()
                .is_none_or(|role| role == agent.role.as_str())
                && rule
                    .step
                    .as_ref()
                    .is_none_or(|step| step.matches(agent.step.as_deref()))
                && rule
                    .attempt
                    .is_none_or(|attempt| agent.attempt == Some(attempt))
        })
    }

    /// Advances the agent's cursor and returns the rule, reply index and the
    /// number of calls made so far (for call ids).
    fn next_reply(&self, agent: &AgentKey) -> Result<(usize, usize, u64), LlmError> {
        let mut cursors = self
            .cursors
            .lock()
            .map_err(|_| LlmError::Script("the scripted model's state is poisoned".into()))?;
        let cursor = match cursors.get(agent) {
            Some(cursor) => *cursor,
            None => {
                let rule = self.find_rule(agent).ok_or_else(|| {
                    LlmError::Script(format!(
                        "{}: no rule matches the {agent}; add a rule with \"role\": \"{}\"",
                        self.source, agent.role
                    ))
                })?;
                Cursor {
                    rule,
                    next: 0,
                    calls: 0,
                }
            }
        };
        let replies = self.rules[cursor.rule].reply.len();
        let index = cursor.next.min(replies - 1);
        let calls = cursor.calls;
        let made = self.rules[cursor.rule].reply[index].tool_calls.len() as u64;
        cursors.insert(
            agent.clone(),
            Cursor {
                next: cursor.next + 1,
                calls: calls + made,
                ..cursor
            },
        );
        Ok((cursor.rule, index, calls))
    }

    async fn reply(&self, request: CompletionRequest) -> Result<Completion, LlmError> {
        let (rule, index, calls_before) = self.next_reply(&request.agent)?;
        let reply = &self.rules[rule].reply[index];
        let delay = reply
            .delay_ms
            .map(Duration::from_millis)
            .unwrap_or(self.latency);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if let Some(error) = &reply.error {
            let status = reply.status.unwrap_or(500);
            return Err(LlmError::status(self.source.clone(), status, error.clone()));
        }
        let tool_calls = reply
            .tool_calls
            .iter()
            .zip(calls_before + 1..)
            .map(|(call, n)| {
                ToolCall::new(
                    format!("call_{n}"),
                    call.name.clone(),
                    Value::Object(call.arguments.clone()).to_string(),
                )
            })
            .collect();
        let usage = reply
            .usage
            .as_ref()
            .map(|u| Usage {
                cost_micros: crate::chat::micros(u.cost),
                ..Usage::new(u.prompt, u.completion)
            })
            .unwrap_or_default();
        Ok(Completion {
            truncated: reply.finish_reason.as_deref() == Some("length"),
            message: Message {
                role: Role::Assistant,
                content: reply.content.clone(),
                tool_calls,
                tool_call_id: None,
                reasoning_content: reply.reasoning_content.clone(),
                extra: Map::new(),
            },
            usage,
        })
    }
}

impl ChatModel for ScriptedModel {
    fn complete(&self, request: CompletionRequest) -> BoxFuture<'_, Result<Completion, LlmError>> {
        Box::pin(self.reply(request))
    }

    fn identity(&self) -> (&'static str, &str) {
        ("troupe.scripted", &self.source)
    }
}
