//! `troupe status`, `wait` and `terminate`: spawned agents, seen and
//! stopped from another shell.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::Serialize;
use serde_json::Value;

use super::UsageError;
use crate::protocol::{AgentStatus, SUBAGENT_DIR};
use crate::supervisor::registry;
use crate::supervisor::status::StatusFile;

/// Where agents and runs are: a workspace's `sub_agent_results/`, or a
/// results directory named outright.
#[derive(Debug, Clone, Args)]
pub struct Place {
    /// The workspace whose sub_agent_results/ holds the agents and runs.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workspace: PathBuf,

    /// The results directory itself (instead of <workspace>/sub_agent_results).
    #[arg(long, value_name = "DIR")]
    pub results: Option<PathBuf>,
}

impl Place {
    /// The results directory as an absolute path, links resolved: the one
    /// the user named is the user's own; below it troupe follows no link.
    pub fn results(&self) -> PathBuf {
        let named = self
            .results
            .clone()
            .unwrap_or_else(|| self.workspace.join(crate::protocol::RESULTS_DIR));
        named
            .canonicalize()
            .or_else(|_| std::path::absolute(&named))
            .unwrap_or(named)
    }
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  troupe status\n  troupe status 1 2 --json")]
pub struct StatusArgs {
    /// Agent ids (default: every agent in the results directory).
    #[arg(value_name = "ID")]
    pub ids: Vec<String>,

    /// Print one JSON object, {"success", "agents": [...]}, instead of a table.
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub place: Place,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  troupe wait 1 2 --timeout 600 | jq -c .status\n  troupe wait --all\n  troupe wait 1 2 3 --any\n  while troupe wait --all --any > next.json || [ $? -eq 1 ]; do jq -c . next.json; done   # each agent once, as it ends; exit 3 after the last"
)]
pub struct WaitArgs {
    /// The agents to wait for.
    #[arg(value_name = "ID", required_unless_present = "all")]
    pub ids: Vec<String>,

    /// Every agent of the results directory, instead of the ids given.
    #[arg(long, conflicts_with = "ids")]
    pub all: bool,

    /// Return when the first of them ends, with its result alone (and its
    /// exit: 0 when it completed), instead of when all have. Each agent
    /// once: one an earlier `wait --any` returned is passed over, and when
    /// every one of them was returned, the exit is 3, so that a script
    /// loops on it until then.
    #[arg(long)]
    pub any: bool,

    /// Give up after this many seconds (exit code 124).
    #[arg(long, value_name = "SECS", allow_negative_numbers = true, value_parser = crate::settings::numbers::seconds)]
    pub timeout: Option<u64>,

    #[command(flatten)]
    pub place: Place,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  troupe terminate 2 --patience 10\n  troupe terminate 2 3\n  troupe terminate --all"
)]
pub struct TerminateArgs {
    /// The agents to stop.
    #[arg(value_name = "ID", required_unless_present = "all")]
    pub ids: Vec<String>,

    /// Every agent of the results directory that is running, instead of
    /// the ids given.
    #[arg(long, conflicts_with = "ids")]
    pub all: bool,

    /// Seconds to wait for the agent to stop before killing it outright.
    #[arg(long, value_name = "SECS", default_value_t = 30, allow_negative_numbers = true, value_parser = crate::settings::numbers::seconds_or_none)]
    pub patience: u64,

    #[command(flatten)]
    pub place: Place,
}

/// The seed's answer to get_sub_agent_status.
#[derive(Serialize)]
struct StatusAnswer {
    success: bool,
    agents: Vec<Seen>,
}

/// How an agent stands, as `status` shows it: its own status, or what
/// the registry says of an agent whose status cannot be believed or found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(untagged)]
enum Standing {
    Agent(AgentStatus),
    Missing(Missing),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Missing {
    /// Its supervisor died without a final word.
    Lost,
    /// There is no such agent.
    Unknown,
}

impl Standing {
    fn as_str(self) -> &'static str {
        match self {
            Standing::Agent(status) => status.as_str(),
            Standing::Missing(Missing::Lost) => "lost",
            Standing::Missing(Missing::Unknown) => "unknown",
        }
    }

    fn ended(self) -> bool {
        self != Standing::Agent(AgentStatus::Running)
    }
}

impl std::fmt::Display for Standing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One agent as `status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Seen {
    agent_id: Value,
    summary: String,
    status: Standing,
    runtime_seconds: f64,
    files_read: u64,
    searches: u64,
    web_pages: u64,
    commands: u64,
    token_usage: Value,
    last_action: String,
    /// For a running agent: seconds since `last_action` began.
    #[serde(skip_serializing_if = "Option::is_none")]
    last_action_seconds: Option<i64>,
    deliverables_dir: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    supervisor_pid: Option<u32>,
}

impl Seen {
    /// Whether it ended, however: it is no longer running.
    pub fn ended(&self) -> bool {
        self.status.ended()
    }

    /// Whether there is no such agent.
    pub fn is_unknown(&self) -> bool {
        self.status == Standing::Missing(Missing::Unknown)
    }

    /// What there is to say of it: its last action, or why it is unknown.
    pub fn last_action(&self) -> &str {
        &self.last_action
    }
}

/// An agent id as the seed gives it: a number where it is one.
pub fn agent_id_value(id: &str) -> Value {
    id.parse::<u64>()
        .map(Value::from)
        .unwrap_or_else(|_| Value::from(id))
}

/// Agent `id` of the results directory, as `status` shows it.
pub fn look(results: &Path, id: &str) -> Seen {
    let dir = registry::agent_dir(results, id);
    let held = registry::is_held(&dir);
    let Some(file) = StatusFile::load(&dir.join(SUBAGENT_DIR)) else {
        return Seen {
            agent_id: agent_id_value(id),
            summary: String::new(),
            status: Standing::Missing(Missing::Unknown),
            runtime_seconds: 0.0,
            files_read: 0,
            searches: 0,
            web_pages: 0,
            commands: 0,
            token_usage: Value::Null,
            last_action: format!("no agent {id} in {}", results.display()),
            last_action_seconds: None,
            deliverables_dir: String::new(),
            supervisor_pid: None,
        };
    };
    let running = file.status == AgentStatus::Running;
    let status = match (running, held) {
        (true, false) => Standing::Missing(Missing::Lost),
        _ => Standing::Agent(file.status),
    };
    let runtime = if running && held {
        crate::protocol::round_seconds(
            (chrono::Utc::now() - file.started_at).num_milliseconds() as f64 / 1000.0,
        )
    } else {
        file.runtime_seconds
    };
    Seen {
        agent_id: agent_id_value(id),
        summary: file.summary,
        status,
        runtime_seconds: runtime,
        files_read: file.files_read,
        searches: file.searches,
        web_pages: file.web_pages,
        commands: file.commands,
        token_usage: serde_json::to_value(file.token_usage).unwrap_or_default(),
        last_action: file.last_action,
        last_action_seconds: file
            .last_action_at
            .filter(|_| running && held)
            .map(|since| (chrono::Utc::now() - since).num_seconds().max(0)),
        deliverables_dir: file.deliverables_dir,
        supervisor_pid: running.then_some(file.supervisor_pid),
    }
}

pub fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let results = args.place.results();
    let ids = if args.ids.is_empty() {
        registry::known_ids(&results)
    } else {
        args.ids.clone()
    };
    let agents: Vec<Seen> = ids.iter().map(|id| look(&results, id)).collect();
    let unknown = agents
        .iter()
        .any(|a| a.status == Standing::Missing(Missing::Unknown));
    if args.json {
        let out = StatusAnswer {
            success: !unknown,
            agents,
        };
        crate::say!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        crate::console::out(&table(&agents));
        let team_runs = std::fs::read_dir(&results).is_ok_and(|mut entries| {
            entries.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("run_")))
        });
        if agents.is_empty() && team_runs {
            crate::console::out(
                "(these are agents of troupe spawn; the team runs here are listed by troupe runs)\n",
            );
        }
    }
    Ok(if unknown {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

fn table(agents: &[Seen]) -> String {
    if agents.is_empty() {
        return "no agents\n".to_string();
    }
    let rows: Vec<[String; 8]> = agents
        .iter()
        .map(|a| {
            [
                a.agent_id.to_string().trim_matches('"').to_string(),
                a.status.to_string(),
                format!("{:.1} s", a.runtime_seconds),
                a.files_read.to_string(),
                a.commands.to_string(),
                a.token_usage["total"].as_u64().unwrap_or(0).to_string(),
                serde_json::from_value::<crate::chat::Usage>(a.token_usage.clone())
                    .map_or_else(|_| "-".to_string(), |usage| usage.dollars()),
                match a.last_action_seconds {
                    Some(secs) => {
                        format!("{} ({secs} s)", crate::text::excerpt(&a.last_action, 52))
                    }
                    None => crate::text::excerpt(&a.last_action, 60),
                },
            ]
        })
        .collect();
    let header = [
        "agent",
        "status",
        "runtime",
        "read",
        "commands",
        "tokens",
        "cost",
        "last action",
    ];
    crate::text::columns("", header, &rows)
}

/// The result object of agent `id`, which ended: its `result.json`, or,
/// when it left none (or its supervisor died without a final word), how
/// it stands.
pub fn result_object(results: &Path, id: &str, seen: &Seen) -> Value {
    let result = crate::fsutil::read_record(
        &registry::agent_dir(results, id)
            .join(SUBAGENT_DIR)
            .join("result.json"),
    );
    result
        .ok()
        .filter(|_| seen.status != Standing::Missing(Missing::Lost))
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .unwrap_or_else(|| serde_json::to_value(seen).unwrap_or_default())
}

pub async fn wait(args: WaitArgs) -> anyhow::Result<ExitCode> {
    let results = args.place.results();
    let give_up = args
        .timeout
        .map(|secs| crate::deadline::after(Instant::now(), Duration::from_secs(secs)));
    let ids = match args.all {
        true => registry::known_ids(&results),
        false => args.ids.clone(),
    };
    if ids.is_empty() {
        return Err(
            UsageError::Said(format!("no agents in {} to wait for", results.display())).into(),
        );
    }
    loop {
        let seen: Vec<Seen> = ids.iter().map(|id| look(&results, id)).collect();
        if let Some(unknown) = seen
            .iter()
            .find(|s| s.status == Standing::Missing(Missing::Unknown))
        {
            return Err(UsageError::Said(unknown.last_action.clone()).into());
        }
        let fresh = |id: &String| !returned_by_wait(&results, id);
        if args.any && seen.iter().all(Seen::ended) && !ids.iter().any(fresh) {
            crate::tell!("troupe: every one of these agents was returned by an earlier wait --any");
            return Ok(ExitCode::from(3));
        }
        let first = args
            .any
            .then(|| {
                ids.iter()
                    .zip(&seen)
                    .find(|(id, agent)| agent.ended() && fresh(id))
            })
            .flatten();
        if let Some((id, _)) = first {
            mark_returned_by_wait(&results, id);
        }
        let done: Vec<(&String, &Seen)> = match first {
            Some(one) => vec![one],
            None if seen.iter().all(Seen::ended) => ids.iter().zip(&seen).collect(),
            None => Vec::new(),
        };
        if !done.is_empty() {
            let mut all_completed = true;
            for (id, agent) in done {
                all_completed &= agent.status == Standing::Agent(AgentStatus::Completed);
                // One JSON object per line, so that the output of several
                // agents is still JSON lines a parser reads.
                crate::say!("{}", result_object(&results, id, agent));
            }
            return Ok(if all_completed {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            });
        }
        if give_up.is_some_and(|at| Instant::now() >= at) {
            let running: Vec<&str> = ids
                .iter()
                .zip(&seen)
                .filter(|(_, s)| !s.ended())
                .map(|(id, _)| id.as_str())
                .collect();
            crate::tell!(
                "troupe: still running after {} s: {}",
                args.timeout.unwrap_or(0),
                running.join(", ")
            );
            return Ok(ExitCode::from(124));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The marker `wait --any` leaves in an agent's records once it returned
/// the agent: the start of the agent it returned, so that a later agent
/// of the same id is returned in its turn.
const RETURNED: &str = "returned-by-wait";

/// When the agent now at `id` started, as its status file says.
fn started(results: &Path, id: &str) -> Option<String> {
    let records = registry::agent_dir(results, id).join(SUBAGENT_DIR);
    StatusFile::load(&records).map(|status| status.started_at.to_rfc3339())
}

/// Whether an earlier `wait --any` returned the agent now at `id`.
fn returned_by_wait(results: &Path, id: &str) -> bool {
    let marker = registry::agent_dir(results, id)
        .join(SUBAGENT_DIR)
        .join(RETURNED);
    let marked = crate::fsutil::read_head(&marker, 256)
        .ok()
        .map(|(text, _)| text);
    marked.is_some_and(|marked| Some(marked) == started(results, id))
}

/// Marks the agent now at `id` as returned; a marker that cannot be
/// written only means a later `wait --any` may return it again.
fn mark_returned_by_wait(results: &Path, id: &str) {
    let Some(started) = started(results, id) else {
        return;
    };
    let records = registry::agent_dir(results, id).join(SUBAGENT_DIR);
    let _ = crate::fsutil::RecordDir::open(&records).and_then(|dir| {
        dir.write_atomic(
            RETURNED,
            started.as_bytes(),
            crate::fsutil::Durability::Atomic,
        )
    });
}

/// The seed's answer to terminate_sub_agent.
#[derive(Debug, Serialize)]
pub struct Terminated {
    pub success: bool,
    pub agent_id: Value,
    pub status: String,
    pub message: String,
    pub partial_results: bool,
    pub deliverables_dir: String,
}

/// Stops each agent named, all at once (one's patience is not waited out
/// before the next is asked); one answer each, in the order given. With
/// one id the answer is printed indented, as it always was; with several,
/// one JSON object per line.
pub async fn terminate(args: TerminateArgs) -> anyhow::Result<ExitCode> {
    let results = args.place.results();
    let ids = match args.all {
        true => registry::known_ids(&results)
            .into_iter()
            .filter(|id| !look(&results, id).ended())
            .collect(),
        false => args.ids.clone(),
    };
    if ids.is_empty() {
        crate::tell!("troupe: no agent in {} is running", results.display());
        return Ok(ExitCode::SUCCESS);
    }
    let stops = ids.iter().map(|id| stop(&results, id, args.patience, true));
    let answers = futures_util::future::join_all(stops).await;
    let mut all_stopped = true;
    for answer in answers {
        let answer = answer?;
        all_stopped &= answer.success;
        match ids.len() {
            1 => crate::say!("{}", serde_json::to_string_pretty(&answer)?),
            _ => crate::say!("{}", serde_json::to_string(&answer)?),
        }
    }
    Ok(match all_stopped {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    })
}

/// Stops agent `id`, whoever supervises it: SIGTERM to its supervisor
/// (which cancels the agent, waits out its grace and keeps its records;
/// not when `signal` is false, for a supervisor that was asked already,
/// since a second SIGTERM kills at once), and after `patience` seconds
/// SIGKILL to both. An agent that is not running is left as it is, with
/// `success: false`.
pub async fn stop(
    results: &Path,
    id: &str,
    patience: u64,
    signal: bool,
) -> Result<Terminated, UsageError> {
    let dir = registry::agent_dir(results, id);
    let before = look(results, id);
    if before.status == Standing::Missing(Missing::Unknown) {
        return Err(UsageError::Said(before.last_action));
    }
    let holder = registry::holder(&dir).filter(|_| registry::is_held(&dir));
    let Some(holder) = holder else {
        return Ok(Terminated {
            success: false,
            agent_id: before.agent_id.clone(),
            status: before.status.to_string(),
            message: format!("Sub-agent {id} is not running (status {})", before.status),
            partial_results: has_results(&dir),
            deliverables_dir: before.deliverables_dir,
        });
    };
    let supervisor = Pid::from_raw(i32::try_from(holder.pid).unwrap_or(i32::MAX));
    if signal {
        let _ = kill(supervisor, Signal::SIGTERM);
    }
    let give_up = crate::deadline::after(Instant::now(), Duration::from_secs(patience));
    while registry::is_held(&dir) && Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut message = format!("Sub-agent {id} was terminated");
    if registry::is_held(&dir) {
        let _ = kill(supervisor, Signal::SIGKILL);
        if let Some(agent) = StatusFile::load(&dir.join(SUBAGENT_DIR)).and_then(|s| s.agent_pid) {
            crate::process::session::kill_session(agent, Duration::from_secs(3)).await;
            crate::sandbox::remove_leftover_group(agent);
        }
        message = format!("Sub-agent {id} did not stop within {patience} s and was killed");
    }
    let after = look(results, id);
    Ok(Terminated {
        success: true,
        agent_id: after.agent_id,
        status: "terminated".to_string(),
        message,
        partial_results: has_results(&dir),
        deliverables_dir: after.deliverables_dir,
    })
}

/// Whether the agent left anything: a deliverable, or a transcript past its
/// opening messages.
fn has_results(agent_dir: &Path) -> bool {
    let workspace = agent_dir.parent().unwrap_or(agent_dir);
    let delivered = !crate::fsutil::deliverable_files(workspace, agent_dir).is_empty();
    let talked = crate::transcript::load(&agent_dir.join(SUBAGENT_DIR).join("conversations.json"))
        .is_ok_and(|c| c.messages.len() > 2);
    delivered || talked
}
