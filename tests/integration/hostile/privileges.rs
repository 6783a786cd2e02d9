//! Attack 4, root's powers in tool commands: devices, ownership, modes,
//! timestamps and extended attributes of files outside the workspace,
//! root's own files, and the descriptors troupe's caller left open.

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
// outside the workspace; it read /etc/shadow, since the agent kept uid 0.
#[test]
fn commands_run_without_capabilities_or_root_s_uid_even_as_root() {
    let test = "commands_run_without_capabilities_or_root_s_uid_even_as_root";
    if !crate::common::present(test, "root, whose powers it tries", is_root())
        || !crate::common::present(test, "attr's getfattr", crate::common::on_path("getfattr"))
        || !crate::common::full_sandbox(test)
    {
        return;
    }
    let sandbox = Sandbox::new();
    // Outside /tmp, which the agent sees empty: in the agent's view, where
    // only metadata calls can reach it (Landlock does not cover them).
    let elsewhere = crate::common::visible_elsewhere();
    let others = elsewhere.path().join("others");
    std::fs::create_dir_all(&others).unwrap();
    std::fs::set_permissions(&others, std::fs::Permissions::from_mode(0o755)).unwrap();
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
        format!("touch -d 2001-01-01 {o}"),
        "head -c 1 /etc/shadow".to_string(),
        "echo written > mine.txt".to_string(),
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
    for (i, what) in out.iter().enumerate().take(12).skip(1) {
        assert!(
            what.contains("exited with code"),
            "command {} was refused: {what}",
            commands[i]
        );
    }
    assert!(out[11].contains("Permission denied"), "{}", out[11]);
    assert!(!sandbox.ws().join("disk").exists() && !sandbox.ws().join("tty").exists());
    let after = std::fs::metadata(&theirs).unwrap();
    assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "as it was\n");
    assert_eq!((after.uid(), after.gid()), (65534, 65534));
    assert_eq!(after.mode() & 0o7777, 0o644);
    assert_eq!(after.mtime(), before.mtime());
    assert!(!xattrs(&theirs).contains("planted"), "{}", xattrs(&theirs));
    // Root's own files outside the workspace are no longer the agent's:
    // it runs as an unprivileged uid.
    let ours_after = std::fs::metadata(&ours).unwrap();
    assert_eq!(ours_after.mode() & 0o7777, 0o644);
    assert_ne!(ours_after.mtime(), 978307200, "not touched to 2001");

    // What it writes in the workspace is root's on the disk, as if root
    // had written it (an id-mapped mount).
    let mine = std::fs::metadata(sandbox.ws().join("mine.txt")).unwrap();
    assert_eq!((mine.uid(), mine.gid()), (0, 0));
    let stats = &run.json()["stats"]["sandbox"];
    assert_eq!(stats["uid"], 2_000_000_000, "{stats}");
    assert_eq!(stats["namespaces"][0], "user", "{stats}");
}

// Issue 43: as root, an `--allow-read` of the workspace's closed parent
// (a `mktemp -d` directory, mode 0700) put that directory back as it is,
// and no agent could start: "cannot prepare .../agent_1: Permission
// denied". The agent keeps uid 0 instead, and says why, as it does for
// any closed directory on the way to its workspace.
#[test]
fn an_allowed_read_of_the_workspace_s_closed_parent_lets_agents_start() {
    if !is_root() || !crate::common::full_sandbox("closed parent") {
        return;
    }
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let parent = sandbox.root();
    std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(parent.join("notes.txt"), "beside the workspace").unwrap();
    let model = sandbox
        .script(json!({"rules": [{"role": "worker", "reply": running(&["cat ../notes.txt"])}]}));
    let run = spawn(
        &sandbox,
        1,
        "read beside",
        &model,
        &["--allow-read", parent.to_str().unwrap()],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "the agent keeps uid 0: {} is closed to other users",
            parent.display()
        )),
        "{}",
        run.stderr
    );
    let said = outputs(&sandbox.transcript(1)).join("\n");
    assert!(said.contains("beside the workspace"), "{said}");
}
