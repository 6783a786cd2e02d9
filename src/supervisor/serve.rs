//! Serving one child: answer its model requests, relay its progress, and
//! stop it when it overruns, hangs or breaks the protocol.
//!
//! Whatever the child does, this returns an outcome and never hangs: a
//! child that dies, exits without a result or writes garbage ends as
//! `error` with the reason; a timeout sends `cancel`, waits the grace
//! period while still reading what the child says, then kills its whole
//! session and confirms it is gone.

use std::process::ExitStatus;
use std::time::Duration;

use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};

use super::child::{ChildOutcome, ChildRun};
use super::events::AgentEvent;
use super::served::Served;
use super::violation::Violation;
use crate::deadline::after_tokio;
use crate::process::session;
use crate::protocol::{AgentStatus, CancelReason, LineReader, ToChild, encode_line};
use crate::signal::StopCause;

/// After the child exits, how long to keep reading lines still in the pipe
/// (a stray grandchild may hold it open).
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(500);
/// troupe's heartbeat while it serves a child.
const TICK: Duration = Duration::from_secs(1);

/// How long a watchdog that fired looks for a line already sent.
const LATE_LINE: Duration = Duration::from_millis(200);

/// How long to keep killing a session's stragglers before giving up.
const KILL_PATIENCE: Duration = Duration::from_secs(3);

enum Ending {
    /// The child closed its stdout.
    Eof,
    /// The child exited (its stdout may still be held open by a stray);
    /// `None` when its exit status could not be read.
    Exited(Option<ExitStatus>),
    /// The child reported its result but did not exit within the grace
    /// period after it.
    Lingered,
    /// Past `--timeout`; `stalled` of it troupe itself was stalled.
    Timeout {
        stalled: Duration,
    },
    Idle(Duration),
    Protocol(Violation),
    /// Stopped from outside: the run's deadline, Ctrl-C.
    Stopped(StopCause),
    /// No `hello` within the launch timeout.
    NoHello,
}

pub async fn serve(mut command: Command, run: ChildRun<'_>) -> ChildOutcome {
    let started = Instant::now();
    let mut served = Served::new(&run);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let why = match &run.launcher {
                Some(launcher) => format!("cannot start the launcher `{launcher}`: {e}"),
                None => {
                    let program = command
                        .as_std()
                        .get_program()
                        .to_string_lossy()
                        .into_owned();
                    format!("cannot start {program}: {e}")
                }
            };
            return served.outcome(AgentStatus::Error, Some(why), started);
        }
    };
    let pid = child.id();
    served.pid = pid;
    if let Some(pid) = pid {
        session::register(pid);
        let _ = run.spawned.set(pid);
    }
    let to_child = start_writer(&mut child);
    let Some(stdout) = child.stdout.take() else {
        return served.outcome(
            AgentStatus::Error,
            Some("the child has no stdout".into()),
            started,
        );
    };
    let mut lines = LineReader::new(BufReader::new(stdout), run.limits.line_cap);

    let ending = served
        .converse(&mut child, &mut lines, &to_child, started)
        .await;
    let mut exited_at = matches!(ending, Ending::Exited(_)).then(Instant::now);
    let (status, error) = match ending {
        Ending::Lingered => served.verdict_on_exit(None),
        Ending::Eof | Ending::Exited(_) => {
            let exit = match ending {
                Ending::Exited(status) => status,
                _ => tokio::time::timeout(run.limits.kill_grace, child.wait())
                    .await
                    .ok()
                    .and_then(Result::ok),
            };
            exited_at.get_or_insert_with(Instant::now);
            served
                .drain(&mut lines, after_tokio(Instant::now(), DRAIN_AFTER_EXIT))
                .await;
            served.verdict_on_exit(exit)
        }
        Ending::Timeout { stalled } => {
            let secs = run.limits.timeout.as_secs_f64();
            let mut why = format!("timed out after {secs} s");
            if !stalled.is_zero() {
                why.push_str(&format!(
                    " (troupe itself was stalled for {} s of it: stopped, suspended or starved)",
                    stalled.as_secs()
                ));
            }
            served
                .stop(
                    &mut child,
                    &mut lines,
                    &to_child,
                    &why,
                    CancelReason::Timeout,
                )
                .await;
            (AgentStatus::Timeout, Some(why))
        }
        Ending::Idle(quiet) => {
            let why = format!("sent nothing for {} s (--idle-timeout)", quiet.as_secs());
            served
                .stop(
                    &mut child,
                    &mut lines,
                    &to_child,
                    &why,
                    CancelReason::IdleTimeout,
                )
                .await;
            (AgentStatus::IdleTimeout, Some(why))
        }
        Ending::Stopped(cause) => {
            let why = cause.to_string();
            served
                .stop(
                    &mut child,
                    &mut lines,
                    &to_child,
                    &why,
                    CancelReason::Terminated,
                )
                .await;
            (AgentStatus::Terminated, Some(why))
        }
        Ending::NoHello => {
            let secs = run.limits.launch_timeout.as_secs();
            let through = run
                .launcher
                .as_ref()
                .map(|l| format!(" through the launcher `{l}`"))
                .unwrap_or_default();
            let mut why =
                format!("the agent did not start{through} within {secs} s (--launch-timeout)");
            served
                .stop(
                    &mut child,
                    &mut lines,
                    &to_child,
                    &why,
                    CancelReason::LaunchTimeout,
                )
                .await;
            if let Some(tail) = super::served::log_tail(&run.stderr_log) {
                why.push_str(&format!("; its stderr ends: {tail}"));
            }
            (AgentStatus::Error, Some(why))
        }
        Ending::Protocol(e) => {
            let why = format!("protocol error: {e}");
            served
                .stop(
                    &mut child,
                    &mut lines,
                    &to_child,
                    &why,
                    CancelReason::ProtocolError,
                )
                .await;
            // Past its token or cost cap, an agent has failed as one that
            // spent them, whatever it did after.
            let status = match e {
                Violation::PastTokenCap(_) | Violation::PastCostCap(_) => AgentStatus::Failed,
                _ => AgentStatus::Error,
            };
            (status, Some(why))
        }
    };
    served.pending.abort_all();
    let exited_at = exited_at.unwrap_or_else(Instant::now);
    // The session outlives its reaped leader while any member is left, and
    // its id cannot be reused until the last one is gone, so this reaches
    // exactly what the child started.
    if let Some(pid) = pid {
        let alive = session::kill_session(pid, KILL_PATIENCE).await;
        if !alive.is_empty() {
            let message = format!("processes {alive:?} of the agent's session survived SIGKILL");
            run.events
                .event(run.name, AgentEvent::Warning { message: &message });
        }
    }
    let _ = child.wait().await;
    if let Some(pid) = pid {
        session::unregister(pid);
        // A stand-in killed before it could remove the agent's control
        // group leaves it, empty: the group is named after its pid. Under a
        // launcher the child is the launcher, and the group is elsewhere.
        if run.launcher.is_none() {
            crate::sandbox::remove_leftover_group(pid);
        }
    }
    served.timings(started, exited_at);
    served.outcome(status, error, started)
}

/// The child's stdin, fed by one task so replies never interleave.
fn start_writer(child: &mut Child) -> mpsc::UnboundedSender<ToChild> {
    let (tx, mut rx) = mpsc::unbounded_channel::<ToChild>();
    if let Some(mut stdin) = child.stdin.take() {
        tokio::spawn(async move {
            while let Some(message) = rx.recv().await {
                let line = encode_line(&message);
                if stdin.write_all(line.as_bytes()).await.is_err() || stdin.flush().await.is_err() {
                    break;
                }
            }
        });
    }
    tx
}

impl Served<'_, '_> {
    /// The normal life of the child: lines in, answers out, until it ends
    /// or a limit ends it.
    async fn converse(
        &mut self,
        child: &mut Child,
        lines: &mut LineReader<BufReader<ChildStdout>>,
        to_child: &mpsc::UnboundedSender<ToChild>,
        started: Instant,
    ) -> Ending {
        let limits = self.run.limits.clone();
        let deadline = after_tokio(started, limits.timeout);
        let mut last_heard = Instant::now();
        let mut reported_at = None;
        // troupe's own heartbeat: a tick that comes late says troupe was
        // not running (SIGSTOP, a suspend, a starved node) for that long.
        let mut ticks = tokio::time::interval(TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_tick = Instant::now();
        let mut stalled = Duration::ZERO;
        loop {
            let idle_at = limits
                .idle_timeout
                .map(|idle| after_tokio(last_heard, idle));
            let watch_idle = idle_at.is_some() && self.pending.is_empty();
            if reported_at.is_none() && (self.finish.is_some() || self.verdict.is_some()) {
                reported_at = Some(Instant::now());
            }
            let linger_until = reported_at.map(|at| after_tokio(at, limits.kill_grace));
            // In this order: the run's stop, troupe's heartbeat (so that a
            // stall is known before the timeout it causes is said) and the
            // child's own timeout first, so that no flood of lines holds
            // them off; then what the child said, before any watchdog, so
            // that lines the kernel took while troupe itself was stalled
            // (stopped, suspended, starved) count as heard, and a stall of
            // troupe never fails an agent that kept working.
            tokio::select! {
                biased;
                cause = self.run.stop.stopped() => return Ending::Stopped(cause),
                _ = ticks.tick() => {
                    let gap = last_tick.elapsed();
                    if gap > TICK * 3 {
                        stalled += gap.saturating_sub(TICK);
                    }
                    last_tick = Instant::now();
                }
                () = sleep_until(deadline) => return Ending::Timeout { stalled },
                line = lines.next_line() => {
                    last_heard = Instant::now();
                    if let Some(ending) = self.heard(line) {
                        return ending;
                    }
                }
                Some(delay) = self.delays.1.recv() => {
                    last_heard = Instant::now();
                    self.event(AgentEvent::ModelDelayed { delay: &delay });
                }
                Some(answer) = self.pending.join_next(), if !self.pending.is_empty() => {
                    last_heard = Instant::now();
                    if let Ok(answer) = answer {
                        self.answer(answer, to_child);
                    }
                }
                Some(done) = self.mcp_pending.join_next(), if !self.mcp_pending.is_empty() => {
                    last_heard = Instant::now();
                    if let Ok((id, result)) = done {
                        let (result, error) = match result {
                            Ok(result) => (Some(result), None),
                            Err(error) => (None, Some(error.to_string())),
                        };
                        let _ = to_child.send(ToChild::McpResult { id, result, error });
                    }
                }
                Some(done) = self.web_pending.join_next(), if !self.web_pending.is_empty() => {
                    last_heard = Instant::now();
                    if let Ok((id, answer)) = done {
                        let (result, error) = match answer {
                            Ok(result) => (Some(result), None),
                            Err(error) => (None, Some(error.to_string())),
                        };
                        let _ = to_child.send(ToChild::WebResult { id, result, error });
                    }
                }
                status = child.wait() => return Ending::Exited(status.ok()),
                () = sleep_until(linger_until.unwrap_or(deadline)), if linger_until.is_some() => {
                    return Ending::Lingered;
                }
                () = sleep_until(after_tokio(started, limits.launch_timeout)), if !self.hello => {
                    match self.late_line(lines).await {
                        Some(Ok(())) => last_heard = Instant::now(),
                        Some(Err(ending)) => return ending,
                        None => return Ending::NoHello,
                    }
                }
                () = sleep_until(idle_at.unwrap_or(deadline)), if watch_idle => {
                    match self.late_line(lines).await {
                        Some(Ok(())) => last_heard = Instant::now(),
                        Some(Err(ending)) => return ending,
                        None => return Ending::Idle(limits.idle_timeout.unwrap_or_default()),
                    }
                }
            }
        }
    }

    /// A line read from the child: kept, or how the conversation ends.
    fn heard(
        &mut self,
        line: Result<Option<String>, crate::protocol::codec::ProtocolError>,
    ) -> Option<Ending> {
        match line {
            Ok(Some(line)) => self.handle(&line).err().map(Ending::Protocol),
            Ok(None) => Some(Ending::Eof),
            Err(e) => Some(Ending::Protocol(e.into())),
        }
    }

    /// A watchdog fired: a line the child sent while troupe itself was
    /// stalled may be in the pipe still, and is looked for a moment
    /// before the child is taken for silent. `None`: no line came.
    async fn late_line(
        &mut self,
        lines: &mut LineReader<BufReader<ChildStdout>>,
    ) -> Option<Result<(), Ending>> {
        let line = tokio::time::timeout(LATE_LINE, lines.next_line())
            .await
            .ok()?;
        Some(match self.heard(line) {
            Some(ending) => Err(ending),
            None => Ok(()),
        })
    }

    /// Ask the child to stop, listen during the grace period, then leave
    /// the rest to the session kill.
    async fn stop(
        &mut self,
        child: &mut Child,
        lines: &mut LineReader<BufReader<ChildStdout>>,
        to_child: &mpsc::UnboundedSender<ToChild>,
        why: &str,
        reason: CancelReason,
    ) {
        self.event(AgentEvent::Stopping { reason: why });
        self.pending.abort_all();
        self.mcp_pending.abort_all();
        self.web_pending.abort_all();
        let _ = to_child.send(ToChild::Cancel { reason });
        let grace_end = after_tokio(Instant::now(), self.run.limits.kill_grace);
        self.drain(lines, grace_end).await;
        let exited = tokio::time::timeout_at(grace_end, child.wait())
            .await
            .is_ok();
        // A launcher (srun) turns SIGTERM into cancelling what it placed;
        // it gets that chance, and the grace period again, before SIGKILL.
        if !exited
            && self.run.launcher.is_some()
            && let Some(pid) = self.pid.and_then(|p| i32::try_from(p).ok())
        {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = tokio::time::timeout(self.run.limits.kill_grace, child.wait()).await;
        }
    }

    /// Reads what is left in the pipe until it closes or `until`, keeping
    /// what the child reports, and the first protocol error it makes;
    /// model requests are no longer answered.
    async fn drain(&mut self, lines: &mut LineReader<BufReader<ChildStdout>>, until: Instant) {
        self.answering = false;
        loop {
            tokio::select! {
                line = lines.next_line() => match line {
                    Ok(Some(line)) => {
                        if let Err(e) = self.handle(&line) {
                            self.late_protocol_error.get_or_insert(e);
                        }
                    }
                    _ => return,
                },
                () = sleep_until(until) => return,
            }
        }
    }
}
