//! Writing for people and pipes without dying of a closed one.
//!
//! `println!` panics when stdout is a pipe whose reader left
//! (`troupe show ... | head -1`). Everything troupe prints goes through
//! here instead: a write that fails marks the output closed, further
//! writes to it are dropped, and whoever watches `closed()` (a team run)
//! stops as on Ctrl-C, so that its agents are cancelled and its records
//! sealed. A command that only prints ends as it would have.

use std::io::{IsTerminal, Write};
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::signal::{Interruption, StopSignal};

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
static STDERR_CLOSED: AtomicBool = AtomicBool::new(false);
static CLOSED: LazyLock<StopSignal<Interruption>> = LazyLock::new(StopSignal::default);

/// Triggered when stdout or stderr could not be written.
pub fn closed() -> StopSignal<Interruption> {
    CLOSED.clone()
}

/// Whether stdout is a terminal, which gets no control character but
/// troupe's colours (`text::terminal_safe`); a pipe or a file gets the
/// bytes as they are (a diff, JSON). Stderr, progress and messages for
/// people only, gets none anywhere: a log of it is read on a terminal
/// later.
static STDOUT_TERMINAL: LazyLock<bool> = LazyLock::new(|| std::io::stdout().is_terminal());

/// `text` on stdout.
pub fn out(text: &str) {
    write(
        &mut std::io::stdout().lock(),
        text,
        (&STDOUT_CLOSED, *STDOUT_TERMINAL),
        "stdout",
    );
}

static QUIET: AtomicBool = AtomicBool::new(false);

/// Progress lines off (`--quiet`): a script that reads `--json`, or only
/// the exit code, hears of warnings and errors alone.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// `text` on stderr, unless progress is off: a run's lines as it goes,
/// its plan and its summary.
pub fn progress(text: &str) {
    if !QUIET.load(Ordering::Relaxed) {
        err(text);
    }
}

/// `text` on stderr.
pub fn err(text: &str) {
    write(
        &mut std::io::stderr().lock(),
        text,
        (&STDERR_CLOSED, true),
        "stderr",
    );
}

fn write(
    stream: &mut dyn Write,
    text: &str,
    (closed, terminal): (&AtomicBool, bool),
    name: &'static str,
) {
    if closed.load(Ordering::Relaxed) {
        return;
    }
    let text = match terminal {
        true => crate::text::terminal_safe(text),
        false => std::borrow::Cow::Borrowed(text),
    };
    if stream
        .write_all(text.as_bytes())
        .and_then(|()| stream.flush())
        .is_err()
    {
        closed.store(true, Ordering::Relaxed);
        CLOSED.trigger(Interruption::Closed(name));
    }
}

/// A line on stdout (`println!` that survives a closed pipe).
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::console::out(&format!("{}\n", format_args!($($arg)*)))
    };
}

/// A line on stderr (`eprintln!` that survives a closed pipe).
#[macro_export]
macro_rules! tell {
    ($($arg:tt)*) => {
        $crate::console::err(&format!("{}\n", format_args!($($arg)*)))
    };
}

/// A line of progress on stderr, unless `--quiet`.
#[macro_export]
macro_rules! progress {
    ($($arg:tt)*) => {
        $crate::console::progress(&format!("{}\n", format_args!($($arg)*)))
    };
}
