//! Attack 5, files that are not files: FIFOs and devices where troupe or a
//! tool expects a file, links swapped in while a file is opened, and hard
//! links to files outside.

use std::time::Duration;

use nix::sys::stat::Mode;

use crate::common::{Run, Sandbox, run, troupe};
use crate::team::{approving_reviewer, planner, step, team_run, worker_rule, worker_writes};

fn cli(sandbox: &Sandbox, args: &[&str]) -> Run {
    let mut command = troupe();
    command.args(args).arg("--workspace").arg(sandbox.ws());
    run(command)
}

// Regression: `troupe report` and `show` blocked forever on a FIFO planted
// as a transcript, and ate memory on a link to /dev/zero.
#[test]
fn show_and_report_refuse_fifos_and_links_planted_as_records() {
    let sandbox = Sandbox::new();
    let rules = vec![
        planner(serde_json::json!([step("a", &[])])),
        worker_rule("a", worker_writes("a", 0)),
        approving_reviewer(),
    ];
    let team = team_run(&sandbox, rules, &[]);
    assert_eq!(team.run.code, 0, "stderr:\n{}", team.run.stderr);
    let worker = team.dir.join("a/worker-1/.subagent/conversations.json");
    let review = team.dir.join("a/review-1/.subagent/conversations.json");
    std::fs::remove_file(&worker).unwrap();
    nix::unistd::mkfifo(&worker, Mode::from_bits_truncate(0o666)).unwrap();
    std::fs::remove_file(&review).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &review).unwrap();
    let run_id = team.dir.file_name().unwrap().to_str().unwrap().to_string();

    let page = sandbox.root().join("report.html");
    let report = cli(&sandbox, &["report", &run_id, "-o", page.to_str().unwrap()]);
    assert_eq!(report.code, 0, "{}", report.stderr);
    assert!(
        report.elapsed < Duration::from_secs(30),
        "{:?}",
        report.elapsed
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("it is a FIFO, not a regular file"), "{html}");
    assert!(html.contains("symbolic link"), "{html}");

    for planted in ["a/worker-1", "a/review-1"] {
        let shown = cli(&sandbox, &["show", &format!("{run_id}/{planted}")]);
        assert_eq!(shown.code, 2, "{}", shown.stderr);
        assert!(shown.elapsed < Duration::from_secs(30));
    }
    let summary = cli(&sandbox, &["show", &run_id]);
    assert_eq!(
        summary.code, 0,
        "the run itself still shows: {}",
        summary.stderr
    );
    std::fs::remove_file(team.dir.join("run.json")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", team.dir.join("run.json")).unwrap();
    let refused = cli(&sandbox, &["show", &run_id, "--json"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
}
