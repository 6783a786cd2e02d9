//! `run_command`: one shell command in the workspace, with its own timeout,
//! its own process group, stdin from /dev/null and capped output.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::resource::Resource;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::bounds;
use crate::process::{GroupGuard, Spawn, kill_group};

use super::{About, Counter, ToolContext, ToolError, ToolOutput, TypedTool};

/// Bytes kept per stream; the rest is counted and dropped.
const CAPTURE_CAP: usize = 1024 * 1024;
/// How long to keep reading after the command exits, for output still in
/// the pipes. A background process that keeps a pipe open does not hold the
/// agent up beyond this.
const DRAIN_GRACE: Duration = Duration::from_millis(200);

pub(super) struct RunCommand;

impl TypedTool for RunCommand {
    type Args = Args;
    const ABOUT: About = About::changing("run_command", DESCRIPTION).counting(Counter::Commands);

    async fn run(&self, args: Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let cwd = ctx.fence.resolve_read(args.cwd.as_deref().unwrap_or("."))?;
        let limit = args
            .timeout_seconds
            .unwrap_or(ctx.limits.command_timeout_seconds)
            .clamp(1, ctx.limits.max_command_timeout_seconds.max(1));
        run(&args.command, &cwd, Duration::from_secs(limit), ctx).await
    }
}

/// The agent's private TMPDIR (inside its own `.subagent/`) is made on
/// its first command, not for every agent: most never run one, and each
/// directory is an inode to allocate.
fn make_tmp_dir() {
    use std::os::unix::fs::DirBuilderExt;
    if let Some(dir) = std::env::var_os("TMPDIR") {
        let _ = std::fs::DirBuilder::new().mode(0o700).create(dir);
    }
}

async fn run(
    command: &str,
    cwd: &std::path::Path,
    limit: Duration,
    ctx: &ToolContext,
) -> Result<ToolOutput, ToolError> {
    make_tmp_dir();
    ctx.commands.await_bounds();
    // The file size limit is the command's, not the agent's: a command
    // that writes too much is stopped, the agent goes on. The CPU limit
    // sends SIGXCPU, and SIGKILL a little after for a command that ignores
    // it.
    let mut limits = Vec::new();
    if let Some(bytes) = ctx.limits.max_file_size {
        limits.push((Resource::RLIMIT_FSIZE, bytes, bytes));
    }
    if let Some(secs) = ctx.limits.max_command_cpu {
        limits.push((Resource::RLIMIT_CPU, secs, secs.saturating_add(5)));
    }
    let mut sh = Spawn::command(limits).command_for("sh");
    if crate::sandbox::git_config_closed() {
        sh.env("GIT_CONFIG_GLOBAL", "/dev/null");
    }
    for name in &ctx.commands.withheld_env {
        sh.env_remove(name);
    }
    // troupe's pid on the host, which the agent needed at its birth; a
    // command has no use for it.
    sh.env_remove(crate::protocol::PARENT_PID_ENV);
    if let Some(proxy) = &ctx.commands.proxy {
        for name in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ] {
            sh.env(name, proxy);
        }
        // Every host goes through troupe, which says which it lets by.
        sh.env_remove("NO_PROXY").env_remove("no_proxy");
    }
    // The command runs in its call's span: a tool that understands W3C
    // trace context joins the run's trace under it.
    if let Ok(Some(trace)) = crate::tools::CALL_TRACE.try_with(|trace| *trace) {
        sh.env(crate::protocol::TRACEPARENT_ENV, trace.to_string());
    }
    sh.arg("-c")
        .arg(command)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let before = bounds::count(&ctx.commands.limit_events);
    let mut child = sh
        .spawn()
        .map_err(|e| ToolError::RespondToModel(format!("cannot start sh: {e}")))?;
    let pgid = child.id().map(|id| id as i32).unwrap_or(0);
    ctx.groups.add(pgid);
    let mut guard = GroupGuard::new(pgid);
    let stdout = Capture::start(child.stdout.take());
    let stderr = Capture::start(child.stderr.take());

    let status = tokio::time::timeout(limit, child.wait()).await;
    let timed_out = status.is_err();
    if timed_out {
        kill_group(pgid);
        let _ = child.wait().await;
    }
    guard.disarm();
    let (out, err) = tokio::join!(stdout.finish(), stderr.finish());
    let mut text = String::new();
    let (exit, bound) = match status {
        Ok(Ok(status)) => {
            let after = bounds::count(&ctx.commands.limit_events);
            let cpu = ctx.limits.max_command_cpu;
            let bound = match status.success() {
                true => None,
                false => {
                    let said = format!("{out}\n{err}");
                    bounds::hit(&ctx.commands, cpu, &before, &after, &status, &said)
                }
            };
            (status.code(), bound)
        }
        Ok(Err(e)) => {
            return Err(ToolError::RespondToModel(format!(
                "waiting for the command failed: {e}"
            )));
        }
        Err(_) => (None, None),
    };
    let why = |what: String| match &bound {
        Some(bound) => format!("{what}: {bound}"),
        None => what,
    };
    match exit {
        Some(code) => text.push_str(&format!("exit code: {code}")),
        None if timed_out => text.push_str(&format!("timed out after {} s", limit.as_secs())),
        None => text.push_str("killed by a signal"),
    }
    for (name, body) in [("stdout", out), ("stderr", err)] {
        if !body.is_empty() {
            text.push_str(&format!("\n--- {name} ---\n{body}"));
        }
    }
    Ok(match exit {
        Some(0) => ToolOutput::ok(text),
        Some(code) => ToolOutput::failed(why(format!("the command exited with code {code}")), text),
        None if timed_out => ToolOutput::failed(
            format!(
                "the command timed out after {} s; it and every process it started were killed",
                limit.as_secs()
            ),
            text,
        ),
        None => ToolOutput::failed(why("the command was killed by a signal".to_string()), text),
    })
}

/// One output stream, read in the background into a capped buffer that
/// survives the reader being abandoned.
struct Capture {
    buffer: Arc<Mutex<CaptureBuffer>>,
    reader: Option<tokio::task::JoinHandle<()>>,
}

#[derive(Default)]
struct CaptureBuffer {
    kept: Vec<u8>,
    dropped: usize,
}

impl Capture {
    fn start<R: AsyncRead + Unpin + Send + 'static>(stream: Option<R>) -> Self {
        let buffer = Arc::new(Mutex::new(CaptureBuffer::default()));
        let reader = stream.map(|mut stream| {
            let buffer = Arc::clone(&buffer);
            tokio::spawn(async move {
                let mut chunk = [0u8; 8192];
                while let Ok(n) = stream.read(&mut chunk).await {
                    if n == 0 {
                        break;
                    }
                    if let Ok(mut buffer) = buffer.lock() {
                        let room = CAPTURE_CAP.saturating_sub(buffer.kept.len()).min(n);
                        buffer.kept.extend_from_slice(&chunk[..room]);
                        buffer.dropped += n - room;
                    }
                }
            })
        });
        Capture { buffer, reader }
    }

    /// What was read, after giving the reader a moment to reach the end.
    async fn finish(mut self) -> String {
        if let Some(reader) = self.reader.take() {
            let abort = reader.abort_handle();
            if tokio::time::timeout(DRAIN_GRACE, reader).await.is_err() {
                abort.abort();
            }
        }
        let Ok(buffer) = self.buffer.lock() else {
            return String::new();
        };
        let mut text = String::from_utf8_lossy(&buffer.kept).into_owned();
        if buffer.dropped > 0 {
            text.push_str(&format!("\n[{} more bytes dropped]", buffer.dropped));
        }
        text
    }
}

/// What the model is told of the tool.
const DESCRIPTION: &str = "Run a shell command (sh -c) in the workspace. Returns the exit code, stdout and stderr. stdin is empty; the command is killed with everything it started when its timeout passes.";

/// What the model sends.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct Args {
    /// The command line, run by sh -c
    command: String,
    /// Kill the command after this many seconds (default 120)
    #[serde(default)]
    #[schemars(range(min = 1))]
    timeout_seconds: Option<u64>,
    /// Working directory, relative to the workspace (default .)
    #[serde(default)]
    cwd: Option<String>,
}
