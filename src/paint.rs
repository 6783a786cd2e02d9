//! Colour for people, never for pipes: ANSI colours only when the stream
//! is a terminal and NO_COLOR is unset, unless `--color` says otherwise.

use std::io::IsTerminal;
use std::sync::OnceLock;

/// `--color`: when output is coloured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    /// On a terminal, unless NO_COLOR is set.
    #[default]
    Auto,
    /// Always, pipes included.
    Always,
    /// Never.
    Never,
}

static CHOICE: OnceLock<ColorChoice> = OnceLock::new();

/// Sets the choice for the whole process, once, before anything is
/// painted.
pub fn choose(choice: ColorChoice) {
    let _ = CHOICE.set(choice);
}

fn coloured(terminal: bool) -> bool {
    match CHOICE.get().copied().unwrap_or_default() {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => wanted() && terminal,
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Painter {
    colour: bool,
}

impl Painter {
    pub fn for_stderr() -> Self {
        Painter {
            colour: coloured(std::io::stderr().is_terminal()),
        }
    }

    pub fn for_stdout() -> Self {
        Painter {
            colour: coloured(std::io::stdout().is_terminal()),
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
