//! The worker's ReAct loop: ask the model, run the tools
//! it calls, repeat until `finish_task`, with the guards that keep a
//! confused model from running forever: reminders when it stops without
//! finishing, and a tools-off wrap-up on stagnation, the turn limit or the
//! token limit. A model whose answers keep being cut at the output limit
//! fails the task with that reason, like one that goes in circles.

use super::session::{AgentFailure, LoopEnd, Session};
use crate::prompts::Prompt;
use crate::protocol::StopReason;

/// Reminders sent when the model answers without calling a tool.
const MAX_REMINDERS: u32 = 2;

pub async fn run(mut session: Session<'_>) -> LoopEnd {
    match drive(&mut session).await {
        Ok(end) | Err(end) => end,
    }
}

/// The loop proper; `Err` carries an early end (cancel, failure).
async fn drive(session: &mut Session<'_>) -> Result<LoopEnd, LoopEnd> {
    session.open(Prompt::Worker, Prompt::WorkerTask)?;
    let mut reminders = 0;
    loop {
        if let Some(limit) = session.next_turn() {
            return wrap_up(session, limit).await;
        }
        let reply = match session.ask(true).await {
            Ok(reply) => reply,
            Err(LoopEnd::Failed(cut @ AgentFailure::Truncated { .. })) => {
                return Ok(LoopEnd::Finished {
                    success: false,
                    summary: cut.to_string(),
                    stop_reason: StopReason::OutputLimit,
                    result: None,
                });
            }
            Err(end) => return Err(end),
        };
        if reply.tool_calls.is_empty() {
            if reminders < MAX_REMINDERS {
                reminders += 1;
                session.say(Prompt::Reminder, &[])?;
                continue;
            }
            let summary = match reply.text().trim() {
                "" => "The agent stopped without calling finish_task.".to_string(),
                text => text.to_string(),
            };
            return Ok(LoopEnd::Finished {
                success: false,
                summary,
                stop_reason: StopReason::NoFinishTask,
                result: None,
            });
        }
        let results = session.run_calls(&reply.tool_calls).await?;
        if let Some(finish) = results.iter().find_map(|r| r.output.finish.clone()) {
            return Ok(LoopEnd::Finished {
                success: finish.success,
                summary: finish.summary,
                stop_reason: StopReason::FinishTask,
                result: finish.result,
            });
        }
        if session.stagnating() {
            return wrap_up(session, StopReason::Stagnation).await;
        }
    }
}

/// Tools off, one last question: what was done. The answer is the partial
/// report.
async fn wrap_up(session: &mut Session<'_>, reason: StopReason) -> Result<LoopEnd, LoopEnd> {
    session.say(Prompt::WrapUp, &[("reason", reason.describe())])?;
    let summary = match session.ask(false).await {
        Ok(reply) => match reply.text().trim() {
            "" => format!("The agent {} and gave no report.", reason.describe()),
            text => text.to_string(),
        },
        Err(LoopEnd::Failed(error)) => {
            format!(
                "The agent {}; its report failed: {error}",
                reason.describe()
            )
        }
        Err(other) => return Err(other),
    };
    Ok(LoopEnd::Finished {
        success: false,
        summary,
        stop_reason: reason,
        result: None,
    })
}
