//! Integration tests: the real `troupe` and `troupe-agent` binaries, run
//! as child processes against temporary workspaces, with the model either
//! scripted or a real HTTP server on 127.0.0.1.

// Helpers and tests alike fail loudly on anything unexpected.
#![allow(clippy::unwrap_used)]

#[path = "../common/mod.rs"]
mod common;

mod background;
mod cost;
mod died;
mod durability;
mod fake_children;
mod faults;
mod hostile;
mod house;
mod http_client;
mod inspect;
mod isolation;
mod kills;
mod landing;
mod launcher;
mod mcp;
mod mcp_serve;
mod newcomer;
mod overlay;
mod prompt_cache;
mod rate;
mod real_endpoint;
mod real_models;
mod report_page;
mod sandbox;
mod slurm;
mod spawn_result;
mod team;
mod timeouts;
mod tool_fence;
mod tools;
mod traces;
mod usage;
mod web;
mod worker_loop;
