//! The parent's side of one child, and the background agents.
//!
//! One child: `command` builds its command line (the one place a launcher
//! prefix goes, `launcher` checks it), `serve` answers it over the pipe and
//! stops it when it must while `served` keeps and checks what it says
//! (`violation` lists what it may not), `child` holds the types they
//! share, `events` what happens to it, `spawn` runs one agent from
//! directory to `result`, `progress` shows it to a person on stderr, and
//! `interrupt` turns Ctrl-C into a stop. Background agents: `registry`
//! (whose lock says who runs), `status` (status.json) and `notify`
//! (`--on-finish`). Calls `chat`, `console`, `deadline`, `fsutil`, `llm`,
//! `mcp`, `paint`, `process`, `protocol`, `record`, `sandbox`, `signal`,
//! `text`, `timefmt`, `transcript`; never `agent` or `run`.

pub mod broker;
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
