//! The Landlock policy of an agent: what it may write, whether it may use
//! TCP, and (a second layer, Landlock ABI 6) that it may neither signal a
//! process outside it nor reach an abstract Unix socket outside it.
//!
//! Landlock is best-effort by design: an older kernel enforces part of the
//! policy or none of it, and the report says which.

use std::path::PathBuf;

use crate::protocol::{SandboxLevel, SandboxReport};
use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, LandlockStatus, RestrictionStatus, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetError, RulesetStatus, Scope, path_beneath_rules,
};

/// The newest Landlock ABI whose rights the policy uses: V5 for the file
/// system (refer, truncate, device ioctls), V4 and later for TCP.
const TARGET_ABI: ABI = ABI::V5;

/// Every right on the paths an agent may write, but making devices: a
/// device node in the workspace would be a door to the disk behind it.
fn write_rights() -> BitFlags<AccessFs> {
    AccessFs::from_all(TARGET_ABI) & !(AccessFs::MakeChar | AccessFs::MakeBlock)
}

/// Restricts the calling thread, and every thread and process it starts
/// afterwards: read only `readable` (everywhere when `None`), write only
/// `writable`, and no TCP when `deny_network`. Paths that do not exist are
/// left out: nothing there to grant.
pub fn restrict(
    readable: Option<&[PathBuf]>,
    writable: &[PathBuf],
    deny_network: bool,
) -> Result<RestrictionStatus, RulesetError> {
    let mut ruleset = Ruleset::default().handle_access(AccessFs::from_all(TARGET_ABI))?;
    if deny_network {
        ruleset = ruleset.handle_access(AccessNet::from_all(TARGET_ABI))?;
    }
    let everything = [PathBuf::from("/")];
    let existing = |paths: &[PathBuf]| -> Vec<PathBuf> {
        paths.iter().filter(|p| p.exists()).cloned().collect()
    };
    ruleset
        .create()?
        .add_rules(path_beneath_rules(
            existing(readable.unwrap_or(&everything)),
            AccessFs::from_read(TARGET_ABI),
        ))?
        .add_rules(path_beneath_rules(existing(writable), write_rights()))?
        .restrict_self()
}

/// Keeps the calling thread, and all it starts afterwards, from signalling
/// processes and reaching abstract Unix sockets outside its Landlock
/// domain. Whether the kernel has scopes (ABI 6).
pub fn scope() -> Result<bool, RulesetError> {
    let status = Ruleset::default()
        .scope(Scope::from_all(ABI::V6))?
        .create()?
        .restrict_self()?;
    Ok(status.ruleset == RulesetStatus::FullyEnforced)
}

/// What the kernel enforced, in the report's terms.
pub fn report(status: &RestrictionStatus, deny_network: bool) -> SandboxReport {
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
        network_denied,
        note,
        ..SandboxReport::new(level, abi)
    }
}
