//! What a step's `powers` may ask for: no more than every worker of the
//! run may have, from the flags and config the run was started with. A
//! plan that asks for more is refused with the step and the power named,
//! never clipped: by `troupe validate`, by `troupe run --plan`, and when
//! the Planner (or a replan) wrote it.

use std::path::{Path, PathBuf};

use crate::plan::Plan;
use crate::plan::powers::Powers;
use crate::protocol::{AgentRole, ReadScope, SandboxMode};
use crate::supervisor::AgentSettings;

/// Every worker's powers in this run.
#[derive(Debug, Clone)]
pub struct Ceiling {
    /// The MCP servers workers are given, by name.
    pub mcp: Vec<String>,
    pub read_scope: ReadScope,
    pub allow_read: Vec<PathBuf>,
    pub sandbox_off: bool,
    /// The hosts a step may name (`--allow-host`), or every host
    /// (`--allow-network`).
    pub allow_hosts: Vec<String>,
    pub allow_network: bool,
    /// The hosts web_fetch may read for the run's agents (`--allow-web`).
    pub web: Vec<crate::web::rules::HostRule>,
    pub timeout: u64,
    pub max_turns: u32,
    pub max_tokens: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("step `{step}` asks for more than the run gives its workers: {why}")]
pub struct BeyondCeiling {
    pub step: String,
    pub why: String,
}

impl Ceiling {
    /// The ceiling of a run whose agents have `settings`.
    pub fn of(settings: &AgentSettings) -> Ceiling {
        Ceiling {
            mcp: settings
                .mcp
                .iter()
                .filter(|server| server.serves(AgentRole::Worker))
                .map(|server| server.name().to_string())
                .collect(),
            read_scope: settings.sandbox.read_scope,
            allow_read: settings.sandbox.allow_read.clone(),
            sandbox_off: settings.sandbox.mode == SandboxMode::Off,
            allow_hosts: settings.allow_hosts.clone(),
            allow_network: settings.sandbox.allow_network,
            web: settings
                .web
                .as_ref()
                .map(|web| web.settings().rules.allow.clone())
                .unwrap_or_default(),
            timeout: settings.serve.timeout.as_secs(),
            max_turns: settings.limits.max_turns,
            max_tokens: settings.limits.max_tokens,
        }
    }

    /// The first step of `plan` that asks for more than this, and what.
    pub fn check(&self, plan: &Plan) -> Result<(), BeyondCeiling> {
        for step in &plan.steps {
            if let Some(powers) = &step.powers
                && let Some(why) = self.refusal(powers)
            {
                return Err(BeyondCeiling {
                    step: step.id.clone(),
                    why,
                });
            }
        }
        Ok(())
    }

    /// Why the run cannot give `powers`, if it cannot.
    fn refusal(&self, powers: &Powers) -> Option<String> {
        if let Some(name) = powers.mcp.iter().flatten().find(|n| !self.mcp.contains(n)) {
            let given = match self.mcp.is_empty() {
                true => "none".to_string(),
                false => self.mcp.join(", "),
            };
            return Some(format!(
                "powers.mcp names `{name}`, a server the run does not give workers (it gives: {given}); configure it in troupe.toml or with --mcp"
            ));
        }
        let allowed = |host: &String| {
            self.allow_network
                || self
                    .allow_hosts
                    .iter()
                    .any(|h| h.eq_ignore_ascii_case(host))
        };
        if let Some(host) = powers.hosts().iter().find(|h| !allowed(h)) {
            return Some(format!(
                "powers.network asks for {host}, which the run does not allow (give the run --allow-host {host})"
            ));
        }
        if let Some(rule) = powers
            .web
            .iter()
            .flatten()
            .find(|rule| !self.web.iter().any(|run| rule.within(run)))
        {
            return Some(format!(
                "powers.web names {rule}, which the run's --allow-web does not cover (it allows: {}); give the run --allow-web {rule}",
                match self.web.is_empty() {
                    true => "none".to_string(),
                    false => self
                        .web
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                }
            ));
        }
        if !powers.hosts().is_empty() && self.sandbox_off {
            return Some(
                "powers.network is held by the sandbox's network namespace, and the run's is off (--sandbox off)"
                    .to_string(),
            );
        }
        if let Some(path) = powers.read.iter().find(|p| !self.readable(p)) {
            return Some(format!(
                "powers.read names {}, which the run's agents may not read; give the run --allow-read {}",
                path.display(),
                path.display()
            ));
        }
        if let Some(path) = powers.read.iter().find(|p| p.canonicalize().is_err()) {
            return Some(format!(
                "powers.read names {}, which troupe cannot resolve (it is not there, or troupe may not look at it); name a path that is, whose links troupe can follow",
                path.display()
            ));
        }
        if powers.write.is_some() && self.sandbox_off {
            return Some(
                "powers.write is enforced by the sandbox, and the run's is off (--sandbox off)"
                    .to_string(),
            );
        }
        let numbers = [
            ("timeout", powers.timeout, Some(self.timeout), "--timeout"),
            (
                "max_turns",
                powers.max_turns.map(u64::from),
                Some(u64::from(self.max_turns)),
                "--max-turns",
            ),
            (
                "max_tokens",
                powers.max_tokens,
                self.max_tokens,
                "--max-agent-tokens",
            ),
        ];
        for (power, asked, ceiling, flag) in numbers {
            if let (Some(asked), Some(ceiling)) = (asked, ceiling)
                && asked > ceiling
            {
                return Some(format!(
                    "powers.{power} is {asked}, more than the run's {flag} {ceiling}"
                ));
            }
        }
        None
    }

    /// Whether the run's agents may read `path`, as named and where its
    /// links lead (one that does not resolve is refused after).
    fn readable(&self, path: &Path) -> bool {
        let real = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        self.covers(path) && self.covers(&real)
    }

    fn covers(&self, path: &Path) -> bool {
        let listed = self.allow_read.iter().any(|dir| path.starts_with(dir));
        match self.read_scope {
            ReadScope::All => true,
            ReadScope::System => listed || crate::sandbox::in_system_dirs(path),
            ReadScope::Workspace => listed,
        }
    }
}
