//! Whether a command hit one of its agent's bounds, so that the model is
//! told which one (and the flag that sets it) instead of a bare "killed by
//! a signal" or "Resource temporarily unavailable".
//!
//! Where the agent has a control group, its event counters say it: an OOM
//! kill in `memory.events` (`memory.oom_control` in cgroup v1), a refused
//! fork in `pids.events`. Where resource limits stand in for it, the
//! command's own words are the only sign, so the note says "probably".

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;

use super::CommandSetting;

/// The counters, read before and after a command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    oom_kills: u64,
    refused_forks: u64,
}

/// The counters in `files` now.
pub fn count(files: &[PathBuf]) -> Counts {
    let mut counts = Counts::default();
    for file in files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        let key = match name.starts_with("pids") {
            true => "max",
            false => "oom_kill",
        };
        let value = text
            .lines()
            .find_map(|line| line.strip_prefix(key)?.trim().parse::<u64>().ok())
            .unwrap_or(0);
        match name.starts_with("pids") {
            true => counts.refused_forks += value,
            false => counts.oom_kills += value,
        }
    }
    counts
}

const SIGXCPU: i32 = 24;

/// What to tell the model of the bound the command hit, if it hit one;
/// `output` is what it printed.
pub fn hit(
    setting: &CommandSetting,
    cpu: Option<u64>,
    before: &Counts,
    after: &Counts,
    status: &ExitStatus,
    output: &str,
) -> Option<String> {
    let by_group = !setting.limit_events.is_empty();
    let said = |words: &[&str]| words.iter().any(|w| output.contains(w));
    let memory = match by_group {
        true => after.oom_kills > before.oom_kills,
        false => said(&[
            "Cannot allocate memory",
            "Out of memory",
            "MemoryError",
            "memory allocation of",
            "std::bad_alloc",
        ]),
    };
    let processes = match by_group {
        true => after.refused_forks > before.refused_forks,
        false => {
            said(&["Cannot fork"])
                || (said(&["Resource temporarily unavailable"])
                    && said(&["fork", "spawn", "thread"]))
        }
    };
    let hedge = if by_group { "" } else { "probably " };
    let xcpu = status.signal() == Some(SIGXCPU) || status.code() == Some(128 + SIGXCPU);
    if let (Some(bytes), true) = (setting.memory, memory) {
        return Some(format!(
            "it {hedge}reached the agent's memory limit of {} (--max-memory)",
            size(bytes)
        ));
    }
    if let (Some(count), true) = (setting.processes, processes) {
        return Some(format!(
            "it {hedge}reached the agent's limit of {count} processes at once (--max-processes)"
        ));
    }
    if let (Some(secs), true) = (cpu, xcpu) {
        return Some(format!(
            "it used up its {secs} s of CPU time (--max-command-cpu)"
        ));
    }
    None
}

/// A size as a person reads it: `4 GiB`, `512 MiB`, `1000 bytes`.
fn size(bytes: u64) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    format!("{bytes} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_read_from_both_cgroup_versions() {
        let dir = tempfile::tempdir().unwrap();
        let v2 = dir.path().join("memory.events");
        let v1 = dir.path().join("memory.oom_control");
        let pids = dir.path().join("pids.events");
        std::fs::write(&v2, "low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\n").unwrap();
        std::fs::write(&v1, "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n").unwrap();
        std::fs::write(&pids, "max 3\n").unwrap();
        let counts = count(&[v2, v1, pids]);
        assert_eq!(
            counts,
            Counts {
                oom_kills: 3,
                refused_forks: 3
            }
        );
        assert_eq!(size(4 << 30), "4 GiB");
        assert_eq!(size(1000), "1000 bytes");
    }
}
