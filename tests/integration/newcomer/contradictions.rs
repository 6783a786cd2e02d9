//! Issue 23, item 8: the README contradicted itself and the code. It gave
//! a reviewer three read-only tools in two places and `run_command` in a
//! third, said an overrunning agent is killed "with everything it
//! started" (a `setsid` child outlives it without a PID namespace), that
//! a run's last line is its branch (it is the `clean` hint when checkouts
//! are kept), and left `interrupted` out of a status list. Each test
//! reads what the README or docs/ say and sets it against what the
//! binaries do or the code can write.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::markdown::{documents, quoted, read, readme, repo, section, table};
use crate::common::mock_model::{MockModel, MockResponse};
use crate::common::{Sandbox, processes_with, spawn};
use crate::team::{planner, step, team_run, two_steps_at_once, worker_rule, worker_writes};

/// The tools the README's table gives a Reviewer: always, only where the
/// sandbox is fully enforced, and only when the run allows the web.
fn reviewer_tools_in_readme() -> (BTreeSet<String>, BTreeSet<String>, BTreeSet<String>) {
    let readme = readme();
    let rows = table(section(&readme, "The tools"), "tool");
    let column = rows[0]
        .iter()
        .position(|cell| cell == "a Reviewer's")
        .expect("a column saying what a Reviewer gets");
    let (mut always, mut enforced, mut web) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    for row in &rows[1..] {
        let tool = row[0].trim_matches('`').to_string();
        match row[column].as_str() {
            "yes" => always.insert(tool),
            "where the sandbox is fully enforced" => enforced.insert(tool),
            "when the run allows it" => web.insert(tool),
            "no" => false,
            other => panic!("`{tool}`: what does a Reviewer's `{other}` mean?"),
        };
    }
    (always, enforced, web)
}

/// The tools a real reviewer is offered in a team run with `extra`
/// arguments: its model is an endpoint on 127.0.0.1 that records what it
/// is sent, the planner and the worker are scripted.
fn reviewer_tools_offered(extra: &[&str]) -> BTreeSet<String> {
    let sandbox = Sandbox::new();
    let endpoint = MockModel::start(vec![MockResponse::text(
        r#"{"approved": true, "summary": "checked"}"#,
    )]);
    let rules = vec![
        planner(json!([step("a", &[])])),
        worker_rule("a", worker_writes("a", 0)),
    ];
    let mut args = vec![
        "--reviewer-model",
        "m",
        "--reviewer-base-url",
        &endpoint.url,
    ];
    args.extend(extra);
    let team = team_run(&sandbox, rules, &args);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let requests = endpoint.requests();
    assert_eq!(requests.len(), 1, "one request, the reviewer's");
    requests[0].body["tools"]
        .as_array()
        .expect("the reviewer's request offers tools")
        .iter()
        .map(|tool| tool["function"]["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_reviewer_is_offered_the_tools_the_readme_gives_it() {
    let (always, enforced, web) = reviewer_tools_in_readme();
    assert_eq!(reviewer_tools_offered(&["--sandbox", "off"]), always);
    let with_web: BTreeSet<String> = always.union(&web).cloned().collect();
    let allowing = [
        "--sandbox",
        "off",
        "--allow-web",
        "docs.rs",
        "--search-url",
        "http://127.0.0.1:9",
    ];
    assert_eq!(reviewer_tools_offered(&allowing), with_web);
    if crate::common::full_sandbox("a_reviewer_is_offered_the_tools_the_readme_gives_it") {
        let all: BTreeSet<String> = always.union(&enforced).cloned().collect();
        assert_eq!(reviewer_tools_offered(&[]), all);
    }
}

/// The paragraphs of a text, each item of a list a paragraph of its own.
fn paragraphs(text: &str) -> Vec<String> {
    let mut out: Vec<String> = vec![String::new()];
    for line in text.lines() {
        let item = line.trim_start();
        let starts_item = item.starts_with("- ")
            || item
                .split_once(". ")
                .is_some_and(|(n, _)| n.parse::<u32>().is_ok());
        if line.trim().is_empty() || starts_item {
            out.push(String::new());
        }
        let last = out.last_mut().unwrap();
        last.push_str(line);
        last.push('\n');
    }
    out.retain(|p| !p.trim().is_empty());
    out
}

#[test]
fn no_page_gives_a_reviewer_the_read_only_tools_without_run_command() {
    for doc in documents() {
        for paragraph in paragraphs(&read(&doc)) {
            let names_them = ["`read_file`", "`list_dir`", "`search_workspace`"]
                .iter()
                .all(|tool| paragraph.contains(tool));
            if names_them && paragraph.to_lowercase().contains("reviewer") {
                assert!(
                    paragraph.contains("`run_command`"),
                    "{} names a reviewer's tools without `run_command`:\n{paragraph}",
                    doc.display()
                );
            }
        }
    }
}

/// What the code can write for `ty` (an enum of `source`), read from its
/// `as_str`'s arms, `Type::Variant => "text"`; each text is checked to be
/// the variant's snake_case name, which is what serde writes.
fn written(source: &str, ty: &str) -> BTreeSet<String> {
    let text = read(&repo().join(source));
    let arms: Vec<(String, String)> = text
        .lines()
        .filter_map(|line| {
            let (variant, value) = line
                .trim()
                .strip_prefix(&format!("{ty}::"))?
                .split_once(" => \"")?;
            Some((variant.to_string(), value.split('"').next()?.to_string()))
        })
        .collect();
    assert!(
        !arms.is_empty(),
        "no `{ty}::... => \"...\"` arms in {source}"
    );
    for (variant, value) in &arms {
        let snake: String = variant
            .chars()
            .enumerate()
            .flat_map(|(i, c)| match (i, c.is_uppercase()) {
                (0, _) | (_, false) => vec![c.to_ascii_lowercase()],
                _ => vec!['_', c.to_ascii_lowercase()],
            })
            .collect();
        assert_eq!(&snake, value, "{ty}::{variant}");
    }
    arms.into_iter().map(|(_, value)| value).collect()
}

#[test]
fn the_status_lists_name_every_status_the_code_writes() {
    let records = read(&repo().join("docs/run-records.md"));
    let listed = |first: &str| -> BTreeSet<String> {
        table(&records, first)[1..]
            .iter()
            .map(|row| row[0].trim_matches('`').to_string())
            .collect()
    };
    assert_eq!(
        listed("status of the run"),
        written("src/record/run.rs", "RunStatus")
    );
    assert_eq!(
        listed("status of a step"),
        written("src/record/run.rs", "StepStatus")
    );
    let readme = readme();
    let bullet = section(&readme, "Running one agent")
        .split("\n- ")
        .find(|bullet| bullet.starts_with("`status`:"))
        .expect("the README's bullet on a result's `status`");
    let named: BTreeSet<String> = quoted(bullet).into_iter().collect();
    let agent = written("src/protocol/status.rs", "AgentStatus");
    let missing: Vec<&String> = agent.difference(&named).collect();
    assert!(missing.is_empty(), "{missing:?} missing from:\n{bullet}");
}

/// The lines the README quotes for the end of an isolated run, each as a
/// pattern whose upper-case words (BRANCH, RUN, N, ...) stand for anything.
fn end_lines() -> Vec<(String, regex::Regex)> {
    let readme = readme();
    let part = section(&readme, "Steps that cannot clobber each other");
    let placeholder = regex::Regex::new(r"\b[A-Z][A-Z_]*\b").unwrap();
    quoted(part)
        .into_iter()
        .filter(|line| line.starts_with("troupe: ") && placeholder.is_match(line))
        .map(|line| {
            let mut pattern = String::from("^");
            let mut last = 0;
            for found in placeholder.find_iter(&line) {
                pattern.push_str(&regex::escape(&line[last..found.start()]));
                pattern.push_str(".+?");
                last = found.end();
            }
            pattern.push_str(&regex::escape(&line[last..]));
            pattern.push('$');
            let compiled = regex::Regex::new(&pattern).unwrap();
            (line, compiled)
        })
        .collect()
}

/// The README's line that a run's last `troupe:` line is, with the lines
/// after it.
fn said_last(stderr: &str) -> (String, Vec<String>) {
    let lines: Vec<&str> = stderr.lines().collect();
    let at = lines
        .iter()
        .rposition(|line| line.starts_with("troupe: "))
        .unwrap_or_else(|| panic!("no troupe: line\n{stderr}"));
    let quoted = end_lines()
        .into_iter()
        .find(|(_, pattern)| pattern.is_match(lines[at]))
        .map(|(line, _)| line)
        .unwrap_or_else(|| panic!("the README quotes no line like `{}`", lines[at]));
    let after = lines[at + 1..]
        .iter()
        .map(|line| line.to_string())
        .collect();
    (quoted, after)
}

#[test]
fn an_isolated_run_ends_with_the_lines_the_readme_quotes() {
    let isolated = ["--isolation", "worktree"];

    let applied = team_run(&Sandbox::new(), two_steps_at_once(), &isolated);
    assert_eq!(applied.run.code, 0, "{}", applied.run.stderr);
    let (line, after) = said_last(&applied.run.stderr);
    assert!(line.starts_with("troupe: applied branch"), "{line}");
    assert_eq!(after, ["  A a.txt", "  A b.txt"]);

    let kept = team_run(
        &Sandbox::new(),
        two_steps_at_once(),
        &[&isolated[..], &["--no-apply"]].concat(),
    );
    assert_eq!(kept.run.code, 0, "{}", kept.run.stderr);
    let (line, after) = said_last(&kept.run.stderr);
    assert!(line.starts_with("troupe: the result is branch"), "{line}");
    assert!(after.is_empty(), "{after:?}");

    // A worker that gives up leaves its checkout for a look.
    let gives_up = vec![
        json!({"tool_calls": [{"name": "write_file", "arguments": {"path": "half.txt", "content": "half"}}]}),
        json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": false, "summary": "could not"}}]}),
    ];
    let mut failing = two_steps_at_once();
    failing[1] = worker_rule("a", gives_up.clone());
    failing[2] = worker_rule("b", gives_up);
    let failed = team_run(&Sandbox::new(), failing, &isolated);
    assert_eq!(failed.run.code, 1, "{}", failed.run.stderr);
    let (line, after) = said_last(&failed.run.stderr);
    assert!(
        line.contains("checkouts of steps that did not complete kept"),
        "{line}"
    );
    assert!(after.is_empty(), "{after:?}");
}

#[test]
fn without_its_pid_namespace_a_setsid_process_outlives_its_agent_as_the_readme_says() {
    let readme = readme();
    let top = readme.split("\n## ").next().unwrap();
    assert!(
        top.contains("PID namespace") && top.contains("`setsid`"),
        "the README's first paragraph says nothing of what outlives an agent:\n{top}"
    );
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let marker = "sleep 307.3";
    // The shell waits for the pid file, which the child writes only after
    // `setsid()`: otherwise the command's group could be killed while the
    // child is still in it, and nothing would be left to outlive the agent.
    let detached = format!(
        "setsid sh -c 'echo $$ > detached.pid; exec {marker}' > /dev/null 2>&1 & \
         while [ ! -s detached.pid ]; do sleep 0.01; done"
    );
    let model = sandbox.script(json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "run_command", "arguments": {"command": detached}}]},
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "left one"}}]}
    ]}]}));
    let out = spawn(
        &sandbox,
        1,
        "leave a process",
        &model,
        &["--sandbox", "off"],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let mut left = Vec::new();
    crate::faults::wait_for("the setsid process", || {
        left = processes_with(marker);
        !left.is_empty()
    });
    for pid in &left {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let result: Value = out.json();
    assert_eq!(result["stats"]["sandbox"]["status"], "off", "{result}");
}
