//! The conversation vocabulary every other module speaks: who takes part,
//! messages, tool calls, tool specs and token usage.
//!
//! These types are the ground floor of the crate. The wire protocol carries
//! them between parent and child, the model clients translate them to and
//! from each provider's format, and the transcript stores them. They use
//! the OpenAI shape for tool calls because that is what every reader of a
//! transcript already knows.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Who takes part in a run's conversations: the Planner (in the parent),
/// and the Workers and Reviewers (each a child process).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Actor {
    Planner,
    Worker,
    Reviewer,
}

impl Actor {
    pub fn as_str(self) -> &'static str {
        match self {
            Actor::Planner => "planner",
            Actor::Worker => "worker",
            Actor::Reviewer => "reviewer",
        }
    }
}

impl std::fmt::Display for Actor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which agent a model request is for. Only the scripted model looks at
/// it (its rules match on role, step and attempt, each agent with its own
/// cursor); a real endpoint never sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AgentKey {
    pub role: Actor,
    /// The step id in a team run; the agent id for `troupe spawn`.
    pub step: Option<String>,
    /// 1-based attempt of the step.
    pub attempt: Option<u32>,
}

impl std::fmt::Display for AgentKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.role)?;
        if let Some(step) = &self.step {
            write!(f, " of step {step}")?;
        }
        if let Some(attempt) = self.attempt {
            write!(f, " (attempt {attempt})")?;
        }
        Ok(())
    }
}

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// On a `tool` message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// A thinking model's reasoning, kept because some providers refuse the
    /// next request unless it is sent back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Provider fields troupe does not know, kept so they survive the round
    /// trip to the provider and into the transcript.
    #[serde(flatten, default, skip_serializing_if = "Map::is_empty")]
    pub extra: Map<String, Value>,
}

impl Message {
    fn new(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: Some(content.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
            reasoning_content: None,
            extra: Map::new(),
        }
    }

    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content)
    }

    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content)
    }

    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(Role::Assistant, content)
    }

    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Message {
            tool_call_id: Some(call_id.into()),
            ..Self::new(Role::Tool, content)
        }
    }

    /// The text of the message, or "" when it has none.
    pub fn text(&self) -> &str {
        self.content.as_deref().unwrap_or("")
    }
}

/// A call the model asked for, in the OpenAI shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    pub function: FunctionCall,
}

fn function_kind() -> String {
    "function".to_string()
}

/// The function half of a tool call. `arguments` is JSON text, as the
/// providers send and expect it; a tool parses it and reports bad JSON to
/// the model as a tool error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    #[serde(default)]
    pub arguments: String,
}

impl ToolCall {
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        ToolCall {
            id: id.into(),
            kind: function_kind(),
            function: FunctionCall {
                name: name.into(),
                arguments: arguments.into(),
            },
        }
    }

    pub fn name(&self) -> &str {
        &self.function.name
    }

    /// The arguments as JSON when they parse, otherwise as the raw string,
    /// for progress events and logs.
    pub fn arguments_value(&self) -> Value {
        serde_json::from_str(&self.function.arguments)
            .unwrap_or_else(|_| Value::String(self.function.arguments.clone()))
    }
}

/// A tool offered to the model: its name, what it does, and a JSON Schema of
/// its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// Tokens spent, as counted by the provider, or estimated from the text
/// where the provider said nothing, and what they cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "UsageRecord", into = "UsageRecord")]
pub struct Usage {
    pub prompt: u64,
    pub completion: u64,
    pub total: u64,
    /// Some of these tokens are troupe's estimate, not the provider's count.
    pub estimated: bool,
    /// Prompt tokens the provider served from its cache (part of
    /// `prompt`), as it reported them.
    pub cached: u64,
    /// What they cost, in millionths of a US dollar: the provider's own
    /// figure where it gave one, else the model's price times the tokens.
    pub cost_micros: u64,
    /// Some of them cost what no one said (a model without a price): the
    /// cost is unknown, never a guess.
    pub unpriced: bool,
}

/// `Usage` as records and the wire spell it: the cost in dollars, `null`
/// when unknown.
#[derive(Serialize, Deserialize)]
struct UsageRecord {
    #[serde(default)]
    prompt: u64,
    #[serde(default)]
    completion: u64,
    #[serde(default)]
    total: u64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    estimated: bool,
    #[serde(default, skip_serializing_if = "is_zero")]
    cached: u64,
    /// Missing in a record older than costs: unknown.
    #[serde(default)]
    cost: Option<f64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl From<UsageRecord> for Usage {
    fn from(record: UsageRecord) -> Usage {
        Usage {
            prompt: record.prompt,
            completion: record.completion,
            total: record.total,
            estimated: record.estimated,
            cached: record.cached,
            cost_micros: record.cost.map_or(0, micros),
            unpriced: record.cost.is_none(),
        }
    }
}

impl From<Usage> for UsageRecord {
    fn from(usage: Usage) -> UsageRecord {
        UsageRecord {
            prompt: usage.prompt,
            completion: usage.completion,
            total: usage.total,
            estimated: usage.estimated,
            cached: usage.cached,
            cost: usage.cost(),
        }
    }
}

/// `dollars` in millionths, rounded; nothing below zero.
pub fn micros(dollars: f64) -> u64 {
    if dollars.is_finite() && dollars > 0.0 {
        (dollars * 1e6).round() as u64
    } else {
        0
    }
}

impl Usage {
    pub fn new(prompt: u64, completion: u64) -> Self {
        Usage {
            prompt,
            completion,
            total: prompt + completion,
            ..Usage::default()
        }
    }

    /// "1234 tokens", with ", $0.0123" when they cost a known amount.
    pub fn spent(&self) -> String {
        let tokens = crate::text::count(self.total, "token");
        match self.cost() {
            Some(dollars) if self.cost_micros > 0 => format!("{tokens}, ${dollars:.4}"),
            _ => tokens,
        }
    }

    /// The cost as a table cell: "$0.0123", or "-" when unknown.
    pub fn dollars(&self) -> String {
        self.cost()
            .map_or_else(|| "-".to_string(), |dollars| format!("${dollars:.4}"))
    }

    /// The cost in dollars, `None` when some of it is unknown.
    pub fn cost(&self) -> Option<f64> {
        (!self.unpriced).then(|| self.cost_micros as f64 / 1e6)
    }

    /// Tokens guessed from text, about four characters each: enough for a
    /// budget to hold where an endpoint reports no usage.
    pub fn estimate(prompt_chars: usize, completion_chars: usize) -> Self {
        let tokens = |chars: usize| u64::try_from(chars.div_ceil(4)).unwrap_or(u64::MAX);
        Usage {
            estimated: true,
            ..Usage::new(tokens(prompt_chars), tokens(completion_chars))
        }
    }

    pub fn add(&mut self, other: Usage) {
        self.prompt += other.prompt;
        self.completion += other.completion;
        self.total += other.total;
        self.estimated |= other.estimated;
        self.cached += other.cached;
        self.cost_micros += other.cost_micros;
        self.unpriced |= other.unpriced;
    }
}
