//! Copy-on-write checkouts: an isolated attempt works in an overlay of a
//! shared base, the host's checkout directory stays empty, the attempt's
//! upper layer holds only what it changed, and the branch ends as with a
//! full checkout. As root and as `nobody`.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::common::{Sandbox, troupe};
use crate::faults::wait_for;
use crate::hostile::unprivileged;
use crate::team::{approving_reviewer, planner, step, worker_rule};

/// Whether this machine's kernel lets the agents' sandbox mount an
/// overlay (`troupe-agent --probe-sandbox`); where it does not, a test of
/// copy-on-write checkouts says it is skipped, and fails under CI, whose
/// machines must have them.
pub fn overlays_work() -> bool {
    let out = Command::new(env!("CARGO_BIN_EXE_troupe-agent"))
        .arg("--probe-sandbox")
        .output()
        .unwrap();
    let works = String::from_utf8_lossy(&out.stdout).contains(r#""overlay":true"#);
    if !works {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI machines must mount overlays: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        eprintln!("skipped: this kernel does not let the sandbox mount an overlay");
    }
    works
}

/// git in `dir`, whoever owns it; its output.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "safe.directory=*"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A repository with a file to read, one to delete, a directory to
/// delete and an executable.
fn repository(sandbox: &Sandbox) {
    let ws = sandbox.ws();
    std::fs::create_dir_all(ws.join("dir")).unwrap();
    std::fs::write(ws.join("f.txt"), "f\n").unwrap();
    std::fs::write(ws.join("old.txt"), "old\n").unwrap();
    std::fs::write(ws.join("dir/a.txt"), "a\n").unwrap();
    std::fs::write(ws.join("dir/b.txt"), "b\n").unwrap();
    std::fs::write(ws.join("run.sh"), "#!/bin/sh\necho hi\n").unwrap();
    let executable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(ws.join("run.sh"), executable).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    git(&ws, &["add", "."]);
    git(
        &ws,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "-m",
            "start",
        ],
    );
}

/// s1 reads, writes, deletes and then waits for `release` to appear in
/// its own directory beside its checkout (the one place of the run's
/// directory in its view, which the test writes); s2 writes a file of its
/// own.
fn rules(hold: bool) -> Vec<Value> {
    let wait = match hold {
        true => "while [ ! -e ../worker-1/release ]; do sleep 0.05; done",
        false => "true",
    };
    let command = format!(
        "cat f.txt > seen.txt && printf new > new.txt && rm old.txt && rm -r dir && printf 'echo changed\\n' >> run.sh && {wait}"
    );
    vec![
        planner(json!([step("s1", &[]), step("s2", &[])])),
        worker_rule(
            "s1",
            vec![
                json!({"tool_calls": [{"name": "run_command", "arguments": {"command": command}}]}),
                json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "changed"}}]}),
            ],
        ),
        worker_rule("s2", crate::isolation::writes("s2.txt", "s2", 0)),
        approving_reviewer(),
    ]
}

fn run_command(sandbox: &Sandbox, hold: bool, full: bool) -> Command {
    let model = sandbox.script(json!({"rules": rules(hold)}));
    let mut command = troupe();
    command
        .args(["run", "test goal", "--model", &model, "--no-apply"])
        .arg("--workspace")
        .arg(sandbox.ws())
        .args(["--json", "--max-replans", "0"]);
    match full {
        true => command.env("TROUPE_CHECKOUTS", "full"),
        false => command.env_remove("TROUPE_CHECKOUTS"),
    };
    command
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn the_run(sandbox: &Sandbox) -> std::path::PathBuf {
    std::fs::read_dir(sandbox.ws().join("sub_agent_results"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .unwrap()
}

/// What the run's branch holds: each path with its mode and content.
fn branch_files(sandbox: &Sandbox, run: &Path) -> Vec<String> {
    let branch = format!("troupe/{}", run.file_name().unwrap().to_string_lossy());
    git(&sandbox.ws(), &["ls-tree", "-r", &branch])
        .lines()
        .map(|line| {
            let (meta, path) = line.split_once('\t').unwrap();
            let mode = meta.split(' ').next().unwrap();
            let content = git(&sandbox.ws(), &["show", &format!("{branch}:{path}")]);
            format!("{mode} {path}: {content}")
        })
        .collect()
}

fn an_attempt_works_on_its_own_layer(as_nobody: bool) {
    if !overlays_work() {
        return;
    }
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let command = run_command(&sandbox, true, false);
    let mut command = match as_nobody {
        true => unprivileged(&sandbox, command),
        false => command,
    };
    let mut running = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("s1's layer to hold its work", || {
        crate::faults::first_run(&sandbox).is_some_and(|run| {
            // The command's last write.
            std::fs::read_to_string(run.join("s1/upper-1/run.sh"))
                .is_ok_and(|text| text.contains("changed"))
        })
    });
    let run = the_run(&sandbox);
    let upper = run.join("s1/upper-1");
    // The worker's changes, and nothing of the repository it did not
    // touch; its checkout on the host is the empty mount point.
    // `sub_agent_results`: the whiteout that hides the results directory
    // of the workspace, the attempt's base.
    assert_eq!(
        names(&upper),
        [
            ".git",
            "dir",
            "new.txt",
            "old.txt",
            "run.sh",
            "seen.txt",
            "sub_agent_results"
        ]
    );
    assert_eq!(
        std::fs::read_to_string(upper.join("seen.txt")).unwrap(),
        "f\n"
    );
    assert!(names(&run.join("s1/checkout-1")).is_empty());
    // The checkout's index is the snapshot's, with the stat data of the
    // workspace's files as git read them: a `git status` in the checkout
    // compares them instead of hashing every file.
    let index = run.join("s1/checkout-1.git/index");
    let listed = Command::new("git")
        .env("GIT_INDEX_FILE", &index)
        .args(["-c", "safe.directory=*", "ls-files", "--debug", "f.txt"])
        .current_dir(sandbox.ws())
        .output()
        .unwrap();
    let listed = format!(
        "{}{}",
        String::from_utf8_lossy(&listed.stdout),
        String::from_utf8_lossy(&listed.stderr)
    );
    let ino = std::os::unix::fs::MetadataExt::ino(
        &std::fs::metadata(sandbox.ws().join("f.txt")).unwrap(),
    );
    assert!(
        listed.contains(&format!("ino: {ino}\n")),
        "the checkout's index has no stat data of f.txt: {listed}"
    );
    assert!(
        !upper.join("f.txt").exists(),
        "a file only read is not copied"
    );
    std::fs::write(run.join("s1/worker-1/release"), "").unwrap();
    let status = running.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(running.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    let mut stdout = String::new();
    std::io::Read::read_to_string(running.stdout.as_mut().unwrap(), &mut stdout).unwrap();
    assert!(status.success(), "{stderr}");
    let isolation: Value = stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["type"] == "isolation")
        .unwrap();
    assert_eq!(isolation["note"], "copy-on-write checkouts", "{isolation}");
    assert_eq!(
        branch_files(&sandbox, &run),
        [
            "100644 f.txt: f",
            "100644 new.txt: new",
            "100755 run.sh: #!/bin/sh\necho hi\necho changed",
            "100644 s2.txt: s2",
            "100644 seen.txt: f",
        ]
    );
    for step in ["s1", "s2"] {
        let left: Vec<String> = names(&run.join(step))
            .into_iter()
            .filter(|n| {
                n.starts_with("upper-") || n.starts_with("work-") || n.starts_with("checkout-")
            })
            .collect();
        assert!(left.is_empty(), "{step} left {left:?}");
    }
    assert!(!run.join("bases").exists(), "the bases go with the run");
}

#[test]
fn an_attempt_works_on_its_own_layer_as_root() {
    an_attempt_works_on_its_own_layer(false);
}

#[test]
fn an_attempt_works_on_its_own_layer_as_nobody() {
    an_attempt_works_on_its_own_layer(true);
}

#[test]
fn full_checkouts_give_the_same_branch_and_say_why() {
    if !overlays_work() {
        return;
    }
    let layered = Sandbox::new();
    repository(&layered);
    let out = crate::common::run(run_command(&layered, false, false));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let full = Sandbox::new();
    repository(&full);
    let out = crate::common::run(run_command(&full, false, true));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains(
            r#""note":"full checkouts (TROUPE_CHECKOUTS=full): each attempt writes the whole tree and the change is found by scanning it""#
        ),
        "{}",
        out.stdout
    );
    assert_eq!(
        branch_files(&layered, &the_run(&layered)),
        branch_files(&full, &the_run(&full))
    );
}

#[test]
fn a_failed_attempt_is_written_out_whole_for_a_look() {
    if !overlays_work() {
        return;
    }
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let failing = vec![
        json!({"tool_calls": [{"name": "write_file", "arguments": {"path": "half.txt", "content": "half"}}]}),
        json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": false, "summary": "gave up"}}]}),
    ];
    let rules = vec![
        planner(json!([step("s1", &[]), step("s2", &[])])),
        worker_rule("s1", failing),
        worker_rule("s2", crate::isolation::writes("s2.txt", "s2", 0)),
        approving_reviewer(),
    ];
    let team = crate::team::team_run(&sandbox, rules, &["--max-retries", "0", "--no-apply"]);
    assert_eq!(team.run.code, 1, "{}", team.run.stderr);
    let kept = team.dir.join("s1/checkout-1");
    assert_eq!(
        std::fs::read_to_string(kept.join("half.txt")).unwrap(),
        "half"
    );
    assert_eq!(std::fs::read_to_string(kept.join("f.txt")).unwrap(), "f\n");
    assert!(!team.dir.join("s1/upper-1").exists());
    assert!(
        team.run.stderr.contains("troupe clean"),
        "{}",
        team.run.stderr
    );
    let mut clean = troupe();
    clean
        .args(["clean", "last", "--workspace"])
        .arg(sandbox.ws());
    let cleaned = crate::common::run(clean);
    assert_eq!(cleaned.code, 0, "{}", cleaned.stderr);
    assert!(!kept.exists());
}
