//! The ways a child can break the protocol, as the parent finds them: a
//! line that does not decode, or a message the parent can check and finds
//! wrong. Each one ends the child with status `error`.

use crate::protocol::{AgentRole, PROTOCOL_VERSION, ProtocolError};

/// Model requests one child may have in flight. The agent asks one at a
/// time; a child that floods the parent with requests is broken, and must
/// not reach the endpoint with them.
pub const MAX_PENDING_REQUESTS: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum Violation {
    #[error(transparent)]
    Line(#[from] ProtocolError),
    #[error("the first line must be `hello`, not `{0}`")]
    NoHello(String),
    #[error("the child speaks protocol {0}, this troupe speaks {PROTOCOL_VERSION}")]
    Version(u32),
    #[error("the child says it is a {said}, but it was started as a {started}")]
    Role { said: AgentRole, started: AgentRole },
    #[error("model request {id} comes after request {last}; each request needs a new, higher id")]
    RequestOrder { id: u64, last: u64 },
    #[error(
        "the agent asked for more than {0} model answers, three for each turn of its limit (--max-turns) and the wrap-up"
    )]
    TooManyRequests(u32),
    #[error(
        "the agent asked for more model answers after it had spent its {0} tokens (--max-agent-tokens) than the three of a wrap-up"
    )]
    PastTokenCap(u64),
    #[error(
        "the agent asked for more model answers after it had spent its ${0:.2} (--max-agent-cost) than the three of a wrap-up"
    )]
    PastCostCap(f64),
    #[error("the agent says it ran `{0}`, which its step's powers do not give it")]
    NotItsTool(String),

    #[error("more than {MAX_PENDING_REQUESTS} model requests at once")]
    Flood,
    #[error("a {sender} sent `{kind}`, which only a {role} sends")]
    NotItsReport {
        sender: AgentRole,
        kind: &'static str,
        role: AgentRole,
    },
    #[error("a second `{0}`")]
    Repeated(&'static str),
    #[error("a verdict before any answer of the reviewer's model")]
    VerdictUnasked,
    #[error(
        "the reviewer reported approved: {reported}, but its model's last answer reads approved: {read}"
    )]
    VerdictDiffers { reported: bool, read: bool },
}
