//! What a newcomer meets in the first hour: closed pipes, an endpoint
//! that is not there, hand-written plan files, a mistyped spawn, numbers,
//! the conveniences of the CLIs people already know, MCP servers where
//! users install them, and a README that reads in the order they work and
//! says what the code does.

mod contradictions;
mod conveniences;
mod errors;
mod markdown;
mod mcp_servers;
mod pipes;
mod readme;
mod smaller;
