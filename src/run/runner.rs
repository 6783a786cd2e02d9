//! The seam between a run and its agents: the scheduler asks an
//! `AgentRunner` to run one worker or reviewer and gets the agent's record
//! back. `ProcessRunner` is the real one: a `troupe-agent` child process
//! in its own directory, served by this process. Tests put a scripted
//! runner in its place and drive the whole scheduler in-process.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use crate::llm::ChatModel;
use crate::protocol::{AgentId, AgentRole, TaskFile};
use crate::record::AgentRecord;
use crate::signal::StopSignal;
use crate::supervisor::events::EventSink;
use crate::supervisor::result::AgentResult;
use crate::supervisor::{AgentSettings, SpawnConfig, SpawnError, spawn_agent};

/// One agent a step needs.
#[derive(Debug, Clone)]
pub struct AgentRequest {
    pub step: String,
    pub attempt: u32,
    pub role: AgentRole,
    /// Its directory, which must not exist yet.
    pub dir: PathBuf,
    /// One line on what the step is about.
    pub summary: String,
    /// The agent's task: the worker's or the reviewer's brief.
    pub brief: String,
    /// With `--isolation worktree`: the attempt's checkout, which is the
    /// agent's workspace.
    pub checkout: Option<crate::run::isolation::CheckoutView>,
    /// A worker's step's `output_schema`.
    pub output_schema: Option<serde_json::Value>,
    /// A worker's step's `powers`, within the run's ceiling.
    pub powers: Option<crate::plan::powers::Powers>,
    /// The span of its attempt, which the agent's span is a child of.
    pub trace: Option<crate::protocol::TraceParent>,
}

pub type RunFuture<'a> = Pin<Box<dyn Future<Output = Result<AgentRecord, SpawnError>> + 'a>>;

/// Runs the agents of a run.
pub trait AgentRunner {
    /// Runs one agent to its end. `Err` when it could not be run at all
    /// (its directory could not be made, its records not kept): a failure
    /// of the system, not of the agent.
    fn run(&self, request: AgentRequest) -> RunFuture<'_>;
}

/// Each agent a `troupe-agent` process.
pub struct ProcessRunner {
    pub settings: AgentSettings,
    pub run_id: String,
    pub workspace: PathBuf,
    /// The models the agents' requests go to (counting against the run's
    /// budget).
    pub workers: RoleModel,
    pub reviewers: RoleModel,
    /// Stops every running agent: the deadline, or the first Ctrl-C.
    pub stop: StopSignal,
    /// Where the agents' lines go (the run's `AgentLines`).
    pub lines: Box<dyn EventSink>,
}

impl AgentRunner for ProcessRunner {
    fn run(&self, request: AgentRequest) -> RunFuture<'_> {
        Box::pin(async move {
            let model = match request.role {
                AgentRole::Worker => self.workers.model.clone(),
                AgentRole::Reviewer => self.reviewers.model.clone(),
            };
            let dir = crate::protocol::display_in(&self.workspace, &request.dir);
            let config = self.spawn_config(request);
            let run = spawn_agent(config, model, self.lines.as_ref()).await?;
            Ok(ended(dir, &run.result))
        })
    }
}

impl ProcessRunner {
    fn spawn_config(&self, request: AgentRequest) -> SpawnConfig {
        let name = request
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let workspace = match &request.checkout {
            Some(checkout) => checkout.dir.clone(),
            None => self.workspace.clone(),
        };
        let mut task = TaskFile::new(
            AgentId::new(format!("{}/{name}", request.step)),
            request.role,
            request.summary,
            request.brief,
            workspace,
            request.dir,
        );
        task.step = Some(request.step);
        task.attempt = request.attempt;
        task.output_schema = request.output_schema;
        self.settings.fill(&mut task);
        let role = match request.role {
            AgentRole::Worker => &self.workers,
            AgentRole::Reviewer => &self.reviewers,
        };
        task.limits.context_window = role.context_window;
        task.limits.max_output_tokens = role.max_output_tokens;
        if let Some(checkout) = request.checkout {
            task.results = Some(self.workspace.join(crate::protocol::RESULTS_DIR));
            // The repository's git directories, read for git to work in
            // the checkout: their config (a token, a remote) stays closed.
            let configs = checkout.read.iter().map(|dir| dir.join("config"));
            task.sandbox.hidden.extend(configs);
            task.sandbox.allow_read.extend(checkout.read);
            task.sandbox.overlay = checkout.overlay;
        }
        if let Some(powers) = &request.powers {
            narrow(&mut task, powers);
        }
        crate::supervisor::spawn::guard(&mut task);
        if task.sandbox.overlay.is_none() {
            // Made here, as the agent's id-mapped view could not make them
            // as root, and only when every path passed the checks its
            // sandbox makes (no link on the way, nothing read-only): a step
            // refused for one leaves nothing made in the user's tree. One
            // refused is the agent's to say, as it does not start.
            let _ = crate::sandbox::open_write_paths(&task);
        }
        let span = crate::telemetry::Span::under(
            request.trace,
            format!("invoke_agent {}", request.role.as_str()),
        );
        let mut config =
            SpawnConfig::new(task, &self.settings, self.stop.clone(), &self.run_id).in_span(span);
        if let Some(secs) = request.powers.as_ref().and_then(|p| p.timeout) {
            config.limits.timeout = std::time::Duration::from_secs(secs);
        }
        config
    }
}

/// A worker's task, narrowed to its step's `powers`: its tools, its MCP
/// servers, what it may write (inside its workspace) and read, its turns,
/// seconds and tokens. The sandbox enforces the paths, the parent the
/// tools, servers, seconds and tokens; the ceiling checked that none asks
/// for more than the run's.
fn narrow(task: &mut TaskFile, powers: &crate::plan::powers::Powers) {
    if let Some(tools) = &powers.tools {
        task.tools = Some(tools.clone());
    }
    if let Some(servers) = &powers.mcp {
        task.mcp.retain(|server| servers.contains(&server.name));
        task.mcp_remote
            .retain(|tool| servers.contains(&tool.server));
    }
    if let Some(write) = &powers.write {
        // A copy-on-write checkout's are made here, in the attempt's upper
        // layer, where the agent's id maps and overlay do not stand in the
        // way; a shared workspace's once the task is guarded (`spawn`).
        if let Some(upper) = task.sandbox.overlay.as_ref().and_then(|o| o.upper.as_ref()) {
            for path in write {
                make_dirs(&upper.dir, path);
            }
        }
        let workspace = task.workspace.clone();
        task.sandbox.write = Some(write.iter().map(|p| workspace.join(p)).collect());
    }
    // Where their links lead, as the ceiling checked them.
    let read = powers
        .read
        .iter()
        .map(|p| p.canonicalize().unwrap_or_else(|_| p.clone()));
    task.sandbox.allow_read.extend(read);
    if powers.network.is_some() {
        // Its hosts through troupe's broker, and no network of its own.
        task.sandbox.allow_network = false;
        task.network_hosts = powers.hosts().to_vec();
    }
    if !task.network_hosts.is_empty() {
        task.task.push_str(&format!(
            "\n\nThe network: your commands reach only {} and only through troupe's HTTP proxy, which HTTP_PROXY and HTTPS_PROXY name (curl, pip, git and most tools use it by themselves); troupe refuses every other host.",
            task.network_hosts.join(", ")
        ));
    }
    if let (Some(allowed), Some(web)) = (&powers.web, task.web.as_mut()) {
        web.rules = crate::web::narrowed(&web.rules, Some(allowed));
        if !web.rules.any() {
            web.tools.retain(|tool| tool != "web_fetch");
        }
        let hosts: Vec<String> = allowed.iter().map(ToString::to_string).collect();
        task.task.push_str(&format!(
            "\n\nThe web: troupe's web_fetch reads pages for you from {} only.",
            match hosts.is_empty() {
                true => "no host".to_string(),
                false => hosts.join(", "),
            }
        ));
    }
    if let Some(turns) = powers.max_turns {
        task.limits.max_turns = turns;
    }
    if let Some(tokens) = powers.max_tokens {
        task.limits.max_tokens = Some(tokens);
    }
    if let Some(secs) = powers.timeout {
        task.timeout_seconds = secs;
    }
}

/// The directories of `rel` that `base` lacks, made without following a
/// link on the way (`fsutil::nofollow`); the last one owned as `base` is
/// (an upper layer is the agent's uid's). What is there already, or cannot
/// be made, is left to the agent, which checks again and refuses the step.
fn make_dirs(base: &Path, rel: &Path) {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    // Something there already (a file, a link) is the agent's to judge.
    if std::fs::symlink_metadata(base.join(rel)).is_ok() {
        return;
    }
    let made = std::fs::metadata(base).and_then(|owner| {
        let root = crate::fsutil::nofollow::open_dir(base)?;
        let dir = crate::fsutil::nofollow::create_dirs_beneath(root.as_fd(), rel)?;
        nix::unistd::fchownat(
            dir.as_fd(),
            "",
            Some(nix::unistd::Uid::from_raw(owner.uid())),
            Some(nix::unistd::Gid::from_raw(owner.gid())),
            nix::fcntl::AtFlags::AT_EMPTY_PATH,
        )
        .map_err(std::io::Error::from)
    });
    if let Err(e) = made {
        crate::tell!(
            "troupe: cannot make {} in {} for its step's powers.write: {e}",
            rel.display(),
            base.display()
        );
    }
}

/// The model of a role, what its context holds and how long an answer
/// may be.
#[derive(Clone)]
pub struct RoleModel {
    pub model: Arc<dyn ChatModel>,
    pub context_window: Option<u32>,
    pub max_output_tokens: Option<u32>,
}

/// An agent's record in `run.json`, from the result troupe sealed when it
/// ended: the one way both a live run and a resume that replays the
/// journal (`replay`) make it. `dir` is the agent's directory as the run
/// shows it, relative to the run's workspace.
pub(super) fn ended(dir: String, result: &AgentResult) -> AgentRecord {
    let summary = match &result.verdict {
        Some(verdict) => verdict.summary.clone(),
        None => result.result_summary.clone(),
    };
    AgentRecord {
        dir,
        status: result.status,
        summary,
        deliverables_files: result.deliverables_files.clone(),
        verdict: result.verdict.clone(),
        error: result.error.clone(),
        stats: result.stats.clone(),
        success_claimed: result.success_claimed,
        changing_calls: result.changing_calls,
        timings: result.timings,
        result: result.result.clone(),
    }
}
