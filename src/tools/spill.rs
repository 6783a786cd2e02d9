//! Keeping large tool output out of the conversation without losing it.
//!
//! Output over the cap is cut in the message the model reads, and written
//! whole to `.subagent/outputs/<call id>.txt`, which the model may page
//! through with `read_file`.

use std::io::Write;

use super::{ToolContext, ToolOutput};
use crate::protocol::SUBAGENT_DIR;

/// `output` with its content cut to the agent's output cap, the whole of
/// it spilled to `.subagent/outputs/<call id>.txt` (as much of it as
/// `--max-file-size` lets a file hold). When the spill cannot be written
/// the output is still cut, and says so.
pub fn cap_output(mut output: ToolOutput, ctx: &ToolContext, call_id: &str) -> ToolOutput {
    let cap = ctx.limits.output_cap_bytes;
    if output.content.len() <= cap {
        return output;
    }
    let total = output.content.len();
    let file_name: String = call_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let spill_dir = ctx.fence.agent_dir().join(SUBAGENT_DIR).join("outputs");
    let path = spill_dir.join(format!("{file_name}.txt"));
    let max = ctx
        .limits
        .max_file_size
        .and_then(|max| usize::try_from(max).ok())
        .unwrap_or(usize::MAX);
    let spilled = crate::text::prefix(&output.content, max);
    let saved = ctx
        .records
        .subdir("outputs")
        .and_then(|dir| dir.create_file(&format!("{file_name}.txt")))
        .and_then(|mut file| file.write_all(spilled.as_bytes()));
    let shown = ctx.fence.display(&path);
    let note = match saved {
        Ok(()) if spilled.len() < total => format!(
            "[output cut at {cap} of {total} bytes; its first {} bytes (--max-file-size) are in {shown}: read them with read_file and offset/limit]",
            spilled.len()
        ),
        Ok(()) => format!(
            "[output cut at {cap} of {total} bytes; the whole output is in {shown}: read it with read_file and offset/limit]"
        ),
        Err(e) => format!("[output cut at {cap} of {total} bytes; saving the rest failed: {e}]"),
    };
    let kept = crate::text::prefix(&output.content, cap).to_string();
    output.content = format!("{kept}\n{note}");
    output
}
