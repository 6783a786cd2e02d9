//! `troupe`, the parent: see `troupe --help`.

use std::process::ExitCode;

fn main() -> ExitCode {
    troupe::cli::main()
}
