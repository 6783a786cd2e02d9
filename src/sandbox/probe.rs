//! `troupe-agent --probe-sandbox`: a scratch worker confined as an agent
//! is, which prints what held.

use super::{DEFAULT_MAX_MEMORY, DEFAULT_MAX_PROCESSES, SandboxError, enter};
use crate::protocol::{AgentRole, SandboxSettings, TaskFile};

/// What this kernel can enforce: the whole policy applied, with the
/// default limits, to a worker in a scratch directory, which prints its
/// report (for `troupe-agent --probe-sandbox`). The worker is a child of
/// the calling process, which removes the scratch directory after it.
pub fn probe() -> Result<(), SandboxError> {
    let setup = |e: std::io::Error| SandboxError::Setup(format!("cannot probe: {e}"));
    let scratch = tempfile::Builder::new()
        .prefix("troupe-probe-")
        .tempdir()
        .map_err(setup)?;
    let base = scratch.path().canonicalize().map_err(setup)?;
    let workspace = base.join("ws");
    let agent_dir = workspace.join(crate::protocol::RESULTS_DIR).join("probe");
    let task = TaskFile::new(
        crate::protocol::AgentId::new("probe"),
        AgentRole::Worker,
        "probe".to_string(),
        "probe the sandbox".to_string(),
        workspace,
        agent_dir,
    );
    std::fs::create_dir_all(task.subagent_dir()).map_err(setup)?;
    // SAFETY: the caller has one thread, as `enter` needs.
    match unsafe { nix::unistd::fork() }.map_err(|e| setup(e.into()))? {
        nix::unistd::ForkResult::Parent { child } => {
            let status = nix::sys::wait::waitpid(child, None);
            drop(scratch);
            match status {
                Ok(nix::sys::wait::WaitStatus::Exited(_, 0)) => Ok(()),
                other => Err(SandboxError::Setup(format!("the probe ended {other:?}"))),
            }
        }
        nix::unistd::ForkResult::Child => {
            let settings = SandboxSettings {
                max_memory: Some(DEFAULT_MAX_MEMORY),
                max_processes: Some(DEFAULT_MAX_PROCESSES),
                ..SandboxSettings::default()
            };
            let code = match enter(&task, &settings) {
                Ok(confined) => {
                    crate::say!(
                        "{}",
                        serde_json::to_string(&confined.report).unwrap_or_default()
                    );
                    0
                }
                Err(e) => {
                    crate::tell!("troupe-agent: {e}");
                    1
                }
            };
            std::process::exit(code)
        }
    }
}
