//! `troupe-agent`, the child: one agent in batch mode. Normally started by
//! `troupe`, which answers its model requests over stdin/stdout; with
//! `--model` it runs stand-alone against an endpoint, for debugging. Stdout
//! carries protocol lines only.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use troupe::agent::{AgentOptions, main as agent_main};
use troupe::settings::Environment;
use troupe::settings::model::ModelFlags;

/// Run one agent from its task file (normally started by troupe).
#[derive(Debug, Parser)]
#[command(name = "troupe-agent", version)]
struct AgentArgs {
    /// The task file troupe wrote: <agent dir>/.subagent/task.json.
    #[arg(long, value_name = "PATH", required_unless_present = "probe_sandbox")]
    task: Option<PathBuf>,

    /// Print what this kernel's Landlock can enforce, as JSON, and exit.
    #[arg(long, conflicts_with = "task")]
    probe_sandbox: bool,

    #[command(flatten)]
    model: ModelFlags,
}

fn main() -> ExitCode {
    let args = AgentArgs::parse();
    let Some(task) = args.task else {
        return match troupe::sandbox::probe() {
            Ok(report) => {
                troupe::say!("{}", serde_json::to_string(&report).unwrap_or_default());
                ExitCode::SUCCESS
            }
            Err(e) => {
                troupe::tell!("troupe-agent: {e}");
                ExitCode::FAILURE
            }
        };
    };
    let model = match args.model.named(&Environment) {
        true => match args.model.resolve(&Environment) {
            Ok(model) => Some(model),
            Err(e) => {
                troupe::tell!("troupe-agent: {e}");
                return ExitCode::from(2);
            }
        },
        false => None,
    };
    agent_main(AgentOptions {
        task_path: task,
        model,
    })
}
