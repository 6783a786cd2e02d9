//! Model Context Protocol tool servers for agents: how they are
//! configured (`config`), one server started and spoken to (`client`),
//! one server managed through its life, restarted once when it dies
//! (`managed`), the servers troupe reaches for its agents (`remote`), and
//! what a server the agent starts must read to start (`install`).
//! The tools they give an agent are in `tools::mcp`. Calls `protocol`
//! (the server as a task file carries it), `process`, `sandbox`, `fsutil`
//! and `text`.

pub mod client;
pub mod config;
pub mod install;
pub mod managed;
pub mod remote;
