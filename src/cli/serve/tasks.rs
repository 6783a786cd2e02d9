//! MCP tasks, as rmcp serves them (the protocol's tasks extension,
//! `io.modelcontextprotocol/tasks`): a host that declares the extension
//! gets `create_sub_agent` and `run_team` as tasks, which it polls with
//! `tasks/get` (the agent's last line as the status message, the result
//! object once it ended) and stops with `tasks/cancel` (the agent is
//! terminated, its partial results kept). A host without tasks uses the
//! tools as they are; nothing else depends on them.

use std::sync::Arc;

use rmcp::model::Task;
use rmcp::task_manager::{TaskExit, TaskOptions};
use tokio_util::sync::CancellationToken;

use super::answers::answer;
use super::calls::{CreateArgs, RunTeamArgs};
use super::progress::Progress;
use super::session::Session;
use super::{Server, agents, runs};

/// A call a task may carry.
pub enum Long {
    Create(CreateArgs),
    Team(RunTeamArgs),
}

/// How long a finished task's result is kept for `tasks/get`, past the
/// longest its work may take.
const KEPT_MS: u64 = 3_600_000;

/// The longest a team run's task may work: a day.
const TEAM_MS: u64 = 24 * 3_600_000;

/// Starts `long` as a task of the server's and returns it at once.
pub fn start(server: Arc<Server>, session: Arc<Session>, long: Long) -> Task {
    let ttl = match &long {
        Long::Create(args) => args.timeout_seconds.unwrap_or(600).saturating_mul(1000) + KEPT_MS,
        Long::Team(_) => TEAM_MS,
    };
    let tasks = server.tasks.clone();
    tasks.spawn(TaskOptions::new().with_ttl_ms(ttl), move |task| {
        Box::pin(async move {
            let cancel = CancellationToken::new();
            let (name, work) = match long {
                Long::Create(args) => {
                    let progress = Progress::new(None).for_task(task.clone());
                    let work: std::pin::Pin<Box<dyn Future<Output = _> + Send + '_>> = Box::pin(
                        agents::create(&server, &session, args, progress, cancel.clone()),
                    );
                    ("create_sub_agent", work)
                }
                Long::Team(args) => {
                    let work: std::pin::Pin<Box<dyn Future<Output = _> + Send + '_>> =
                        Box::pin(runs::run_team(&server, &session, args, cancel.clone()));
                    ("run_team", work)
                }
            };
            let mut work = work;
            let outcome = tokio::select! {
                outcome = &mut work => outcome,
                () = task.cancelled() => {
                    cancel.cancel();
                    let _ = (&mut work).await;
                    return Err(TaskExit::Cancelled);
                }
            };
            Ok(answer(name, outcome, Vec::new()))
        })
    })
}
