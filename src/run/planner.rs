//! The Planner: a model conversation in the parent, with no tools. Goal in,
//! plan out; later, failures in, a plan for the rest out. The conversation
//! continues across replans so the planner sees what it planned before,
//! and it is kept as a transcript like any agent's.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use crate::chat::{Actor, AgentKey};
use crate::chat::{Message, Usage};
use crate::llm::{ChatModel, CompletionRequest, DelayObserver};
use crate::plan::{Plan, parse_plan_with, plan_schema};
use crate::prompts::{Prompt, Prompts, render};
use crate::protocol::{AgentId, AgentStats, AgentStatus, TraceParent};
use crate::telemetry::Span;
use crate::transcript::Conversation;

/// Why no plan came back.
#[derive(Debug)]
pub enum PlanFailure {
    /// The planner could not be asked: its model failed (an endpoint
    /// nobody listens on, a bad key) or its prompt could not be read.
    NoAnswer(String),
    /// It answered, and the answer is not a valid plan.
    Invalid { reason: String, answer: String },
}

impl std::fmt::Display for PlanFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlanFailure::NoAnswer(why) => f.write_str(why),
            PlanFailure::Invalid { reason, .. } => {
                write!(f, "the planner's plan is invalid: {reason}")
            }
        }
    }
}

/// What a replan is asked with.
pub struct ReplanContext<'a> {
    pub goal: &'a str,
    /// The plan being run, as it stands.
    pub plan: &'a Plan,
    /// What failed, and the steps that completed and stay, in words.
    pub failed: &'a str,
    pub completed: &'a str,
    /// The run's step ids, and the completed ones.
    pub taken: &'a HashSet<String>,
    pub done: &'a HashSet<String>,
}

pub struct Planner {
    model: Arc<dyn ChatModel>,
    prompts: Prompts,
    conversation: Conversation,
    /// Where the conversation is kept, when it is.
    transcript: Option<PathBuf>,
    /// Told of each retry of a request, and each wait for a rate limit.
    on_delay: Option<DelayObserver>,
    /// What its plans' steps may ask for.
    ceiling: Option<super::ceiling::Ceiling>,
    /// The run's span, which each planning is a child of.
    trace: Option<TraceParent>,
}

impl Planner {
    /// A planner whose conversation is kept in `transcript`; a run being
    /// resumed continues the conversation already there.
    pub fn new(model: Arc<dyn ChatModel>, prompts: Prompts, transcript: Option<PathBuf>) -> Self {
        let earlier = transcript
            .as_deref()
            .and_then(|path| crate::transcript::load(path).ok());
        let conversation = earlier.unwrap_or_else(|| {
            Conversation::new(
                AgentId::new("planner"),
                "planner".to_string(),
                Actor::Planner,
                "plan the run".to_string(),
            )
        });
        Planner {
            model,
            prompts,
            conversation,
            transcript,
            on_delay: None,
            ceiling: None,
            trace: None,
        }
    }

    /// The planner, whose plannings are spans under the run's `trace`.
    pub fn in_trace(mut self, trace: Option<TraceParent>) -> Self {
        self.trace = trace;
        self
    }

    /// The planner, whose plans are refused when a step asks for more than
    /// `ceiling`.
    pub fn with_ceiling(mut self, ceiling: super::ceiling::Ceiling) -> Self {
        self.ceiling = Some(ceiling);
        self
    }

    /// `plan`, unless one of its steps asks for more than the ceiling.
    fn within_ceiling(&self, plan: Plan, answer: String) -> Result<Plan, PlanFailure> {
        match self.ceiling.as_ref().map(|c| c.check(&plan)) {
            Some(Err(beyond)) => Err(PlanFailure::Invalid {
                reason: beyond.to_string(),
                answer,
            }),
            _ => Ok(plan),
        }
    }

    /// The planner, with `observer` told of each retry of a request and
    /// each wait for a rate limit.
    pub fn with_delays(mut self, observer: DelayObserver) -> Self {
        self.on_delay = Some(observer);
        self
    }

    pub async fn plan(&mut self, goal: &str) -> Result<Plan, PlanFailure> {
        self.open()?;
        let none = HashSet::new();
        self.planned("troupe.planning", format!("Goal: {goal}"), &none, &none)
            .await
    }

    /// The system prompt, which says what a plan looks like.
    fn open(&mut self) -> Result<(), PlanFailure> {
        let system = self.prompt(Prompt::Planner);
        self.conversation
            .messages
            .push(Message::system(render(&system, &[])));
        Ok(())
    }

    /// A plan for the rest of the work, after `failed`; `completed` lists
    /// what stays. `taken` and `done` are the run's step ids and the
    /// completed ones. A planner that did not make the plan (`troupe run
    /// --plan`) is told first what a plan is, the goal, and the plan.
    pub async fn replan(&mut self, context: &ReplanContext<'_>) -> Result<Plan, PlanFailure> {
        let template = self.prompt(Prompt::Replan);
        let mut question = render(
            &template,
            &[("failed", context.failed), ("completed", context.completed)],
        );
        if self.conversation.messages.is_empty() {
            self.open()?;
            let plan = serde_json::to_string_pretty(context.plan).unwrap_or_default();
            question = format!(
                "Goal: {}\n\nThe plan being run, which the user gave:\n\n```json\n{plan}\n```\n\n{question}",
                context.goal
            );
        }
        let (taken, done) = (context.taken, context.done);
        self.planned("troupe.replanning", question, taken, done)
            .await
    }

    /// The plan the answer to `question` gives, read with the step ids
    /// `taken` and `done`, within the ceiling; asked in a span named
    /// `span_name`, which ends with what it gave.
    async fn planned(
        &mut self,
        span_name: &'static str,
        question: String,
        taken: &HashSet<String>,
        done: &HashSet<String>,
    ) -> Result<Plan, PlanFailure> {
        let span = Span::under(self.trace, span_name);
        let planned = match self.ask(question, &span).await {
            Ok(answer) => match parse_plan_with(&answer, taken, done) {
                Ok((plan, renamed)) => {
                    for (old, new) in &renamed {
                        crate::tell!(
                            "troupe: the Planner named a new step `{old}`, an id this run has: it is `{new}`"
                        );
                    }
                    self.within_ceiling(plan, answer)
                }
                Err(e) => Err(PlanFailure::Invalid {
                    reason: e.to_string(),
                    answer,
                }),
            },
            Err(failure) => Err(failure),
        };
        planned_in(&span, &planned);
        planned
    }

    async fn ask(&mut self, question: String, span: &Span) -> Result<String, PlanFailure> {
        self.conversation.messages.push(Message::user(question));
        let agent = AgentKey {
            role: Actor::Planner,
            step: None,
            attempt: None,
        };
        let request = CompletionRequest {
            schema: Some(plan_schema()),
            on_delay: self.on_delay.clone(),
            ..CompletionRequest::new(agent, self.conversation.messages.clone(), Vec::new())
        };
        let result = crate::telemetry::genai::complete(span.context(), &*self.model, request).await;
        let answer = match result {
            Ok(completion) => {
                let text = completion.message.text().to_string();
                self.conversation.messages.push(completion.message);
                self.add_usage(completion.usage);
                text
            }
            Err(e) => {
                self.conversation.error = Some(e.to_string());
                self.save(AgentStatus::Error);
                return Err(PlanFailure::NoAnswer(format!(
                    "the planner's model failed: {e}"
                )));
            }
        };
        self.save(AgentStatus::Completed);
        Ok(answer)
    }

    fn add_usage(&mut self, usage: Usage) {
        let stats: &mut AgentStats = &mut self.conversation.stats;
        stats.token_usage.add(usage);
    }

    fn prompt(&self, prompt: Prompt) -> String {
        self.prompts.text(prompt)
    }

    fn save(&mut self, status: AgentStatus) {
        let Some(path) = &self.transcript else { return };
        self.conversation.status = status;
        self.conversation.completed_at = Some(chrono::Utc::now());
        let dir = path.parent().unwrap_or(path);
        let saved = crate::fsutil::nofollow::create_dir_all(dir).and_then(|_| {
            crate::fsutil::write_json_atomic(
                path,
                &self.conversation,
                crate::fsutil::Durability::Commit,
            )
        });
        if let Err(e) = saved {
            crate::tell!(
                "troupe: cannot write the planner's transcript {}: {e}",
                path.display()
            );
        }
    }
}

/// A planning's span, ended with what it gave.
fn planned_in(span: &Span, planned: &Result<Plan, PlanFailure>) {
    match planned {
        Ok(plan) => {
            span.set("troupe.plan.steps", plan.steps.len() as i64);
            span.succeed();
        }
        Err(failure) => span.fail(failure.to_string()),
    }
    span.end();
}
