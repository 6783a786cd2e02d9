//! The parent: everything `troupe` does with children.
//!
//! `command` builds a child's command line (the one place a launcher prefix
//! will go), `serve` answers one child over the pipe and stops it when it
//! must, `session` finds and kills whatever a child left behind, `spawn`
//! runs one agent from task file to result object, and `progress` shows it
//! all to a person on stderr. `plan` parses and checks a Planner's plan.

pub mod child;
pub mod command;
pub mod events;
pub mod interrupt;
pub mod launcher;
pub mod notify;
pub mod progress;
pub mod registry;
pub mod result;
pub mod serve;
mod served;
pub mod spawn;
pub mod status;
pub mod violation;

pub use child::{ChildOutcome, ServeLimits};
pub use command::Hygiene;
pub use events::{AgentEvent, EventSink};
pub use progress::Progress;
pub use result::AgentResult;
pub use spawn::{AgentRun, AgentSettings, SpawnConfig, SpawnError, spawn_agent};
