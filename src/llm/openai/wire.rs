//! The chat-completions JSON, as providers really send it.
//!
//! Every field that some provider leaves out is optional, `finish_reason` is
//! read only for `length` (sglang sends "", TGI "eos_token"), tool arguments may
//! be a JSON string or an object (llama.cpp), content may be a string, null
//! or a list of parts, reasoning may be called `reasoning_content` or
//! `reasoning` (Ollama), and fields nobody here knows are kept.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::chat::{Message, Role, ToolCall, ToolSpec, Usage};

use super::echo::ReasoningEcho;

/// The request body.
#[derive(Debug, Serialize)]
pub struct ChatRequest<'a> {
    pub model: &'a str,
    pub messages: Vec<Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// What OpenAI's own endpoint takes instead of `max_tokens`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_format: Option<Value>,
}

/// `response_format` asking for JSON that follows `schema`.
pub fn response_format(schema: &Value) -> Value {
    serde_json::json!({
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": schema}
    })
}

pub fn tool_json(spec: &ToolSpec) -> Value {
    serde_json::json!({
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
        }
    })
}

/// One message as the provider expects it, with `reasoning_content` sent
/// or withheld as the endpoint needs.
pub fn message_json(message: &Message, echo: ReasoningEcho) -> Value {
    let mut out = Map::new();
    for (key, value) in &message.extra {
        if !value.is_null() {
            out.insert(key.clone(), value.clone());
        }
    }
    out.insert(
        "role".into(),
        serde_json::to_value(message.role).unwrap_or(Value::Null),
    );
    out.insert(
        "content".into(),
        message
            .content
            .clone()
            .map(Value::String)
            .unwrap_or(Value::Null),
    );
    if !message.tool_calls.is_empty() {
        // Arguments the model wrote that are not JSON go back as a JSON
        // string of what it wrote, so a strict server takes the history.
        let calls: Vec<ToolCall> = message
            .tool_calls
            .iter()
            .map(|call| {
                let mut call = call.clone();
                let raw = &call.function.arguments;
                if serde_json::from_str::<Value>(raw).is_err() {
                    call.function.arguments = Value::String(raw.clone()).to_string();
                }
                call
            })
            .collect();
        out.insert(
            "tool_calls".into(),
            serde_json::to_value(&calls).unwrap_or(Value::Null),
        );
    }
    if let Some(id) = &message.tool_call_id {
        out.insert("tool_call_id".into(), Value::String(id.clone()));
    }
    if message.role == Role::Assistant {
        let reasoning = match echo {
            ReasoningEcho::Never => None,
            ReasoningEcho::Keep => message.reasoning_content.clone(),
            ReasoningEcho::Always => Some(message.reasoning_content.clone().unwrap_or_default()),
        };
        if let Some(reasoning) = reasoning {
            out.insert("reasoning_content".into(), Value::String(reasoning));
        }
    }
    Value::Object(out)
}

/// The response body.
#[derive(Debug, Deserialize)]
pub struct ChatResponse {
    #[serde(default)]
    pub choices: Vec<Choice>,
    #[serde(default)]
    pub usage: Option<WireUsage>,
    /// Some gateways answer 200 with an error object.
    #[serde(default)]
    pub error: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub struct Choice {
    #[serde(default)]
    pub message: Option<WireMessage>,
    /// Read only for `length`: an answer cut at its limit.
    #[serde(default)]
    pub finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct WireMessage {
    #[serde(default)]
    pub content: Option<Content>,
    #[serde(default)]
    pub tool_calls: Option<Vec<WireToolCall>>,
    #[serde(default)]
    pub reasoning_content: Option<String>,
    #[serde(default)]
    pub reasoning: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Value>),
}

impl Content {
    fn into_text(self) -> String {
        match self {
            Content::Text(text) => text,
            Content::Parts(parts) => parts
                .iter()
                .filter_map(|part| part.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(""),
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct WireToolCall {
    #[serde(default)]
    pub id: Option<String>,
    pub function: WireFunction,
}

#[derive(Debug, Deserialize)]
pub struct WireFunction {
    pub name: String,
    #[serde(default)]
    pub arguments: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
pub struct WireUsage {
    #[serde(default)]
    pub prompt_tokens: Option<u64>,
    #[serde(default)]
    pub completion_tokens: Option<u64>,
    #[serde(default)]
    pub total_tokens: Option<u64>,
    /// OpenAI's (and most others'): `{"cached_tokens": N}`.
    #[serde(default)]
    pub prompt_tokens_details: Option<PromptDetails>,
    /// DeepSeek's.
    #[serde(default)]
    pub prompt_cache_hit_tokens: Option<u64>,
    /// Moonshot's (Kimi), beside the tokens.
    #[serde(default)]
    pub cached_tokens: Option<u64>,
    /// What the provider charged, in dollars (OpenRouter's `usage.cost`).
    #[serde(default)]
    pub cost: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
pub struct PromptDetails {
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

impl WireUsage {
    /// The usage, priced: the provider's own cost where it gave one, else
    /// `price`'s, else unknown.
    pub fn into_usage(self, price: Option<&crate::llm::Price>) -> Usage {
        let prompt = self.prompt_tokens.unwrap_or(0);
        let completion = self.completion_tokens.unwrap_or(0);
        let cached = (self.prompt_tokens_details.and_then(|d| d.cached_tokens))
            .or(self.prompt_cache_hit_tokens)
            .or(self.cached_tokens)
            .unwrap_or(0)
            .min(prompt);
        let usage = Usage {
            cached,
            total: self.total_tokens.unwrap_or(prompt + completion),
            ..Usage::new(prompt, completion)
        };
        match self.cost.filter(|c| c.is_finite() && *c >= 0.0) {
            Some(dollars) => Usage {
                cost_micros: crate::chat::micros(dollars),
                ..usage
            },
            None => crate::llm::priced(usage, price),
        }
    }
}

impl WireMessage {
    /// Our message. Whether the turn has tool calls is decided by the calls
    /// present, never by `finish_reason`. Calls without an id get one, so
    /// their results can answer them.
    pub fn into_message(self, turn_id: &str) -> Message {
        let tool_calls = self
            .tool_calls
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, call)| {
                let id = call
                    .id
                    .filter(|id| !id.is_empty())
                    .unwrap_or_else(|| format!("call_{turn_id}_{i}"));
                let arguments = match call.function.arguments {
                    None | Some(Value::Null) => "{}".to_string(),
                    Some(Value::String(text)) => text,
                    Some(other) => other.to_string(),
                };
                ToolCall::new(id, call.function.name, arguments)
            })
            .collect();
        let mut extra = self.extra;
        extra.remove("role");
        extra.retain(|_, value| !value.is_null());
        Message {
            role: Role::Assistant,
            content: self.content.map(Content::into_text),
            tool_calls,
            tool_call_id: None,
            reasoning_content: self.reasoning_content.or(self.reasoning),
            extra,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_tokens_are_read_in_each_providers_shape() {
        let cached = |usage: serde_json::Value| {
            serde_json::from_value::<WireUsage>(usage)
                .map(|u| u.into_usage(None).cached)
                .ok()
        };
        let tokens = serde_json::json!({"prompt_tokens": 100, "completion_tokens": 5});
        let with = |extra: serde_json::Value| {
            let mut usage = tokens.clone();
            if let (Some(usage), Some(extra)) = (usage.as_object_mut(), extra.as_object()) {
                usage.extend(extra.clone());
            }
            usage
        };
        let openai = with(serde_json::json!({"prompt_tokens_details": {"cached_tokens": 40}}));
        let deepseek = with(serde_json::json!({"prompt_cache_hit_tokens": 30}));
        let moonshot = with(serde_json::json!({"cached_tokens": 20}));
        let beyond = with(serde_json::json!({"cached_tokens": 500}));
        assert_eq!(cached(openai), Some(40));
        assert_eq!(cached(deepseek), Some(30));
        assert_eq!(cached(moonshot), Some(20));
        assert_eq!(cached(beyond), Some(100), "never more than the prompt");
        assert_eq!(cached(tokens), Some(0));
    }
}
