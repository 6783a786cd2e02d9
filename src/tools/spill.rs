//! Keeping large tool output out of the conversation without losing it.
//!
//! Output over the cap is cut in the message the model reads, and written
//! whole to `.subagent/outputs/<call id>.txt`, which the model may page
//! through with `read_file`.

use std::io::Write;
use std::path::Path;

use super::ToolOutput;

/// `output` with its content cut to `cap` bytes, the whole of it spilled
/// to a file in `spill_dir`. When the spill cannot be written the output is
/// still cut, and says so.
pub fn cap_output(
    mut output: ToolOutput,
    cap: usize,
    spill_dir: &Path,
    call_id: &str,
    show: impl Fn(&Path) -> String,
) -> ToolOutput {
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
    let path = spill_dir.join(format!("{file_name}.txt"));
    let saved = crate::fsutil::nofollow::create_dir_all(spill_dir)
        .and_then(|_| crate::fsutil::create_file(&path))
        .and_then(|mut file| file.write_all(output.content.as_bytes()));
    let note = match saved {
        Ok(()) => format!(
            "[output cut at {cap} of {total} bytes; the whole output is in {}: read it with read_file and offset/limit]",
            show(&path)
        ),
        Err(e) => format!("[output cut at {cap} of {total} bytes; saving the rest failed: {e}]"),
    };
    let kept = crate::text::prefix(&output.content, cap).to_string();
    output.content = format!("{kept}\n{note}");
    output
}
