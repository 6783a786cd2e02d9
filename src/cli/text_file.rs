//! The text a flag names by file (`--goal-file`, `--task-file`), where
//! `-` is standard input, as a script piping a heredoc expects.

use std::io::Read;
use std::path::Path;

use super::UsageError;

/// The text of `path`, or of standard input for `-`; `what` names it in
/// the error ("the goal file").
pub fn read(path: &Path, what: &str) -> Result<String, UsageError> {
    let read = match path == Path::new("-") {
        true => {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).map(|_| text)
        }
        false => std::fs::read_to_string(path),
    };
    read.map_err(|e| match path == Path::new("-") {
        true => UsageError::Said(format!("cannot read {what} from standard input: {e}")),
        false => UsageError::Said(format!("cannot read {what} {}: {e}", path.display())),
    })
}
