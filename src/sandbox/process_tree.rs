//! The three processes of an agent in a PID namespace of its own.
//!
//! A new PID namespace takes in only the processes forked after it is
//! made, so the process troupe started (the stand-in) forks the
//! namespace's init, and the init forks the agent. The init does nothing
//! but reap: every process the agent's commands leave behind (a `setsid`
//! daemon, a double fork) becomes its child, and when the agent exits the
//! init exits with the agent's status, upon which the kernel kills every
//! process left in the namespace. The stand-in waits for the init and
//! exits as it did. Both pass on the signals troupe (or a launcher) sends
//! the stand-in: SIGTERM, SIGINT and SIGHUP reach the agent, which cancels
//! and seals its transcript; SIGKILL to the stand-in's process group
//! reaches all three.
//!
//! An init ignores signals from inside its namespace that it has no
//! handler for, and SIGKILL from inside always: a command cannot kill it.

use super::SetupError;
use std::sync::atomic::{AtomicI32, Ordering};

use nix::errno::Errno;
use nix::libc;
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork};

/// The process the signals are passed on to.
static FORWARD_TO: AtomicI32 = AtomicI32::new(0);

const PASSED_ON: [Signal; 3] = [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP];

/// Forks the init and the agent. Returns in the agent with what
/// `in_init` said (the init runs it before it forks the agent, as the
/// namespace's first process) and the `Settling` of what the init does
/// once the agent exists (`settle`: moving it into its control group,
/// which takes a kernel's grace period and so runs beside the agent's own
/// start, not before it); returns `Err` in the process that must report
/// the failure and exit (the init, when `in_init` failed). The stand-in
/// runs `when_done` once the init is gone; the stand-in and the init never
/// return.
pub fn fork_init_and_agent(
    in_init: impl FnOnce() -> Result<Vec<String>, SetupError>,
    settle: impl FnOnce(Pid) -> Result<(), SetupError>,
    when_done: impl FnOnce(),
) -> Result<(Vec<String>, Settling), SetupError> {
    // SAFETY: the process has one thread (no runtime yet), so the child
    // may do anything the parent could.
    match unsafe { fork() }.map_err(|e| format!("cannot fork the agent's init: {e}"))? {
        ForkResult::Parent { child } => stand_in(child, when_done),
        ForkResult::Child => {}
    }
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    let notes = in_init()?;
    let (settled_r, settled_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| format!("cannot make a pipe: {e}"))?;
    // SAFETY: as above; the init is single-threaded too.
    match unsafe { fork() }.map_err(|e| format!("cannot fork the agent: {e}"))? {
        ForkResult::Parent { child } => {
            drop(settled_r);
            let said = match settle(child) {
                Ok(()) => Vec::new(),
                Err(why) => why.to_string().into_bytes(),
            };
            let _ = nix::unistd::write(&settled_w, if said.is_empty() { b"y" } else { &said });
            drop(settled_w);
            init(child)
        }
        ForkResult::Child => {
            drop(settled_w);
            Ok((notes, Settling(Some(settled_r))))
        }
    }
}

/// What the init does for the agent once it exists, which the agent waits
/// for before it starts any process of its own.
#[derive(Debug)]
pub struct Settling(Option<std::os::fd::OwnedFd>);

impl Settling {
    /// Waits for the init; `Err` says what it could not do.
    pub fn wait(mut self) -> Result<(), SetupError> {
        let Some(fd) = self.0.take() else {
            return Ok(());
        };
        let mut said = Vec::new();
        let mut file = std::fs::File::from(fd);
        let _ = std::io::Read::read_to_end(&mut file, &mut said);
        match said.as_slice() {
            b"y" => Ok(()),
            [] => Err(SetupError::Refused(
                "the agent's init ended before it said".to_string(),
            )),
            why => Err(SetupError::Refused(
                String::from_utf8_lossy(why).into_owned(),
            )),
        }
    }
}

/// The stand-in's life: wait for the init, exit as it did.
fn stand_in(init: Pid, when_done: impl FnOnce()) -> ! {
    pass_signals_to(init);
    let status = loop {
        match waitpid(init, None) {
            Ok(WaitStatus::Exited(_, code)) => break Ok(code),
            Ok(WaitStatus::Signaled(_, signal, _)) => break Err(signal as i32),
            Ok(_) | Err(Errno::EINTR) => continue,
            Err(_) => break Ok(1),
        }
    };
    when_done();
    match status {
        Ok(code) => exit_as(code),
        Err(signal) => die_of(signal),
    }
}

/// The init's life: reap every child, and exit as the agent did when the
/// agent is one of them. A signal's death becomes exit code 128 + the
/// signal, which the stand-in turns back into the death.
fn init(agent: Pid) -> ! {
    pass_signals_to(agent);
    loop {
        match waitpid(None, None) {
            Ok(WaitStatus::Exited(pid, code)) if pid == agent => std::process::exit(code),
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == agent => {
                std::process::exit(128 + signal as i32)
            }
            Ok(_) | Err(Errno::EINTR) => continue,
            Err(_) => std::process::exit(1),
        }
    }
}

fn exit_as(code: i32) -> ! {
    match Signal::try_from(code - 128) {
        Ok(_) if code > 128 => die_of(code - 128),
        _ => std::process::exit(code),
    }
}

/// Dies of `signal`, as the agent did.
fn die_of(signal: i32) -> ! {
    // SAFETY: resetting a disposition and raising a signal touch no
    // memory; the process has one thread.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
    std::process::exit(128 + signal)
}

extern "C" fn pass_on(signal: libc::c_int) {
    let pid = FORWARD_TO.load(Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

fn pass_signals_to(pid: Pid) {
    FORWARD_TO.store(pid.as_raw(), Ordering::Relaxed);
    let action = SigAction::new(
        SigHandler::Handler(pass_on),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in PASSED_ON {
        // SAFETY: the handler only reads an atomic and calls kill.
        let _ = unsafe { sigaction(signal, &action) };
    }
}
