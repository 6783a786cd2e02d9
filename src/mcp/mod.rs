//! Model Context Protocol tool servers for agents: how they are
//! configured (`config`), and one server started and spoken to
//! (`client`). The tools they give an agent are in `tools::mcp`.

pub mod client;
pub mod config;
pub mod remote;
