//! Traces of a run, exported over OTLP/HTTP (protobuf) when an endpoint
//! is set, and nothing at all when none is.
//!
//! troupe makes every span from what it sees and owns: the run, its
//! planning, each step and attempt, each agent's life, the model requests
//! it answers, the tool calls its agents report, landings and applies.
//! An agent links no exporter and needs no network: it only hands its
//! span on to its commands (`protocol::trace`). `settings` reads where
//! the spans go, `export` owns the one batching exporter of the process,
//! `span` is a span being made, and `genai` names a model request as the
//! GenAI semantic conventions do. Calls `protocol`, `chat`, `llm`.

mod export;
pub mod genai;
pub mod settings;
mod span;

pub use export::{finish, incoming_tracestate, start};
pub use settings::ExportSettings;
pub use span::Span;
