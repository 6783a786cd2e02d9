//! `troupe-agent --probe-sandbox`: scratch workers confined as agents
//! are, which say what held. The first is an ordinary worker; the second
//! works in a copy-on-write checkout, as an isolated attempt does, and
//! tells whether overlays can be made here (`overlay` in the report, and
//! why not in its note). troupe runs the probe once before an isolated run
//! to choose its kind of checkout.

use super::SetupError;
use std::path::{Path, PathBuf};

use super::{DEFAULT_MAX_MEMORY, DEFAULT_MAX_PROCESSES, SandboxError, enter};
use crate::protocol::{
    AgentRole, OverlayLayers, SandboxReport, SandboxSettings, TaskFile, UpperLayer,
};

/// The file each probing worker writes its report to, in its workspace.
const REPORT: &str = "probe-report.json";
/// A file of the overlay's lower layer, which its worker must read.
const BELOW: &str = "below.txt";

/// What this kernel can enforce: the whole policy applied, with the
/// default limits, to workers in a scratch directory; prints the report.
/// The workers are children of the calling process, which removes the
/// scratch directory after them.
pub fn probe() -> Result<(), SandboxError> {
    let setup = |e: std::io::Error| SandboxError::Setup(SetupError::io("cannot probe")(e));
    let scratch = tempfile::Builder::new()
        .prefix("troupe-probe-")
        .tempdir()
        .map_err(setup)?;
    let base = scratch.path().canonicalize().map_err(setup)?;
    let workspace = base.join("ws");
    let agent_dir = workspace.join(crate::protocol::RESULTS_DIR).join("probe");
    let task = worker(workspace.clone(), agent_dir);
    std::fs::create_dir_all(task.subagent_dir()).map_err(setup)?;
    // The two workers at once: neither needs the other, and the probe
    // stands before every isolated run's first step.
    let plain = start(&task, None)?;
    let trial = overlay_trial(&base);
    let plain = finish(plain);
    let overlay = trial.and_then(Trial::verdict);
    plain?;
    let mut report: SandboxReport = read_report(&workspace.join(REPORT))?;
    match overlay {
        Ok(()) => report.overlay = true,
        Err(why) => {
            report.overlay = false;
            let note =
                format!("no copy-on-write checkouts (isolated attempts get full ones): {why}");
            report.note = match report.note.is_empty() {
                true => note,
                false => format!("{}; {note}", report.note),
            };
        }
    }
    crate::say!("{}", serde_json::to_string(&report).unwrap_or_default());
    // The overlay's work directory, mode 0: an ordinary user's probe
    // could not remove it, and left its scratch directory behind.
    crate::fsutil::open_up_dirs(&base);
    drop(scratch);
    Ok(())
}

/// A worker of the probe in `workspace`.
fn worker(workspace: PathBuf, agent_dir: PathBuf) -> TaskFile {
    TaskFile::new(
        crate::protocol::AgentId::new("probe"),
        AgentRole::Worker,
        "probe".to_string(),
        "probe the sandbox".to_string(),
        workspace,
        agent_dir,
    )
}

/// The overlay's worker, started: what it must have done is checked by
/// `verdict`.
struct Trial {
    worker: nix::unistd::Pid,
    results: PathBuf,
    workspace: PathBuf,
}

impl Trial {
    /// Whether the worker read the lower layer and its report landed in
    /// the upper one, not in the directory it was mounted on.
    fn verdict(self) -> Result<(), SetupError> {
        finish(self.worker).map_err(|e| e.to_string())?;
        let written = self.results.join("upper").join(REPORT);
        let report: SandboxReport = read_report(&written).map_err(|e| e.to_string())?;
        match report.overlay && !self.workspace.join(REPORT).exists() {
            true => Ok(()),
            false => Err(SetupError::Refused(
                "the worker's writes did not land in its own layer".to_string(),
            )),
        }
    }
}

/// Starts a worker in a checkout laid out as an isolated attempt's is
/// (inside the results directory, its layers beside it) that must read
/// the lower layer and whose report must land in the upper one.
fn overlay_trial(base: &Path) -> Result<Trial, SetupError> {
    let results = base.join("isolated").join(crate::protocol::RESULTS_DIR);
    let layers = OverlayLayers {
        lower: vec![results.join("lower")],
        upper: Some(UpperLayer {
            dir: results.join("upper"),
            work: results.join("work"),
        }),
        read_only: false,
    };
    let mut task = worker(results.join("checkout"), results.join("probe"));
    task.results = Some(results.clone());
    let made = [
        task.subagent_dir(),
        task.workspace.clone(),
        results.join("lower"),
        results.join("upper"),
        results.join("work"),
    ];
    for dir in &made {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    }
    std::fs::write(results.join("lower").join(BELOW), "below")
        .map_err(|e| format!("cannot write the probe's lower layer: {e}"))?;
    // As troupe gives it to root's agents (`agent_owner`).
    if let Some(owner) = super::agent_owner() {
        let upper = results.join("upper");
        std::os::unix::fs::lchown(&upper, Some(owner), Some(owner))
            .map_err(|e| format!("cannot hand {} to the agent: {e}", upper.display()))?;
    }
    let worker = start(&task, Some(layers)).map_err(|e| e.to_string())?;
    Ok(Trial {
        worker,
        results,
        workspace: task.workspace,
    })
}

/// Waits for a worker `start` started: whether it wrote its report.
fn finish(worker: nix::unistd::Pid) -> Result<(), SandboxError> {
    match nix::sys::wait::waitpid(worker, None) {
        Ok(nix::sys::wait::WaitStatus::Exited(_, 0)) => Ok(()),
        other => Err(SandboxError::Setup(SetupError::Refused(format!(
            "the probe ended {other:?}"
        )))),
    }
}

/// Confines `task` in a child, which writes its report into its
/// workspace once it has read the overlay's lower layer (when it has
/// one); the child, to `finish`.
fn start(
    task: &TaskFile,
    overlay: Option<OverlayLayers>,
) -> Result<nix::unistd::Pid, SandboxError> {
    let setup = |e: std::io::Error| SandboxError::Setup(SetupError::io("cannot probe")(e));
    // SAFETY: the caller has one thread, as `enter` needs.
    match unsafe { nix::unistd::fork() }.map_err(|e| setup(e.into()))? {
        nix::unistd::ForkResult::Parent { child } => Ok(child),
        nix::unistd::ForkResult::Child => {
            let layered = overlay.is_some();
            let settings = SandboxSettings {
                max_memory: Some(DEFAULT_MAX_MEMORY),
                max_processes: Some(DEFAULT_MAX_PROCESSES),
                overlay,
                ..SandboxSettings::default()
            };
            let code = match enter(task, &settings)
                .map_err(|e| e.to_string())
                .and_then(|c| {
                    if layered {
                        std::fs::read(BELOW)
                            .map_err(|e| format!("cannot read the checkout's lower layer: {e}"))?;
                    }
                    let report = serde_json::to_vec(&c.report).unwrap_or_default();
                    std::fs::write(REPORT, report).map_err(|e| format!("cannot write: {e}"))
                }) {
                Ok(()) => 0,
                Err(e) => {
                    crate::tell!("troupe-agent: {e}");
                    1
                }
            };
            std::process::exit(code)
        }
    }
}

fn read_report(path: &Path) -> Result<SandboxReport, SandboxError> {
    crate::fsutil::read_json(path, "the probe's report")
        .map_err(|e| SandboxError::Setup(SetupError::Refused(format!("cannot probe: {e}"))))
}
