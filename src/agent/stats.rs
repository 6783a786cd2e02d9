//! The agent's counters, shared by the loop that counts and the heartbeat
//! that reports them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::chat::Usage;
use crate::protocol::{AgentStats, SandboxReport, UnstartedServer, round_seconds};
use crate::tools::Counter;

pub struct StatsCounter {
    started: Instant,
    files_read: AtomicU64,
    searches: AtomicU64,
    commands: AtomicU64,
    mcp_calls: AtomicU64,
    web_pages: AtomicU64,
    model_wait_us: AtomicU64,
    usage: Mutex<Usage>,
    sandbox: Option<SandboxReport>,
    /// Set once the agent's MCP servers are started.
    unstarted: OnceLock<Vec<UnstartedServer>>,
}

impl StatsCounter {
    pub fn new(sandbox: Option<SandboxReport>) -> Self {
        StatsCounter {
            sandbox,
            started: Instant::now(),
            files_read: AtomicU64::new(0),
            searches: AtomicU64::new(0),
            commands: AtomicU64::new(0),
            mcp_calls: AtomicU64::new(0),
            web_pages: AtomicU64::new(0),
            model_wait_us: AtomicU64::new(0),
            usage: Mutex::new(Usage::default()),
            unstarted: OnceLock::new(),
        }
    }

    /// The MCP servers that did not start, once they all were tried.
    pub fn servers_unstarted(&self, servers: Vec<UnstartedServer>) {
        let _ = self.unstarted.set(servers);
    }

    pub fn count(&self, counter: Counter) {
        let cell = match counter {
            Counter::FilesRead => &self.files_read,
            Counter::Searches => &self.searches,
            Counter::Commands => &self.commands,
            Counter::McpCalls => &self.mcp_calls,
            Counter::WebPages => &self.web_pages,
        };
        cell.fetch_add(1, Ordering::Relaxed);
    }

    pub fn add_usage(&self, usage: Usage) {
        if let Ok(mut total) = self.usage.lock() {
            total.add(usage);
        }
    }

    /// Time spent waiting for one model answer.
    pub fn waited(&self, wait: Duration) {
        let us = u64::try_from(wait.as_micros()).unwrap_or(u64::MAX);
        self.model_wait_us.fetch_add(us, Ordering::Relaxed);
    }

    pub fn usage(&self) -> Usage {
        self.usage.lock().map(|u| *u).unwrap_or_default()
    }

    pub fn snapshot(&self) -> AgentStats {
        AgentStats {
            runtime_seconds: round_seconds(self.started.elapsed().as_secs_f64()),
            files_read: self.files_read.load(Ordering::Relaxed),
            searches: self.searches.load(Ordering::Relaxed),
            web_pages: self.web_pages.load(Ordering::Relaxed),
            commands: self.commands.load(Ordering::Relaxed),
            token_usage: self.usage.lock().map(|u| *u).unwrap_or_default(),
            sandbox: self.sandbox.clone(),
            mcp_calls: self.mcp_calls.load(Ordering::Relaxed),
            mcp_unstarted: self.unstarted.get().cloned().unwrap_or_default(),
            transcript_ms: None,
            model_wait_ms: Some(self.model_wait_us.load(Ordering::Relaxed) as f64 / 1000.0),
        }
    }
}
