//! `troupe-agent`, the child: one agent in batch mode. Normally started by
//! `troupe`, which answers its model requests over stdin/stdout; with
//! `--model scripted:PATH` it replays a script stand-alone, for debugging.
//! Stdout carries protocol lines only.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use troupe::agent::{AgentOptions, main as agent_main};

/// Run one agent from its task file (normally started by troupe).
#[derive(Debug, Parser)]
#[command(name = "troupe-agent", version)]
struct AgentArgs {
    /// The task file troupe wrote: <agent dir>/.subagent/task.json.
    #[arg(long, value_name = "PATH", required_unless_present = "probe_sandbox")]
    task: Option<PathBuf>,

    /// Confine a scratch worker as an agent is confined and print what held,
    /// layer by layer, as the JSON of an agent's stats.sandbox; exit.
    #[arg(long, conflicts_with = "task")]
    probe_sandbox: bool,

    /// Run stand-alone on the scripted model at PATH (scripted:PATH)
    /// instead of asking troupe; to run one agent against an endpoint, use
    /// `troupe spawn`.
    #[arg(long, value_name = "scripted:PATH")]
    model: Option<String>,
}

fn main() -> ExitCode {
    let args = AgentArgs::parse();
    let Some(task) = args.task else {
        return match troupe::sandbox::probe() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                troupe::tell!("troupe-agent: {e}");
                ExitCode::FAILURE
            }
        };
    };
    let script = match args.model.as_deref().map(|m| m.strip_prefix("scripted:")) {
        None => None,
        Some(Some(path)) => Some(PathBuf::from(path)),
        Some(None) => {
            troupe::tell!(
                "troupe-agent: --model takes scripted:PATH only; run an agent against an endpoint with troupe spawn"
            );
            return ExitCode::from(2);
        }
    };
    agent_main(AgentOptions {
        task_path: task,
        script,
    })
}
