//! The run-wide limits: how many child processes a run may start and how
//! many tokens it may spend. Every token passes through `counting`, the
//! planner's included, so the total is the endpoint's own count.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;

use crate::chat::Usage;
use crate::llm::{ChatModel, Completion, CompletionRequest, LlmError};
use crate::signal::Exhausted;

pub struct Budget {
    max_agents: u32,
    max_tokens: Option<u64>,
    /// `--max-cost`, in millionths of a dollar.
    max_cost_micros: Option<u64>,
    agents: AtomicU32,
    spent: Arc<Spent>,
}

/// What the run's models spent, tokens and cost together.
#[derive(Default)]
struct Spent(Mutex<Usage>);

impl Spent {
    fn add(&self, usage: Usage) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).add(usage);
    }

    fn get(&self) -> Usage {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Budget {
    pub fn new(max_agents: u32, max_tokens: Option<u64>) -> Self {
        Budget {
            max_agents,
            max_tokens,
            max_cost_micros: None,
            agents: AtomicU32::new(0),
            spent: Arc::default(),
        }
    }

    /// The budget, spending at most `dollars` (`--max-cost`).
    pub fn costing_at_most(self, dollars: Option<f64>) -> Self {
        Budget {
            max_cost_micros: dollars.map(crate::chat::micros),
            ..self
        }
    }

    /// A budget part of which an earlier session of the run spent.
    pub fn already_spent(self, agents: u32, usage: Usage) -> Self {
        self.agents.store(agents, Ordering::Relaxed);
        self.spent.add(usage);
        self
    }

    /// Which budget keeps a new agent from starting, if one does.
    pub fn exhausted(&self) -> Option<Exhausted> {
        if self.agents.load(Ordering::Relaxed) >= self.max_agents {
            return Some(Exhausted::Agents {
                max: self.max_agents,
            });
        }
        let spent = self.spent.get();
        if let Some(max) = self.max_tokens.filter(|max| spent.total >= *max) {
            return Some(Exhausted::Tokens {
                spent: spent.total,
                max,
            });
        }
        self.max_cost_micros
            .filter(|max| spent.cost_micros >= *max)
            .map(|max| Exhausted::Cost {
                spent_micros: spent.cost_micros,
                max_micros: max,
            })
    }

    /// Counts one more agent, or says which budget keeps it from starting.
    pub fn admit(&self) -> Result<(), Exhausted> {
        if let Some(why) = self.exhausted() {
            return Err(why);
        }
        self.agents.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    pub fn agents(&self) -> u32 {
        self.agents.load(Ordering::Relaxed)
    }

    pub fn usage(&self) -> Usage {
        self.spent.get()
    }

    /// `model`, counting every token it spends against this budget.
    pub fn counting(&self, model: Arc<dyn ChatModel>) -> Arc<dyn ChatModel> {
        Arc::new(Counting {
            inner: model,
            spent: Arc::clone(&self.spent),
        })
    }
}

struct Counting {
    inner: Arc<dyn ChatModel>,
    spent: Arc<Spent>,
}

impl ChatModel for Counting {
    fn complete(&self, request: CompletionRequest) -> BoxFuture<'_, Result<Completion, LlmError>> {
        Box::pin(async move {
            let completion = self.inner.complete(request).await?;
            self.spent.add(completion.usage);
            Ok(completion)
        })
    }

    fn identity(&self) -> (&'static str, &str) {
        self.inner.identity()
    }
}
