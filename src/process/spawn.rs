//! How every process troupe starts is started: which of troupe's
//! environment it keeps, whose process group or session it is in, what it
//! gets when its parent dies, and its resource limits. One `Spawn` per kind
//! of process, so the rules of each sit side by side and are told apart by
//! name, not by reading six call sites.

use nix::sys::resource::{Resource, setrlimit};
use nix::sys::signal::Signal;
use tokio::process::Command;

/// The variables a process keeps of troupe's environment when it keeps
/// any; everything else, API keys first, is scrubbed.
pub const KEPT_ENV: &[&str] = &["PATH", "HOME", "LANG", "TERM", "TZ"];

/// What git keeps: no `HOME` or locale, so no file of the user's and no
/// translation shapes what troupe parses.
pub const GIT_ENV: &[&str] = &["PATH", "TZ"];

/// Which of troupe's environment a process sees.
#[derive(Debug, Clone)]
pub enum Env {
    /// All of it: the process is the user's own (`--on-finish`), or the
    /// environment is already an agent's scrubbed one.
    Inherit,
    /// Only these names (and what the caller sets itself).
    Only(Vec<String>),
}

impl Env {
    /// `KEPT_ENV` and `extra`.
    pub fn kept(extra: impl IntoIterator<Item = impl Into<String>>) -> Env {
        let names = KEPT_ENV.iter().map(|name| name.to_string());
        Env::Only(names.chain(extra.into_iter().map(Into::into)).collect())
    }
}

/// Where a process stands among the processes of its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// Its parent's group: a terminal's Ctrl-C reaches it too.
    Inherit,
    /// A group of its own, so a kill of the group takes whatever it
    /// started with it.
    Own,
    /// A session of its own: every process it starts, in whatever group,
    /// can be found by the session id, and it has no controlling terminal.
    Session,
}

/// The rules for one kind of process.
#[derive(Debug, Clone)]
pub struct Spawn {
    pub env: Env,
    pub group: Group,
    /// Sent when troupe (the thread that forked it) dies. Checked against
    /// `getppid` right after the request, since troupe may already be gone.
    pub parent_death: Option<Signal>,
    /// `(resource, soft, hard)` set before exec.
    pub limits: Vec<(Resource, u64, u64)>,
    /// Killed when its `Child` is dropped, so an abandoned call takes its
    /// process with it (for the processes started on troupe's runtime).
    pub kill_on_drop: bool,
}

impl Spawn {
    /// A child that is not troupe's own agent (a stand-in, or a launcher
    /// such as `srun` that places one): `KEPT_ENV` and `pass_env`, a
    /// session of its own, SIGTERM when troupe dies, no core dumps (a core
    /// would hold the parent's answers). troupe-agent takes the same
    /// itself first thing (`agent::birth`, with `take_over`), so that it
    /// can be started without anything between fork and exec.
    pub fn child(pass_env: &[String]) -> Spawn {
        Spawn {
            env: Env::kept(pass_env.iter().cloned()),
            group: Group::Session,
            parent_death: Some(Signal::SIGTERM),
            limits: vec![(Resource::RLIMIT_CORE, 0, 0)],
            kill_on_drop: true,
        }
    }

    /// troupe-agent itself: only the environment here; the rest of
    /// `child` it does at birth.
    pub fn agent(pass_env: &[String]) -> Spawn {
        Spawn {
            group: Group::Inherit,
            parent_death: None,
            limits: Vec::new(),
            ..Spawn::child(pass_env)
        }
    }

    /// One command of an agent: the agent's (already scrubbed)
    /// environment, a group of its own that its timeout kills, SIGKILL
    /// when the agent dies first.
    pub fn command(limits: Vec<(Resource, u64, u64)>) -> Spawn {
        Spawn {
            env: Env::Inherit,
            group: Group::Own,
            parent_death: Some(Signal::SIGKILL),
            limits,
            kill_on_drop: true,
        }
    }

    /// An MCP server, the agent's or troupe's: `KEPT_ENV`, `TMPDIR` (the
    /// agent's private one, in an agent) and the variables its
    /// configuration names; a group of its own; SIGKILL when the process
    /// that started it dies, so no server outlives a `kill -9`.
    pub fn server(env: &[String]) -> Spawn {
        Spawn {
            env: Env::kept(std::iter::once("TMPDIR".to_string()).chain(env.iter().cloned())),
            group: Group::Own,
            parent_death: Some(Signal::SIGKILL),
            limits: vec![(Resource::RLIMIT_CORE, 0, 0)],
            kill_on_drop: true,
        }
    }

    /// One git call of troupe's: `GIT_ENV`, a group of its own, SIGKILL
    /// when troupe dies, so no checkout goes on writing after it.
    pub fn git() -> Spawn {
        Spawn {
            env: Env::Only(GIT_ENV.iter().map(|name| name.to_string()).collect()),
            group: Group::Own,
            parent_death: Some(Signal::SIGKILL),
            limits: vec![(Resource::RLIMIT_CORE, 0, 0)],
            kill_on_drop: true,
        }
    }

    /// The user's `--on-finish` hook: the user's environment and terminal;
    /// troupe waits for it and does not kill it.
    pub fn hook() -> Spawn {
        Spawn {
            env: Env::Inherit,
            group: Group::Inherit,
            parent_death: None,
            limits: Vec::new(),
            kill_on_drop: false,
        }
    }

    /// The supervisor of a background agent, which must outlive the shell
    /// that started it: a session of its own, nothing tied to troupe.
    pub fn detached() -> Spawn {
        Spawn {
            env: Env::Inherit,
            group: Group::Session,
            parent_death: None,
            limits: Vec::new(),
            kill_on_drop: false,
        }
    }

    /// `program` with these rules applied.
    pub fn command_for(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new(program);
        self.apply_std(command.as_std_mut());
        command.kill_on_drop(self.kill_on_drop);
        command
    }

    /// The same for a process troupe starts without its runtime.
    pub fn std_command_for(&self, program: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
        let mut command = std::process::Command::new(program);
        self.apply_std(&mut command);
        command
    }

    /// Applies the rules to `command`: its environment now, the rest
    /// between fork and exec.
    fn apply_std(&self, command: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        if let Env::Only(names) = &self.env {
            command.env_clear();
            for name in names {
                if let Some(value) = std::env::var_os(name) {
                    command.env(name, value);
                }
            }
        }
        if self.group == Group::Own {
            command.process_group(0);
        }
        if self.group != Group::Session && self.parent_death.is_none() && self.limits.is_empty() {
            // Nothing between fork and exec: the standard library may use
            // posix_spawn (vfork) instead of copying troupe.
            return;
        }
        let session = self.group == Group::Session;
        let parent_death = self.parent_death;
        let parent = nix::unistd::getpid();
        let limits = self.limits.clone();
        // SAFETY: between fork and exec the closure calls only setsid,
        // prctl, getppid and setrlimit, which are async-signal-safe, and
        // reads values it owns. troupe forks from its one runtime thread,
        // which lives as long as troupe, so the parent-death signal fires
        // exactly when troupe is gone.
        unsafe {
            command.pre_exec(move || {
                if session {
                    nix::unistd::setsid()?;
                }
                if let Some(signal) = parent_death {
                    die_with_parent(signal, parent.as_raw())?;
                }
                for &(resource, soft, hard) in &limits {
                    setrlimit(resource, soft, hard)?;
                }
                Ok(())
            });
        }
    }
}

/// Asks for `signal` when the parent dies, then checks that the parent is
/// still `parent`: if it died before the request, no signal will come, and
/// the process must not go on (`ESRCH`). Async-signal-safe: it allocates
/// nothing, not even for its error.
pub fn die_with_parent(signal: Signal, parent: i32) -> std::io::Result<()> {
    nix::sys::prctl::set_pdeathsig(signal)?;
    if nix::unistd::getppid().as_raw() != parent {
        return Err(std::io::Error::from(nix::errno::Errno::ESRCH));
    }
    Ok(())
}
