//! Reading runs and transcripts back: show, report, and the DAG exports.

use serde_json::json;

use crate::common::{Sandbox, cli, read_json, run, spawn, troupe};
use crate::team::{
    approving_reviewer, planner, step, team_run, verdict, worker_rule, worker_writes,
};

#[test]
fn show_an_agent_prints_its_calls_and_results() {
    let sandbox = Sandbox::new();
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"content": "Writing the note.", "tool_calls": [{"name": "write_file", "arguments": {"path": "note.txt", "content": "hello there"}}]},
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "missing.txt"}}]},
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "note written"}}]}
    ]}]}));
    assert_eq!(spawn(&sandbox, 4, "write a note", &model, &[]).code, 0);
    let shown = cli(&sandbox, &["show", "agent_4"]);
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    let text = shown.stdout;
    assert!(text.contains("agent 4 · completed"), "{text}");
    assert!(
        text.contains("── assistant ──\nWriting the note."),
        "{text}"
    );
    assert!(
        text.contains(
            "-> write_file {\"content\":\"hello there\",\"path\":\"note.txt\"}  (call_1)"
        ),
        "{text}"
    );
    assert!(
        text.contains("── tool write_file (call_1) ok ──\nwrote 11 bytes to note.txt"),
        "{text}"
    );
    assert!(
        text.contains("── tool read_file (call_2) failed ──"),
        "{text}"
    );
    assert!(
        text.contains("[... "),
        "long messages are cut without --full"
    );
    let full = cli(&sandbox, &["show", "4", "--full"]).stdout;
    assert!(!full.contains("[... ") && full.len() > text.len());
    let raw = cli(&sandbox, &["show", "agent_4", "--json"]).stdout;
    let file =
        std::fs::read_to_string(sandbox.agent_dir(4).join(".subagent/conversations.json")).unwrap();
    assert_eq!(raw, file, "--json passes the file through");
    assert!(!text.contains('\x1b'), "no colour in a pipe");
}

/// Regression (the third and fourth adversarial trials): `troupe show`
/// printed a model's OSC 52 (set the clipboard) from a transcript as it
/// was, to whatever read its output.
#[test]
fn show_writes_out_the_control_characters_of_a_transcript() {
    let sandbox = Sandbox::new();
    let osc = "\u{1b}]52;c;cGF3bmVk\u{7}";
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"content": format!("look {osc} here"), "tool_calls": [{"name": "run_command", "arguments": {"command": "printf '\\033]52;c;cGF3bmVk\\007'"}}]},
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "done"}}]}
    ]}]}));
    assert_eq!(spawn(&sandbox, 1, "print things", &model, &[]).code, 0);
    for flags in [&["show", "1"][..], &["show", "1", "--full"][..]] {
        let shown = cli(&sandbox, flags);
        assert_eq!(shown.code, 0, "{}", shown.stderr);
        assert!(!shown.stdout.contains('\u{1b}'), "{:?}", shown.stdout);
        assert!(!shown.stdout.contains('\u{7}'), "{:?}", shown.stdout);
        assert!(
            shown
                .stdout
                .contains("look \\u{1b}]52;c;cGF3bmVk\\u{7} here"),
            "{}",
            shown.stdout
        );
    }
}

fn a_small_run(sandbox: &Sandbox) -> crate::team::TeamRun {
    let rules = vec![
        planner(json!([
            step("build", &[]),
            step("check", &["build"]),
            step("never", &["check"])
        ])),
        worker_rule("build", worker_writes("build", 0)),
        worker_rule("check", worker_writes("check", 0)),
        json!({"role": "reviewer", "step": "check", "reply": [verdict(json!(false), "check.txt is wrong")]}),
        approving_reviewer(),
    ];
    team_run(
        sandbox,
        rules,
        &["--max-retries", "0", "--max-replans", "0"],
    )
}

#[test]
fn show_a_run_and_a_step() {
    let sandbox = Sandbox::new();
    let team = a_small_run(&sandbox);
    assert_eq!(team.run.code, 1);
    let run_id = team.dir.file_name().unwrap().to_str().unwrap().to_string();
    let text = cli(&sandbox, &["show", &run_id]).stdout;
    assert!(text.contains(&format!("run {run_id} · failed")), "{text}");
    assert!(
        text.contains("build  do build [FILE_WRITE]  (completed)"),
        "{text}"
    );
    assert!(
        text.contains("check  do check [FILE_WRITE] <- build  (failed)"),
        "{text}"
    );
    assert!(
        text.contains("never  do never [FILE_WRITE] <- check  (skipped)"),
        "{text}"
    );
    assert!(
        text.contains("review: rejected: check.txt is wrong"),
        "{text}"
    );
    let step = cli(&sandbox, &["show", &format!("{run_id}/check")]).stdout;
    assert!(step.contains("step check · failed"), "{step}");
    assert!(step.contains("issue: check.txt is wrong"), "{step}");
    assert!(
        step.contains("check: The worker lists: check.txt (exists)."),
        "{step}"
    );
    let raw: serde_json::Value =
        serde_json::from_str(&cli(&sandbox, &["show", &run_id, "--json"]).stdout).unwrap();
    assert_eq!(raw, read_json(&team.dir.join("run.json")));
    let dot = cli(&sandbox, &["show", &run_id, "--format", "dot"]).stdout;
    assert!(
        dot.starts_with("digraph plan {") && dot.contains("\"build\" -> \"check\";"),
        "{dot}"
    );
    let mermaid = cli(&sandbox, &["show", &run_id, "--format", "mermaid"]).stdout;
    assert!(
        mermaid.contains("check[\"check: do check\"]:::failed")
            && mermaid.contains("build --> check"),
        "{mermaid}"
    );
    let unknown = cli(&sandbox, &["show", "no_such_run"]);
    assert_eq!(unknown.code, 2);
    assert!(
        unknown.stderr.contains("nothing named `no_such_run`"),
        "{}",
        unknown.stderr
    );
}

#[test]
fn the_report_is_one_self_contained_page() {
    let sandbox = Sandbox::new();
    let team = a_small_run(&sandbox);
    let out = sandbox.root().join("report.html");
    let run_id = team.dir.file_name().unwrap().to_str().unwrap().to_string();
    let made = cli(&sandbox, &["report", &run_id, "-o", out.to_str().unwrap()]);
    assert_eq!(made.code, 0, "{}", made.stderr);
    let page = std::fs::read_to_string(&out).unwrap();
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "no outside resources"
    );
    assert!(!page.contains("<script"), "no scripts");
    let svg_start = page.find("<svg").unwrap();
    let svg = &page[svg_start..page.find("</svg>").unwrap()];
    let nodes: Vec<(&str, &str)> = svg
        .match_indices("<g class=\"node\" data-step=\"")
        .map(|(at, _)| {
            let rest = &svg[at + 27..];
            let step = &rest[..rest.find('"').unwrap()];
            let status_at = rest.find("data-status=\"").unwrap() + 13;
            let status = &rest[status_at..status_at + rest[status_at..].find('"').unwrap()];
            (step, status)
        })
        .collect();
    assert_eq!(
        nodes,
        [
            ("build", "completed"),
            ("check", "failed"),
            ("never", "skipped")
        ]
    );
    assert_eq!(
        svg.matches("class=\"edge\"").count(),
        2,
        "one edge per dependency"
    );
    assert_eq!(
        page.matches("<details class=\"agent\"").count(),
        4,
        "every agent's transcript: two workers, two reviewers"
    );
    assert!(page.contains("check.txt is wrong"));
}

#[test]
fn plan_exports_its_dag() {
    let sandbox = Sandbox::new();
    let model =
        sandbox.script(json!({"rules": [planner(json!([step("a", &[]), step("b", &["a"])]))]}));
    let mut command = troupe();
    command.args([
        "plan",
        "two steps",
        "--model",
        &model,
        "--format",
        "mermaid",
    ]);
    let out = run(command);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.starts_with("flowchart LR\n") && out.stdout.contains("a --> b"),
        "{}",
        out.stdout
    );
}
