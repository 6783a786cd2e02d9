//! The server's flags as the ceiling of every call: given once on the
//! server's command line, passed on as they were given to each `troupe
//! spawn` and `troupe run` a call starts, with the few values a call may
//! narrow put in their place, never added beside them.
//!
//! The flags are taken from clap's own record of what the user typed
//! (`ArgMatches`), by the ids of the flag groups `spawn` and `run` share,
//! so a flag added to those groups is passed on without a change here.

use std::ffi::OsString;

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory};

use crate::cli::agent_args::AgentArgs;
use crate::cli::run::TeamArgs;
use crate::settings::model::{ModelFlags, RoleFlags};

/// One flag as the user gave it: its long name and its values, in order
/// (none for a switch).
#[derive(Debug, Clone)]
struct Given {
    id: String,
    long: String,
    values: Option<Vec<OsString>>,
}

/// What the server was given, ready to be passed on.
#[derive(Debug, Clone, Default)]
pub struct Ceiling {
    /// `--config` and the other global flags.
    global: Vec<Given>,
    /// Flags every agent takes (`spawn` and `run`).
    agent: Vec<Given>,
    /// `--model` and its endpoint, `--request-timeout`, `--http-retries`.
    model: Vec<Given>,
    /// `--planner-model`, `--worker-model`, ... (`run` only).
    roles: Vec<Given>,
    /// `--max-parallel`, `--isolation`, ... (`run` only).
    team: Vec<Given>,
}

/// What a flag group passes on, and to which command.
pub enum For {
    Spawn,
    Run,
}

impl Ceiling {
    /// The flags given to `troupe [GLOBAL] mcp serve ...`, read from the
    /// whole command line.
    pub fn from_command_line(args: &[OsString]) -> Ceiling {
        let Ok(all) = crate::cli::Cli::command().try_get_matches_from(args) else {
            return Ceiling::default();
        };
        let serve = all
            .subcommand_matches("mcp")
            .and_then(|mcp| mcp.subcommand_matches("serve"));
        let Some(serve) = serve else {
            return Ceiling::default();
        };
        let root = crate::cli::Cli::command();
        let global = given(&all, &root, &["config", "otlp_endpoint"]);
        Ceiling {
            global,
            agent: group::<AgentArgs>(serve),
            model: group::<ModelFlags>(serve),
            roles: group::<RoleFlags>(serve),
            team: group::<TeamArgs>(serve),
        }
    }

    /// The arguments for `troupe ... spawn` or `troupe ... run`, before the
    /// subcommand's name and after it, less the flags whose ids `replaced`
    /// names (the call gives those).
    pub fn argv(&self, command: For, replaced: &[&str]) -> (Vec<OsString>, Vec<OsString>) {
        let before = render(&self.global, &[]);
        let mut after = render(&self.agent, replaced);
        match command {
            For::Spawn => {
                // A created agent is a worker: the worker's model and
                // endpoint, where the server has them, are its own.
                let mut skip = replaced.to_vec();
                let mut worker = Vec::new();
                for (role, general) in WORKER_FLAGS {
                    if let Some(flag) = self.roles.iter().find(|f| f.id == role) {
                        skip.push(general);
                        worker.push(Given {
                            id: general.to_string(),
                            long: general.replace('_', "-"),
                            values: flag.values.clone(),
                        });
                    }
                }
                after.extend(render(&self.model, &skip));
                after.extend(render(&worker, &[]));
            }
            For::Run => {
                after.extend(render(&self.model, replaced));
                after.extend(render(&self.roles, replaced));
                after.extend(render(&self.team, replaced));
            }
        }
        (before, after)
    }
}

/// The worker's model flags, and the general ones they stand for in a
/// spawn.
const WORKER_FLAGS: [(&str, &str); 3] = [
    ("worker_model", "model"),
    ("worker_base_url", "base_url"),
    ("worker_api_key_env", "api_key_env"),
];

/// The flags of group `A` the user gave, in the order clap defines them.
fn group<A: Args>(matches: &ArgMatches) -> Vec<Given> {
    let command = A::augment_args(clap::Command::new("group"));
    let ids: Vec<String> = command
        .get_arguments()
        .map(|arg| arg.get_id().to_string())
        .collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    given(matches, &command, &ids)
}

fn given(matches: &ArgMatches, command: &clap::Command, ids: &[&str]) -> Vec<Given> {
    let mut out = Vec::new();
    for arg in command.get_arguments() {
        let id = arg.get_id().as_str();
        if !ids.contains(&id) {
            continue;
        }
        let typed = matches!(matches.try_contains_id(id), Ok(true))
            && matches.value_source(id) == Some(ValueSource::CommandLine);
        let Some(long) = arg.get_long().filter(|_| typed) else {
            continue;
        };
        let values = arg.get_action().takes_values().then(|| {
            matches
                .get_raw(id)
                .map(|raw| raw.map(OsString::from).collect())
                .unwrap_or_default()
        });
        out.push(Given {
            id: id.to_string(),
            long: long.to_string(),
            values,
        });
    }
    out
}

fn render(flags: &[Given], replaced: &[&str]) -> Vec<OsString> {
    let mut out = Vec::new();
    for flag in flags.iter().filter(|f| !replaced.contains(&f.id.as_str())) {
        match &flag.values {
            None => out.push(format!("--{}", flag.long).into()),
            Some(values) => {
                for value in values {
                    let mut arg = OsString::from(format!("--{}=", flag.long));
                    arg.push(value);
                    out.push(arg);
                }
            }
        }
    }
    out
}

impl Ceiling {
    /// The whole command line of `troupe [GLOBAL] spawn|run ...`: the
    /// server's flags, less those in `replaced`, then the call's `own`.
    pub fn command(&self, command: For, replaced: &[&str], own: Vec<OsString>) -> Vec<OsString> {
        let name = match command {
            For::Spawn => "spawn",
            For::Run => "run",
        };
        let (mut argv, after) = self.argv(command, replaced);
        argv.push(name.into());
        argv.extend(after);
        argv.extend(own);
        argv
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: Vec<OsString>) -> Vec<String> {
        args.into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    fn ceiling(line: &str) -> Ceiling {
        let args: Vec<OsString> = line.split(' ').map(OsString::from).collect();
        Ceiling::from_command_line(&args)
    }

    #[test]
    fn the_flags_given_are_passed_on_and_the_defaults_are_not() {
        let ceiling = ceiling(
            "troupe mcp serve --workspace /w --config /c.toml --model m --timeout 900 --allow-read /a --allow-read /b --allow-network --max-parallel 3 --max-concurrent 2 --queue",
        );
        let spawn = strings(ceiling.command(For::Spawn, &[], Vec::new()));
        assert_eq!(
            spawn,
            [
                "--config=/c.toml",
                "spawn",
                "--timeout=900",
                "--allow-network",
                "--allow-read=/a",
                "--allow-read=/b",
                "--model=m"
            ]
        );
        let run = strings(ceiling.command(For::Run, &["timeout"], Vec::new()));
        assert_eq!(
            run,
            [
                "--config=/c.toml",
                "run",
                "--allow-network",
                "--allow-read=/a",
                "--allow-read=/b",
                "--model=m",
                "--max-parallel=3"
            ]
        );
    }

    #[test]
    fn a_flag_the_call_gives_replaces_the_servers() {
        let ceiling = ceiling("troupe mcp serve --apply --isolation auto");
        let run = strings(ceiling.command(
            For::Run,
            &["apply", "isolation"],
            vec!["--no-apply".into(), "--isolation=worktree".into()],
        ));
        assert_eq!(run, ["run", "--no-apply", "--isolation=worktree"]);
    }

    #[test]
    fn a_created_agent_takes_the_workers_model_in_place_of_the_servers() {
        let ceiling =
            ceiling("troupe mcp serve --model general --worker-model w --reviewer-model r");
        let spawn = strings(ceiling.command(For::Spawn, &[], Vec::new()));
        assert_eq!(spawn, ["spawn", "--model=w"]);
        let run = strings(ceiling.command(For::Run, &[], Vec::new()));
        assert_eq!(
            run,
            [
                "run",
                "--model=general",
                "--worker-model=w",
                "--reviewer-model=r"
            ]
        );
    }
}
