//! The run-wide limits: how many child processes a run may start and how
//! many tokens it may spend. Every token passes through `counting`, the
//! planner's included, so the total is the endpoint's own count.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use futures_util::future::BoxFuture;

use crate::chat::Usage;
use crate::llm::{ChatModel, Completion, CompletionRequest, LlmError};
use crate::signal::Exhausted;

pub struct Budget {
    max_agents: u32,
    max_tokens: Option<u64>,
    agents: AtomicU32,
    spent: Arc<Spent>,
}

#[derive(Default)]
struct Spent {
    prompt: AtomicU64,
    completion: AtomicU64,
    total: AtomicU64,
    estimated: AtomicBool,
}

impl Spent {
    fn add(&self, usage: Usage) {
        self.prompt.fetch_add(usage.prompt, Ordering::Relaxed);
        self.completion
            .fetch_add(usage.completion, Ordering::Relaxed);
        self.total.fetch_add(usage.total, Ordering::Relaxed);
        if usage.estimated {
            self.estimated.store(true, Ordering::Relaxed);
        }
    }
}

impl Budget {
    pub fn new(max_agents: u32, max_tokens: Option<u64>) -> Self {
        Budget {
            max_agents,
            max_tokens,
            agents: AtomicU32::new(0),
            spent: Arc::default(),
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
        let spent = self.spent.total.load(Ordering::Relaxed);
        match self.max_tokens {
            Some(max) if spent >= max => Some(Exhausted::Tokens { spent, max }),
            _ => None,
        }
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
        Usage {
            prompt: self.spent.prompt.load(Ordering::Relaxed),
            completion: self.spent.completion.load(Ordering::Relaxed),
            total: self.spent.total.load(Ordering::Relaxed),
            estimated: self.spent.estimated.load(Ordering::Relaxed),
        }
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
