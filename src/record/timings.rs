//! Where troupe's own time went around one agent, as `result.json` and
//! `run.json` keep it.

use serde::{Deserialize, Serialize};

/// The parent's clock on one child, in milliseconds: what troupe adds on
/// top of the agent's work, for the benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentTimings {
    /// From spawning the process to its `hello`.
    pub startup_ms: f64,
    /// From `hello` to its report (`finished`, `verdict` or `error`).
    pub working_ms: f64,
    /// From the report to the process's exit.
    pub exit_ms: f64,
    /// From the exit to the session confirmed empty and the child reaped.
    pub teardown_ms: f64,
    /// What the child spent writing its transcript, as it reported.
    #[serde(default)]
    pub transcript_ms: f64,
    /// What the child spent waiting for model answers, as it reported.
    #[serde(default)]
    pub model_wait_ms: f64,
    /// Model requests the parent answered.
    #[serde(default)]
    pub completions: u32,
}
