//! The child, `troupe-agent`: one task file, one directory, one tool loop.
//!
//! It reads the task the parent wrote, says `hello`, runs the worker loop
//! and reports `finished` (or `error`) on stdout, which carries nothing but
//! protocol lines. Its model is the parent, asked over the pipe; only when
//! run stand-alone for debugging (`--model`) does it build a model itself.
//! Whatever happens, the transcript on disk is the last valid copy and no
//! command it started outlives it.

mod birth;
mod calls;
mod cancel;
mod compaction;
mod deliverables;
mod outbox;
mod parent_model;
mod proxy;
mod reviewer;
mod session;
mod stats;
mod stdio;
mod worker;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use self::calls::CallRunner;
use self::cancel::CancelCause;
use self::outbox::Outbox;
use self::parent_model::ParentModel;
use self::session::{LoopEnd, Session};
use self::stats::StatsCounter;
use crate::fsutil::RecordDir;
use crate::llm::ChatModel;
use crate::llm::scripted::ScriptedModel;
use crate::protocol::{
    AgentRole, AgentStats, AgentStatus, FinishReport, FromChild, PROTOCOL_VERSION, SandboxReport,
    TaskFile, encode_line,
};
use crate::sandbox::{self, Confined};
use crate::signal::StopSignal;
use crate::tools::mcp::McpRelay;
use crate::tools::web::WebRelay;
use crate::tools::{CommandSetting, PathFence, ToolContext, ToolRegistry};
use crate::transcript::{Conversation, TranscriptWriter};

pub struct AgentOptions {
    pub task_path: PathBuf,
    /// Stand-alone mode: a scripted model to replay in-process instead of
    /// asking the parent. Only a script: the agent has no HTTP client, so
    /// it never needs the network or a key (`troupe spawn` is the way to
    /// run one agent against an endpoint).
    pub script: Option<PathBuf>,
}

/// The child's whole life; the exit code is 0 when the task succeeded.
/// The task is read and the sandbox applied before the runtime exists, so
/// no thread escapes the sandbox.
pub fn main(options: AgentOptions) -> ExitCode {
    // The pid troupe knows it by: past this point the agent may be a
    // process of a PID namespace of its own.
    let pid = std::process::id();
    sandbox::shut_inherited(sandbox::Inherited::Close);
    if let Err(message) = birth::take_over() {
        write_now(&FromChild::error(message));
        return ExitCode::FAILURE;
    }
    if let Err(e) = sandbox::make_undumpable() {
        write_now(&FromChild::error(format!(
            "cannot close this process's /proc entries (PR_SET_DUMPABLE): {e}"
        )));
        return ExitCode::FAILURE;
    }
    let task = match read_task(&options.task_path) {
        Ok(task) => task,
        Err(message) => {
            write_now(&FromChild::error(message));
            return ExitCode::from(2);
        }
    };
    crate::fsutil::set_mode(task.durability);
    let settings = task.sandbox.clone();
    // Stand-alone, the model is loaded before the sandbox, which may not let
    // the agent read a script file outside the workspace.
    let scripted = options
        .script
        .as_deref()
        .map(ScriptedModel::load)
        .transpose();
    let model: Option<Arc<dyn ChatModel>> = match scripted {
        Ok(model) => model.map(|m| Arc::new(m) as Arc<dyn ChatModel>),
        Err(e) => {
            write_now(&FromChild::error(e.to_string()));
            return ExitCode::from(2);
        }
    };
    let confined = match sandbox::enter(&task, &settings) {
        Ok(confined) => confined,
        Err(e) => {
            write_now(&hello(&task, pid, None));
            write_now(&FromChild::error(e.to_string()));
            return ExitCode::FAILURE;
        }
    };
    if !confined.report.note.is_empty() {
        crate::tell!("troupe-agent: {}", confined.report.note);
    }
    if let Some(tmp) = &confined.tmp_dir {
        // SAFETY: the agent has one thread still; no other reads the
        // environment while it changes.
        unsafe { std::env::set_var("TMPDIR", tmp) };
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            crate::tell!("troupe-agent: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(run(task, pid, confined, model))
    }));
    // The stdin reader sits in a blocking read the parent may never end;
    // waiting for it would keep a finished child, or one that panicked,
    // alive.
    runtime.shutdown_background();
    ran.unwrap_or_else(|panic| {
        write_now(&FromChild::error(format!(
            "troupe-agent panicked: {} (a bug in troupe; its stderr.log has where)",
            crate::text::panic_message(panic.as_ref())
        )));
        ExitCode::from(101)
    })
}

async fn run(
    task: TaskFile,
    pid: u32,
    confined: Confined,
    model: Option<Arc<dyn ChatModel>>,
) -> ExitCode {
    let out = Outbox::stdout();
    out.send(&hello(&task, pid, Some(confined.report.clone())));
    let code = run_task(&task, confined, model, &out).await;
    out.flush().await;
    code
}

fn hello(task: &TaskFile, pid: u32, sandbox: Option<SandboxReport>) -> FromChild {
    FromChild::Hello {
        protocol: PROTOCOL_VERSION,
        agent_id: task.agent_id.clone(),
        role: task.role,
        pid,
        sandbox,
    }
}

/// One protocol line, before the async writer exists.
fn write_now(message: &FromChild) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(encode_line(message).as_bytes());
    let _ = stdout.flush();
}

fn read_task(path: &Path) -> Result<TaskFile, String> {
    let task: TaskFile =
        crate::fsutil::read_json(path, "the task file").map_err(|e| e.to_string())?;
    if task.protocol != PROTOCOL_VERSION {
        return Err(format!(
            "the task file {} is for protocol {}, this troupe-agent speaks {PROTOCOL_VERSION}",
            path.display(),
            task.protocol
        ));
    }
    Ok(task)
}

async fn run_task(
    task: &TaskFile,
    confined: Confined,
    model: Option<Arc<dyn ChatModel>>,
    out: &Outbox,
) -> ExitCode {
    let Confined {
        report: sandbox,
        journal,
        tmp_dir: _,
        limit_events,
    } = confined;
    let cancel = StopSignal::<CancelCause>::default();
    watch_sigterm(cancel.clone());
    let (model, relay, web): (Arc<dyn ChatModel>, Option<Arc<dyn McpRelay>>, _) = match model {
        Some(model) => (model, None, None),
        None => {
            let parent = ParentModel::start(out.clone(), cancel.clone());
            let relay: Arc<dyn McpRelay> = Arc::new(parent.mcp());
            let web: Arc<dyn WebRelay> = Arc::new(parent.mcp());
            (Arc::new(parent), Some(relay), Some(web))
        }
    };
    let records = Arc::new(RecordDir::from_fd(journal, task.subagent_dir()));
    let fence = match PathFence::new(&task.workspace, &task.agent_dir) {
        Ok(fence) => fence,
        Err(e) => {
            return fail(
                out,
                format!("cannot prepare {}: {e}", task.agent_dir.display()),
            );
        }
    };
    let conversation = Conversation::for_task(task);
    let mut transcript = match TranscriptWriter::create(Arc::clone(&records), conversation) {
        Ok(transcript) => transcript,
        Err(e) => return fail(out, format!("cannot write the transcript: {e}")),
    };
    let proxy = match task.network_hosts.is_empty() {
        true => None,
        false => {
            let broker = records.through_descriptor(crate::protocol::BROKER_SOCKET);
            match proxy::start(broker).await {
                Ok(url) => Some(url),
                Err(e) => {
                    return fail(
                        out,
                        format!("cannot start the proxy to troupe's broker: {e}"),
                    );
                }
            }
        }
    };
    let commands = CommandSetting {
        limit_events,
        memory: task.sandbox.max_memory,
        processes: task.sandbox.max_processes,
        withheld_env: task.sandbox.mcp_only_env.clone(),
        proxy,
    };
    let ctx = Arc::new(ToolContext::new(
        fence,
        records,
        task.limits.clone(),
        commands,
    ));
    let with_shell = sandbox.fully_enforced();
    let stats = Arc::new(StatsCounter::new(Some(sandbox)));
    let heartbeat = start_heartbeat(
        out.clone(),
        Arc::clone(&stats),
        task.limits.heartbeat_seconds,
    );
    // A server that hangs in its handshake holds no cancel up: stopped
    // meanwhile, the agent goes on without its servers and ends at once
    // (a server half started dies with the dropped start).
    let servers = cancel
        .race(crate::tools::mcp::start(&task.mcp, &ctx))
        .await
        .unwrap_or_default();
    for unstarted in &servers.unstarted {
        crate::tell!(
            "troupe-agent: {}; its tools are not available",
            unstarted.error
        );
    }
    stats.servers_unstarted(servers.unstarted.clone());
    let registry = match task.role {
        AgentRole::Reviewer => ToolRegistry::reviewer(with_shell),
        AgentRole::Worker => match &task.output_schema {
            Some(schema) => ToolRegistry::worker().returning(schema.clone()),
            None => ToolRegistry::worker(),
        },
    };
    let (registry, withheld) = match &task.tools {
        Some(names) => registry.only(names),
        None => (registry, Vec::new()),
    };
    let registry = registry
        .with(servers.tools)
        .with(crate::tools::mcp::relayed(&task.mcp_remote, relay))
        .with(crate::tools::web::tools(
            task.web.as_ref().map_or(&[], |web| web.tools.as_slice()),
            web,
        ));
    let calls = CallRunner {
        withheld,
        unstarted: servers.unstarted,
        registry,
        ctx: Arc::clone(&ctx),
        stats: Arc::clone(&stats),
        out: out.clone(),
        trace: crate::protocol::TraceParent::from_env(),
        reported: Default::default(),
    };
    let mut session = Session::new(task, model, calls, &mut transcript, cancel);
    if task.role == AgentRole::Reviewer {
        session = session.with_schema(crate::protocol::verdict_schema());
    }
    let end = match task.role {
        AgentRole::Reviewer => reviewer::run(session).await,
        AgentRole::Worker => worker::run(session).await,
    };
    heartbeat.abort();
    ctx.groups.kill_all();
    let mut stats = stats.snapshot();
    transcript.set_stats(stats.clone());
    stats.transcript_ms = Some(crate::protocol::round_seconds(
        transcript.write_time().as_secs_f64() * 1000.0,
    ));
    report(end, &mut transcript, &ctx, stats, out)
}

/// Seals the transcript and tells the parent how the loop ended.
fn report(
    end: LoopEnd,
    transcript: &mut TranscriptWriter,
    ctx: &ToolContext,
    stats: AgentStats,
    out: &Outbox,
) -> ExitCode {
    let (sealed, code) = match end {
        LoopEnd::Finished {
            success,
            summary,
            stop_reason,
            result,
        } => {
            let status = if success {
                AgentStatus::Completed
            } else {
                AgentStatus::Failed
            };
            let sealed = transcript.finish(status, Some(stop_reason), None);
            out.send(&FromChild::Finished(FinishReport {
                success,
                summary,
                deliverables_files: deliverables::collect(ctx),
                stats,
                stop_reason: Some(stop_reason),
                result,
            }));
            (
                sealed,
                if success {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                },
            )
        }
        LoopEnd::Verdict(verdict) => {
            let sealed = transcript.finish(AgentStatus::Completed, None, None);
            out.send(&FromChild::Stats(stats));
            out.send(&FromChild::Verdict(verdict));
            (sealed, ExitCode::SUCCESS)
        }
        LoopEnd::Cancelled(cause) => {
            let sealed = transcript.finish(
                AgentStatus::Terminated,
                None,
                Some(format!("cancelled: {cause}")),
            );
            out.send(&FromChild::Stats(stats));
            (sealed, ExitCode::FAILURE)
        }
        LoopEnd::ContextExhausted(refused) => {
            let error = format!(
                "the conversation no longer fits the model's context, compacted as far as it goes: {refused}"
            );
            let sealed =
                transcript.finish(AgentStatus::ContextExhausted, None, Some(error.clone()));
            out.send(&FromChild::Stats(stats));
            out.send(&FromChild::Error {
                message: error,
                context_exhausted: true,
            });
            (sealed, ExitCode::FAILURE)
        }
        LoopEnd::Failed(failure) => {
            let error = failure.to_string();
            let sealed = transcript.finish(AgentStatus::Error, None, Some(error.clone()));
            out.send(&FromChild::Stats(stats));
            out.send(&FromChild::error(error));
            (sealed, ExitCode::FAILURE)
        }
    };
    if let Err(e) = sealed {
        out.send(&FromChild::error(format!(
            "cannot write the final transcript: {e}"
        )));
        return ExitCode::FAILURE;
    }
    code
}

fn fail(out: &Outbox, message: String) -> ExitCode {
    out.send(&FromChild::error(message));
    ExitCode::FAILURE
}

/// `stats` every few seconds, so the parent's idle watchdog can tell a long
/// command from a hung child.
fn start_heartbeat(
    out: Outbox,
    stats: Arc<StatsCounter>,
    seconds: u64,
) -> tokio::task::JoinHandle<()> {
    let period = Duration::from_secs(seconds.max(1));
    tokio::spawn(async move {
        let start = crate::deadline::after_tokio(tokio::time::Instant::now(), period);
        let mut ticks = tokio::time::interval_at(start, period);
        loop {
            ticks.tick().await;
            out.send(&FromChild::Stats(stats.snapshot()));
        }
    })
}

/// SIGTERM (a launcher or a user stopping the child) cancels like the
/// parent's `cancel`, so the transcript is sealed on the way out.
fn watch_sigterm(cancel: StopSignal<CancelCause>) {
    use tokio::signal::unix::{SignalKind, signal};
    if let Ok(mut term) = signal(SignalKind::terminate()) {
        tokio::spawn(async move {
            if term.recv().await.is_some() {
                cancel.trigger(CancelCause::Sigterm);
            }
        });
    }
}
