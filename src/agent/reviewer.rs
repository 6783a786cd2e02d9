//! The reviewer's loop: inspect the real workspace with read-only tools,
//! then answer a verdict. The first answer without tool calls is the
//! verdict; if the model runs out of turns or goes in circles it is asked
//! for its verdict with tools off. Either way the answer is parsed strictly
//! (see `protocol::verdict`), so a reviewer that rambles rejects, never
//! approves; the parent reads the same answer the same way and holds this
//! verdict to it. An empty answer is no verdict at all: the review fails,
//! and the run tries another reviewer, rather than tell the worker it was
//! rejected for nothing.

use super::session::{AgentFailure, LoopEnd, Session};
use crate::chat::Message;
use crate::prompts::Prompt;
use crate::protocol::{StopReason, parse_verdict};

pub async fn run(mut session: Session<'_>) -> LoopEnd {
    match drive(&mut session).await {
        Ok(end) | Err(end) => end,
    }
}

async fn drive(session: &mut Session<'_>) -> Result<LoopEnd, LoopEnd> {
    session.open(Prompt::Reviewer, Prompt::ReviewerTask)?;
    loop {
        if let Some(limit) = session.next_turn() {
            return verdict_now(session, limit).await;
        }
        let reply = session.ask(true).await?;
        if reply.tool_calls.is_empty() {
            return verdict(&reply);
        }
        session.run_calls(&reply.tool_calls).await?;
        if session.stagnating() {
            return verdict_now(session, StopReason::Stagnation).await;
        }
    }
}

async fn verdict_now(session: &mut Session<'_>, reason: StopReason) -> Result<LoopEnd, LoopEnd> {
    session.say(Prompt::ReviewerWrapUp, &[("reason", reason.describe())])?;
    let reply = session.ask(false).await?;
    verdict(&reply)
}

fn verdict(reply: &Message) -> Result<LoopEnd, LoopEnd> {
    if reply.text().trim().is_empty() {
        return Err(LoopEnd::Failed(AgentFailure::EmptyAnswer));
    }
    Ok(LoopEnd::Verdict(parse_verdict(reply.text())))
}
