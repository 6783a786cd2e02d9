//! The system calls an agent and its commands may not make, as codex's
//! Linux sandbox and container runtimes filter them: what namespaces and
//! Landlock do not cover.
//!
//! - **Refused (EPERM)**: a new user namespace (`unshare` or `clone` with
//!   `CLONE_NEWUSER`, which would give a command every capability in it),
//!   joining a namespace (`setns`), reading or steering another process
//!   (`ptrace`, `process_vm_readv`/`writev`), the kernel keyring
//!   (`keyctl`, `add_key`, `request_key`), `bpf`, `perf_event_open`,
//!   `userfaultfd`, and loading kernels or modules.
//! - **Absent (ENOSYS)**: `clone3`, whose flags a filter cannot read (the C
//!   library falls back to `clone`), and `io_uring`, whose operations a
//!   filter never sees.
//! - **Where there is no network namespace to deny the network**: every
//!   socket but a Unix one (EAFNOSUPPORT), so UDP, MPTCP, raw and netlink
//!   sockets cannot reach past Landlock's TCP rule.

use super::SetupError;
use std::collections::BTreeMap;

use nix::libc;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Installs the filters on the calling thread, inherited by everything it
/// starts; `no_new_privs` must be set. `sockets` adds the socket filter.
pub fn install(sockets: bool) -> Result<(), SetupError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("no seccomp filter for this architecture: {e}"))?;
    let mut filters = vec![
        filter(refused()?, libc::EPERM, arch)?,
        filter(absent(), libc::ENOSYS, arch)?,
    ];
    if sockets {
        filters.push(filter(non_unix_sockets()?, libc::EAFNOSUPPORT, arch)?);
    }
    for program in &filters {
        seccompiler::apply_filter(program)
            .map_err(|e| format!("cannot install the seccomp filter: {e}"))?;
    }
    Ok(())
}

fn filter(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    errno: i32,
    arch: TargetArch,
) -> Result<BpfProgram, SetupError> {
    let errno = u32::try_from(errno).unwrap_or(1);
    SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno),
        arch,
    )
    .and_then(BpfProgram::try_from)
    .map_err(|e| SetupError::Refused(format!("cannot build the seccomp filter: {e}")))
}

/// Matches a call whose first argument has `CLONE_NEWUSER` set.
fn new_user_namespace() -> Result<Vec<SeccompRule>, SetupError> {
    let flag = libc::CLONE_NEWUSER as u64;
    let condition = SeccompCondition::new(
        0,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(flag),
        flag,
    )
    .map_err(|e| e.to_string())?;
    Ok(vec![
        SeccompRule::new(vec![condition]).map_err(|e| e.to_string())?,
    ])
}

fn refused() -> Result<BTreeMap<i64, Vec<SeccompRule>>, SetupError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = [
        libc::SYS_setns,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
    ]
    .into_iter()
    .map(|call| (call, Vec::new()))
    .collect();
    rules.insert(libc::SYS_unshare, new_user_namespace()?);
    rules.insert(libc::SYS_clone, new_user_namespace()?);
    Ok(rules)
}

fn absent() -> BTreeMap<i64, Vec<SeccompRule>> {
    [
        libc::SYS_clone3,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ]
    .into_iter()
    .map(|call| (call, Vec::new()))
    .collect()
}

fn non_unix_sockets() -> Result<BTreeMap<i64, Vec<SeccompRule>>, SetupError> {
    let unix = u64::try_from(libc::AF_UNIX).unwrap_or(1);
    let condition = SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, unix)
        .map_err(|e| e.to_string())?;
    let rule = SeccompRule::new(vec![condition]).map_err(|e| e.to_string())?;
    Ok([(libc::SYS_socket, vec![rule])].into_iter().collect())
}
