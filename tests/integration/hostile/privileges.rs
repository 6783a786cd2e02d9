//! Attack 4, root's powers in tool commands: devices, ownership, modes,
//! timestamps and extended attributes of files outside the workspace.

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use serde_json::json;

use super::{is_root, outputs, running};
use crate::common::{Sandbox, spawn};

fn xattrs(path: &std::path::Path) -> String {
    let out = std::process::Command::new("getfattr")
        .args(["-d", "-m", "-"])
        .arg(path)
        .output()
        .expect("getfattr (Debian's attr package; .ci/run installs it)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

// Regression: as root, a command made a block device in the workspace and
// wrote through it, and changed owners, modes, times and xattrs of files
// outside the workspace.
#[test]
fn commands_run_without_capabilities_even_as_root() {
    let test = "commands_run_without_capabilities_even_as_root";
    if !crate::common::present(test, "root, whose powers it tries", is_root()) {
        return;
    }
    let sandbox = Sandbox::new();
    let others = sandbox.root().join("others");
    std::fs::create_dir_all(&others).unwrap();
    let theirs = others.join("theirs.txt");
    let ours = others.join("ours.txt");
    for file in [&theirs, &ours] {
        std::fs::write(file, "as it was\n").unwrap();
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let before = std::fs::metadata(&theirs).unwrap();
    let (t, o) = (theirs.display(), ours.display());
    let commands = [
        "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs)' /proc/self/status".to_string(),
        "mknod disk b 7 0".to_string(),
        "mknod tty c 5 0".to_string(),
        format!("chown 0:0 {t}"),
        format!("chmod 666 {t}"),
        format!("touch -d 2001-01-01 {t}"),
        format!("setfattr -n user.planted -v 1 {t}"),
        format!("setfattr -n trusted.planted -v 1 {t}"),
        format!("echo changed > {t}"),
        format!("chmod 600 {o}"),
    ];
    let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": running(&commands)}]}));
    let run = spawn(&sandbox, 1, "use root's powers", &model, &[]);
    assert_eq!(run.code, 0, "the agent itself goes on: {}", run.stderr);
    let out = outputs(&sandbox.transcript(1));

    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert!(
            out[0].contains(&format!("{set}:\t0000000000000000")),
            "{set} is empty: {}",
            out[0]
        );
    }
    assert!(out[0].contains("NoNewPrivs:\t1"), "{}", out[0]);
    for (i, what) in out.iter().enumerate().take(9).skip(1) {
        assert!(
            what.contains("exited with code"),
            "command {} was refused: {what}",
            commands[i]
        );
    }
    assert!(!sandbox.ws().join("disk").exists() && !sandbox.ws().join("tty").exists());
    let after = std::fs::metadata(&theirs).unwrap();
    assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "as it was\n");
    assert_eq!((after.uid(), after.gid()), (65534, 65534));
    assert_eq!(after.mode() & 0o7777, 0o644);
    assert_eq!(after.mtime(), before.mtime());
    assert!(!xattrs(&theirs).contains("planted"), "{}", xattrs(&theirs));

    // What root keeps: its uid owns root's files. Landlock does not cover
    // a file's mode, times or xattrs, so a command may still change those
    // of root's own files outside the workspace, though it cannot write
    // them (README, Isolation).
    assert!(!out[9].contains("exited with code"), "{}", out[9]);
    assert_eq!(std::fs::metadata(&ours).unwrap().mode() & 0o7777, 0o600);
}
