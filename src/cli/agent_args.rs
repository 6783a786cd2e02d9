//! The flags that bound each agent, shared by `spawn` and `run`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;

use super::UsageError;
use crate::prompts::Prompts;
use crate::protocol::{AgentLimits, DEFAULT_LINE_CAP, ReadScope, SandboxMode, SandboxSettings};
use crate::settings::{Lookup, pick};
use crate::supervisor::launcher::{Launcher, local_only_warning};
use crate::supervisor::{AgentSettings, Hygiene, ServeLimits};
use crate::web::rules::{HostRule, HostRules};
use crate::web::search::{SearchBackend, SearchKind};
use crate::web::{Web, WebSettings};

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Each agent")]
pub struct AgentArgs {
    /// Seconds before an agent is stopped (cancel, grace, kill); its work
    /// and transcript so far are kept.
    #[arg(long, value_name = "SECS", default_value_t = 600, allow_negative_numbers = true, value_parser = crate::settings::numbers::seconds)]
    pub timeout: u64,

    /// Seconds of silence from an agent (no protocol line, no model request
    /// pending) after which it counts as hung; 0 turns the watchdog off.
    #[arg(long, value_name = "SECS", default_value_t = 300, allow_negative_numbers = true, value_parser = crate::settings::numbers::seconds_or_off)]
    pub idle_timeout: u64,

    /// Seconds between the cancel message and SIGKILL to the agent's
    /// process group.
    #[arg(long, value_name = "SECS", default_value_t = 5, allow_negative_numbers = true, value_parser = crate::settings::numbers::seconds_or_none)]
    pub kill_grace: u64,

    /// Tokens each agent may spend (prompt and completion, as troupe
    /// counts them from the answers it relays): near them the agent is
    /// told to wrap up, and past them, after three answers for the
    /// wrap-up, it is stopped with stop reason token_limit. The run's
    /// --max-tokens bounds them all together.
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = crate::settings::numbers::positive::<u64>)]
    pub max_agent_tokens: Option<u64>,

    /// US dollars each agent may spend, by [prices] or the provider's own
    /// figures: there the agent is told to wrap up, and past them, after
    /// three answers for the wrap-up, it is stopped with stop reason
    /// cost_limit. Every model an agent asks needs a price [env:
    /// TROUPE_MAX_AGENT_COST].
    #[arg(long, value_name = "USD", value_parser = crate::settings::numbers::dollars)]
    pub max_agent_cost: Option<f64>,

    /// Model turns before an agent must wrap up.
    #[arg(long, value_name = "N", default_value_t = 50, allow_negative_numbers = true, value_parser = crate::settings::numbers::positive::<u32>)]
    pub max_turns: u32,

    /// Default timeout of one run_command, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 120, allow_negative_numbers = true, value_parser = crate::settings::numbers::seconds)]
    pub command_timeout: u64,

    /// A directory of prompt overrides (see prompts/ for the names), read
    /// once as troupe starts and read-only to every agent; files missing
    /// there keep the built-in prompts [env: TROUPE_PROMPTS_DIR].
    #[arg(long, value_name = "DIR")]
    pub prompts_dir: Option<PathBuf>,

    /// An MCP tool server for the agents, as NAME=COMMAND [ARGS...]
    /// (repeatable; `[mcp_servers.NAME]` in troupe.toml takes more
    /// settings). The agent starts it inside its own sandbox; its tools
    /// appear as mcp__NAME__TOOL.
    #[arg(long, value_name = "NAME=COMMAND")]
    pub mcp: Vec<String>,

    /// The troupe-agent binary (default: the one next to troupe)
    /// [env: TROUPE_AGENT_BIN].
    #[arg(long, value_name = "PATH")]
    pub agent_bin: Option<PathBuf>,

    /// Pass this environment variable on to the agents and their commands
    /// (repeatable). Agents get only PATH, HOME, LANG, TERM, TZ and these;
    /// the API key variable is never passed.
    #[arg(long, value_name = "NAME")]
    pub pass_env: Vec<String>,

    /// The largest file an agent's commands may write, in bytes
    /// (RLIMIT_FSIZE on each command); write_file, edit_file and saved
    /// tool output keep to it too, with a tool error instead of a kill.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 30, allow_negative_numbers = true, value_parser = crate::settings::numbers::positive::<u64>)]
    pub max_file_size: u64,

    /// The memory each agent and everything it starts may use (4G, 512M;
    /// 0 for no bound): its control group's bound where troupe can make
    /// one, else each process's RLIMIT_DATA.
    #[arg(long, value_name = "SIZE", default_value = "4G", value_parser = crate::settings::numbers::bytes_or_off)]
    pub max_memory: u64,

    /// The processes each agent and everything it starts may have at once
    /// (0 for no bound): its control group's pids.max, else RLIMIT_NPROC in
    /// its user namespace.
    #[arg(long, value_name = "N", default_value_t = 512, allow_negative_numbers = true, value_parser = crate::settings::numbers::count::<u64>)]
    pub max_processes: u64,

    /// The CPU seconds each command an agent runs may use (RLIMIT_CPU;
    /// 0 for no bound, the default: its timeout bounds it).
    #[arg(long, value_name = "SECS", default_value_t = 0, allow_negative_numbers = true, value_parser = crate::settings::numbers::seconds_or_off)]
    pub max_command_cpu: u64,

    /// The Landlock sandbox of each agent: auto enforces what the kernel
    /// can and says what it cannot; required refuses to run an agent the
    /// kernel cannot fully confine; off runs agents unconfined
    /// [env: TROUPE_SANDBOX] [default: auto].
    #[arg(long, value_name = "MODE")]
    pub sandbox: Option<SandboxMode>,

    /// Let agents and their commands open TCP connections (denied by
    /// default: the agents need none, troupe talks to the model for them).
    #[arg(long)]
    pub allow_network: bool,

    /// A host a step's powers may name in powers.network, as HOST:PORT
    /// (repeatable): that step's commands reach it, and only the hosts
    /// their step names, through troupe's broker; no agent gets a network
    /// of its own from this.
    #[arg(long, value_name = "HOST:PORT")]
    pub allow_host: Vec<String>,

    /// A host agents may read web pages from with web_fetch, which troupe
    /// fetches for them (repeatable): HOST, HOST:PORT, *.DOMAIN, or * for
    /// any public host; [web] allow and deny in troupe.toml add to it. A
    /// private or loopback address is fetched only from a host named
    /// exactly. Agents get no network of their own from this.
    #[arg(long, value_name = "HOST")]
    pub allow_web: Vec<String>,

    /// A SearXNG (or SearXNG-compatible) endpoint that agents' web_search
    /// asks, e.g. http://127.0.0.1:8888 ([web.search] in troupe.toml
    /// names Brave or Tavily too).
    #[arg(long, value_name = "URL")]
    pub search_url: Option<String>,

    /// What agents and their commands may read: system (the workspace,
    /// their own directory and TMPDIR, and the system directories builds
    /// need: /usr, /lib*, /bin, /sbin, /etc, /opt, /proc, /sys, /dev, /run,
    /// /var), workspace (the first three only; no program of the system
    /// runs), or all (every file the user can read) [env: TROUPE_READ_SCOPE]
    /// [default: system].
    #[arg(long, value_name = "SCOPE")]
    pub read_scope: Option<ReadScope>,

    /// Let agents and their commands read this directory or file too, in
    /// any read scope (repeatable; e.g. --allow-read ~/.cargo)
    /// [env: TROUPE_ALLOW_READ, paths separated by :].
    #[arg(long, value_name = "PATH")]
    pub allow_read: Vec<PathBuf>,

    /// Start each agent through this command prefix, e.g. "srun
    /// --ntasks=1 --quiet --unbuffered --job-name=troupe-{step_id} --".
    /// Split like shell words, never run by a shell; {run_id}, {step_id},
    /// {agent_id}, {role} and {attempt} are filled in; the agent's command
    /// line is appended [env: TROUPE_LAUNCHER].
    #[arg(long, value_name = "CMD")]
    pub launcher: Option<String>,

    /// Seconds an agent may take to start (to say hello), a launcher's
    /// queue included.
    #[arg(long, value_name = "SECS", default_value_t = 60, allow_negative_numbers = true, value_parser = crate::settings::numbers::seconds)]
    pub launch_timeout: u64,

    /// When records reach the disk: commit (flushed at the points a
    /// resume depends on: the task file, the sealed transcript and result,
    /// each step's end, the run's end; atomic always) or strict (every
    /// write flushed) [env: TROUPE_DURABILITY] [default: commit].
    #[arg(long, value_name = "MODE")]
    pub durability: Option<crate::protocol::DurabilityMode>,
}

impl AgentArgs {
    /// Every agent's settings: these flags, then the environment and the
    /// config file (`sources`). `results` is where the agents' records go,
    /// and `api_key_envs` the variables no agent may be given.
    pub fn settings(
        &self,
        sources: &dyn Lookup,
        results: &Path,
        api_key_envs: &[String],
        max_tokens: Option<u64>,
    ) -> Result<AgentSettings, UsageError> {
        let prompts_dir: Option<PathBuf> =
            pick(self.prompts_dir.clone(), sources, "TROUPE_PROMPTS_DIR")
                .map_err(UsageError::Said)?;
        let agent_bin: Option<PathBuf> =
            pick(self.agent_bin.clone(), sources, "TROUPE_AGENT_BIN").map_err(UsageError::Said)?;
        let launcher: Option<String> =
            pick(self.launcher.clone(), sources, "TROUPE_LAUNCHER").map_err(UsageError::Said)?;
        let durability = pick(self.durability, sources, "TROUPE_DURABILITY")
            .map_err(UsageError::Said)?
            .unwrap_or_default();
        crate::fsutil::set_mode(durability);
        let (program, program_takes_session) = super::agent_program(agent_bin.as_deref())?;
        let mcp =
            crate::mcp::config::gather(sources.mcp_servers(), &self.mcp).map_err(UsageError::of)?;
        let mut hygiene = self.hygiene(api_key_envs)?;
        // A server the agent starts needs its variables from the agent,
        // which keeps them from its commands; one troupe reaches gets them
        // from troupe, and no agent has them.
        let mut mcp_only_env = Vec::new();
        for config in &mcp {
            for name in &config.server.env {
                if api_key_envs.contains(name) {
                    return Err(UsageError::Said(format!(
                        "an MCP server's env names {name}, which would hand the API key to the agents; only troupe itself talks to the model"
                    )));
                }
                if config.is_remote() || hygiene.pass_env.contains(name) {
                    continue;
                }
                hygiene.pass_env.push(name.clone());
                mcp_only_env.push(name.clone());
            }
        }
        let mut sandbox = self.sandbox(sources)?;
        sandbox.mcp_only_env = mcp_only_env;
        // troupe takes no setting from a file an agent could have written:
        // the one it read is read-only to every agent, wherever it is.
        if let Some(file) = sources.config_file() {
            crate::tell!("troupe: settings from {}", file.display());
            sandbox.read_only.extend(file.canonicalize().ok());
        }
        // Nor any prompt: they are read here, once, and the directory is
        // read-only to every agent, for the runs after this one.
        let prompts_dir = real_dir(prompts_dir, "--prompts-dir")?;
        let prompts = Prompts::read(prompts_dir.as_deref()).map_err(UsageError::of)?;
        sandbox.read_only.extend(prompts_dir);
        Ok(AgentSettings {
            program,
            program_takes_session,
            serve: self.serve_limits(),
            hygiene,
            limits: self.agent_limits(
                max_tokens.or(self.max_agent_tokens),
                self.max_agent_cost(sources)?,
            ),
            sandbox,
            prompts,
            launcher: launcher_of(launcher.as_deref(), results)?,
            durability,
            mcp,
            remote_mcp: None,
            allow_hosts: self.allow_hosts()?,
            web: self.web(sources)?,
        })
    }

    /// The web troupe reads for the agents: `--allow-web` and `[web]`,
    /// `--search-url` before `[web.search]`; `None` when it reads none.
    fn web(&self, sources: &dyn Lookup) -> Result<Option<std::sync::Arc<Web>>, UsageError> {
        let file = sources.web();
        let mut allow = file.allow;
        for flag in &self.allow_web {
            allow.push(
                HostRule::parse(flag).map_err(|e| UsageError::Said(format!("--allow-web: {e}")))?,
            );
        }
        let search = match (&self.search_url, file.search) {
            (Some(url), _) => Some(SearchBackend::new(
                SearchKind::Searxng,
                Some(url.clone()),
                None,
            )),
            (None, Some(config)) => {
                if let Some(env) = &config.api_key_env
                    && self.pass_env.contains(env)
                {
                    return Err(UsageError::Said(format!(
                        "--pass-env {env} would hand the search backend's key to the agents; only troupe itself searches"
                    )));
                }
                Some(SearchBackend::new(
                    config.kind,
                    config.url,
                    config.api_key_env.as_deref(),
                ))
            }
            (None, None) => None,
        };
        let search = search.transpose().map_err(UsageError::Said)?;
        let settings = WebSettings {
            rules: HostRules {
                allow,
                deny: file.deny,
            },
            search,
            timeout: file
                .timeout
                .filter(|secs| *secs > 0)
                .map_or(crate::web::FETCH_LIMIT, std::time::Duration::from_secs),
        };
        Ok(settings.offered().then(|| Web::new(settings)))
    }

    /// `--allow-host`, each checked to be HOST:PORT.
    fn allow_hosts(&self) -> Result<Vec<String>, UsageError> {
        for host in &self.allow_host {
            let port = host.rsplit_once(':').map(|(h, p)| (h, p.parse::<u16>()));
            if !matches!(port, Some((h, Ok(p))) if !h.is_empty() && p > 0) {
                return Err(UsageError::Said(format!(
                    "--allow-host {host}: give it as HOST:PORT (e.g. 127.0.0.1:8080)"
                )));
            }
        }
        Ok(self.allow_host.clone())
    }

    fn serve_limits(&self) -> ServeLimits {
        ServeLimits {
            timeout: Duration::from_secs(self.timeout),
            idle_timeout: (self.idle_timeout > 0).then(|| Duration::from_secs(self.idle_timeout)),
            kill_grace: Duration::from_secs(self.kill_grace),
            line_cap: DEFAULT_LINE_CAP,
            launch_timeout: Duration::from_secs(self.launch_timeout),
        }
    }

    /// `--max-agent-cost`, else `max_agent_cost` in the config file.
    pub fn max_agent_cost(&self, sources: &dyn Lookup) -> Result<Option<f64>, UsageError> {
        crate::settings::money(self.max_agent_cost, sources, "TROUPE_MAX_AGENT_COST")
            .map_err(UsageError::Said)
    }

    /// The loop limits for the task file; `max_tokens` and `max_cost` are
    /// per agent.
    fn agent_limits(&self, max_tokens: Option<u64>, max_cost: Option<f64>) -> AgentLimits {
        let idle = self.idle_timeout;
        AgentLimits {
            max_turns: self.max_turns,
            max_tokens,
            max_cost_micros: max_cost.map(crate::chat::micros),
            command_timeout_seconds: self.command_timeout.max(1),
            max_file_size: Some(self.max_file_size),
            max_command_cpu: (self.max_command_cpu > 0).then_some(self.max_command_cpu),
            heartbeat_seconds: if idle > 0 {
                (idle / 3).clamp(1, 10)
            } else {
                10
            },
            ..AgentLimits::default()
        }
    }

    /// The environment every child gets. Passing a variable that holds an
    /// API key is refused: only the parent may hold it.
    fn hygiene(&self, api_key_envs: &[String]) -> Result<Hygiene, UsageError> {
        if let Some(name) = self
            .pass_env
            .iter()
            .find(|name| api_key_envs.contains(name))
        {
            return Err(UsageError::Said(format!(
                "--pass-env {name} would hand the API key to the agents; only troupe itself talks to the model"
            )));
        }
        if let Some(name) = self
            .pass_env
            .iter()
            .find(|name| name.is_empty() || name.contains('='))
        {
            return Err(UsageError::Said(format!(
                "--pass-env `{name}` is not a variable name"
            )));
        }
        Ok(Hygiene {
            pass_env: self.pass_env.clone(),
        })
    }

    /// The sandbox settings, with every `--allow-read` path made real: the
    /// agent applies them from another directory, maybe another node.
    fn sandbox(&self, sources: &dyn Lookup) -> Result<SandboxSettings, UsageError> {
        let mode = pick(self.sandbox, sources, "TROUPE_SANDBOX").map_err(UsageError::Said)?;
        let read_scope =
            pick(self.read_scope, sources, "TROUPE_READ_SCOPE").map_err(UsageError::Said)?;
        let allow_read: Vec<PathBuf> = match self.allow_read.is_empty() {
            false => self.allow_read.clone(),
            true => sources.paths("TROUPE_ALLOW_READ").unwrap_or_default(),
        };
        let allow_read = allow_read
            .iter()
            .map(|path| {
                path.canonicalize()
                    .map_err(|e| UsageError::Said(format!("--allow-read {}: {e}", path.display())))
            })
            .collect::<Result<_, _>>()?;
        Ok(SandboxSettings {
            mode: mode.unwrap_or_default(),
            allow_network: self.allow_network,
            read_scope: read_scope.unwrap_or_default(),
            allow_read,
            max_memory: (self.max_memory > 0).then_some(self.max_memory),
            max_processes: (self.max_processes > 0).then_some(self.max_processes),
            ..SandboxSettings::default()
        })
    }
}

/// The directory `dir` as an absolute path (children run elsewhere).
fn real_dir(dir: Option<PathBuf>, flag: &str) -> Result<Option<PathBuf>, UsageError> {
    dir.map(|dir| {
        dir.canonicalize()
            .map_err(|e| UsageError::Said(format!("{flag} {}: {e}", dir.display())))
    })
    .transpose()
}

/// The launcher, parsed, with a warning when the results directory is
/// where other nodes cannot see it.
fn launcher_of(text: Option<&str>, results: &Path) -> Result<Option<Launcher>, UsageError> {
    let Some(text) = text else {
        return Ok(None);
    };
    let launcher = Launcher::parse(text).map_err(UsageError::of)?;
    let probe = std::iter::successors(Some(results), |p| p.parent()).find(|p| p.exists());
    if let Some(warning) = probe.and_then(local_only_warning) {
        crate::tell!("troupe: warning: {warning}");
    }
    Ok(Some(launcher))
}
