//! What a newcomer meets in the first hour: closed pipes, an endpoint
//! that is not there, hand-written plan files, a mistyped spawn, numbers,
//! and the conveniences of the CLIs people already know.

mod conveniences;
mod errors;
mod mcp_servers;
mod pipes;
mod smaller;
