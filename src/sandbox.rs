//! What a child does to itself at start: a Landlock policy for its role.
//!
//! `troupe-agent` applies it before its runtime starts any thread, so every
//! thread and every command it runs inherits it:
//!
//! - Worker: read everywhere; write only the workspace, its own directory,
//!   its private TMPDIR and `/dev/null`.
//! - Reviewer: read everywhere; write only its own `.subagent/` (where its
//!   TMPDIR is) and `/dev/null`: it can run checks, not change the
//!   workspace.
//! - Both: no TCP bind or connect (Landlock ABI 4 and later), unless the
//!   network is allowed. The parent answers their model requests, so they
//!   need none.
//!
//! Landlock is best-effort by design: an older kernel enforces part of the
//! policy or none of it. The report says which, `required` refuses to run
//! on less than all of it, and `auto` says what is missing and goes on.

use std::path::{Path, PathBuf};

use crate::protocol::{
    AgentRole, SandboxLevel, SandboxMode, SandboxReport, SandboxSettings, TaskFile,
};
use landlock::{
    ABI, Access, AccessFs, AccessNet, LandlockStatus, RestrictionStatus, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetError, RulesetStatus, path_beneath_rules,
};

/// The newest Landlock ABI whose rights the policy uses: V5 for the file
/// system (refer, truncate, device ioctls), V4 and later for TCP.
const TARGET_ABI: ABI = ABI::V5;

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot set up the sandbox: {0}")]
    Landlock(#[from] RulesetError),
    #[error("--sandbox required, but this kernel cannot enforce the whole policy: {0}")]
    NotEnforceable(String),
}

/// The paths a role may write.
pub fn writable_paths(task: &TaskFile) -> Vec<PathBuf> {
    let mut paths = match task.role {
        AgentRole::Reviewer => vec![task.subagent_dir()],
        AgentRole::Worker | AgentRole::Planner => {
            vec![task.workspace.clone(), task.agent_dir.clone()]
        }
    };
    paths.push(task.tmp_dir());
    paths.push(PathBuf::from("/dev/null"));
    paths
}

/// Restricts the calling thread, and every thread and process it starts
/// afterwards, to the task's policy.
pub fn apply(task: &TaskFile, settings: SandboxSettings) -> Result<SandboxReport, SandboxError> {
    if settings.mode == SandboxMode::Off {
        return Ok(SandboxReport {
            status: SandboxLevel::Off,
            abi: None,
            network_denied: false,
            note: "the sandbox is off (--sandbox off)".to_string(),
        });
    }
    let status = restrict(&writable_paths(task), !settings.allow_network)?;
    let report = report(&status, !settings.allow_network);
    if settings.mode == SandboxMode::Required && !report.fully_enforced() {
        return Err(SandboxError::NotEnforceable(report.note));
    }
    Ok(report)
}

/// What this kernel can enforce: the whole policy applied to the calling
/// process with nothing writable. For `troupe-agent --probe-sandbox`, which
/// exits right after.
pub fn probe() -> Result<SandboxReport, SandboxError> {
    let status = restrict(&[], true)?;
    Ok(report(&status, true))
}

fn restrict(writable: &[PathBuf], deny_network: bool) -> Result<RestrictionStatus, RulesetError> {
    let mut ruleset = Ruleset::default().handle_access(AccessFs::from_all(TARGET_ABI))?;
    if deny_network {
        ruleset = ruleset.handle_access(AccessNet::from_all(TARGET_ABI))?;
    }
    ruleset
        .create()?
        .add_rules(path_beneath_rules(
            [Path::new("/")],
            AccessFs::from_read(TARGET_ABI),
        ))?
        .add_rules(path_beneath_rules(writable, AccessFs::from_all(TARGET_ABI)))?
        .restrict_self()
}

fn report(status: &RestrictionStatus, deny_network: bool) -> SandboxReport {
    let abi = match status.landlock {
        LandlockStatus::Available { effective_abi, .. } => Some(effective_abi as u32),
        LandlockStatus::NotEnabled | LandlockStatus::NotImplemented => None,
    };
    let level = match status.ruleset {
        RulesetStatus::FullyEnforced => SandboxLevel::FullyEnforced,
        RulesetStatus::PartiallyEnforced => SandboxLevel::PartiallyEnforced,
        RulesetStatus::NotEnforced => SandboxLevel::NotEnforced,
    };
    let network_denied = deny_network && abi.is_some_and(|abi| abi >= 4);
    let note = match (level, abi) {
        (SandboxLevel::FullyEnforced, _) => String::new(),
        (_, None) => {
            "Landlock is not available on this kernel: file writes and the network are not confined"
                .to_string()
        }
        (_, Some(abi)) => {
            let mut missing = Vec::new();
            if abi < 3 {
                missing.push("truncating files (ABI 3)");
            }
            if deny_network && abi < 4 {
                missing.push("denying the network (ABI 4)");
            }
            if abi < 5 {
                missing.push("device ioctls (ABI 5)");
            }
            format!("Landlock ABI {abi} cannot confine: {}", missing.join(", "))
        }
    };
    SandboxReport {
        status: level,
        abi,
        network_denied,
        note,
    }
}
