//! troupe: a supervisor for teams of LLM agents, each one its own process.
//!
//! Two processes, one pipe:
//!
//! - the parent, `troupe` ([`cli`]), holds the API key and the HTTP client
//!   ([`llm`]), writes each agent's task file, starts the child, answers
//!   its model requests, enforces timeouts and kills what overruns
//!   ([`supervisor`], one child at a time); a team run ([`run`]) plans a
//!   goal ([`plan`]) and runs its steps, each worker and reviewer such a
//!   child, and leaves its record ([`record`]) for [`inspect`];
//! - the child, `troupe-agent` ([`agent`]), runs one agent's tool loop
//!   ([`tools`]) in its own directory, asks the parent for every
//!   completion, and keeps its transcript ([`transcript`]) current on disk.
//!
//! They speak JSON lines over the child's stdin and stdout ([`protocol`]),
//! in the vocabulary of [`chat`]. `supervisor` and `agent` never import
//! each other: a child written in any language that speaks the protocol can
//! stand in for `troupe-agent`. Every process either side starts is
//! started by the rules of [`process`].

pub mod agent;
pub mod chat;
pub mod cli;
pub mod console;
pub mod deadline;
pub mod fsutil;
pub mod git;
pub mod inspect;
pub mod llm;
pub mod mcp;
pub mod paint;
pub mod plan;
pub mod process;
pub mod prompts;
pub mod protocol;
pub mod record;
pub mod run;
pub mod sandbox;
pub mod settings;
pub mod signal;
pub mod supervisor;
pub mod telemetry;
pub mod text;
pub mod timefmt;
pub mod tools;
pub mod transcript;
pub mod web;
