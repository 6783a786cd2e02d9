//! Colour for people, never for pipes: ANSI colours only when the stream
//! is a terminal and NO_COLOR is unset.

use std::io::IsTerminal;

#[derive(Debug, Clone, Copy)]
pub struct Painter {
    colour: bool,
}

impl Painter {
    pub fn for_stderr() -> Self {
        Painter {
            colour: wanted() && std::io::stderr().is_terminal(),
        }
    }

    pub fn for_stdout() -> Self {
        Painter {
            colour: wanted() && std::io::stdout().is_terminal(),
        }
    }

    /// `text` in the SGR colour `code` (e.g. "31" red, "2" dim).
    pub fn paint(&self, code: &str, text: &str) -> String {
        if self.colour {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }
}

fn wanted() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
