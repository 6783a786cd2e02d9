//! Issue 23, item 9: the README was ordered like a reference (run.json's
//! schema and the events before the one-agent command, a real endpoint
//! at line 747, the scripted model at 1037). It now reads in the order a
//! newcomer works, the reference is in docs/, and every link between them
//! leads somewhere.

use std::path::Path;

use super::markdown::{
    anchors, code_blocks, documents, headings, links, read, readme, repo, runnable_blocks, section,
};
use crate::common::{Sandbox, read_json, run, shell, troupe};

/// The first sections, in the order a newcomer needs them.
const FIRST: [&str; 6] = [
    "Set up",
    "The demo",
    "Pointing it at your own endpoint",
    "Writing a script",
    "Exit codes",
    "What is and is not confined",
];

/// The everyday sections, in this order, after the first ones.
const EVERYDAY: [&str; 8] = [
    "Running a team",
    "Steps that cannot clobber each other",
    "Ctrl-C and `--resume`",
    "Running one agent",
    "Background agents",
    "Config file",
    "MCP tool servers",
    "The tools",
];

#[test]
fn the_readme_puts_first_what_a_newcomer_does_first() {
    let all = headings(&readme());
    let sections: Vec<&str> = all
        .iter()
        .filter(|h| h.level == 2)
        .map(|h| h.title.as_str())
        .collect();
    let titles: Vec<&str> = all
        .iter()
        .filter(|h| h.level == 2 || h.level == 3)
        .map(|h| h.title.as_str())
        .collect();
    for (i, want) in FIRST.iter().enumerate() {
        assert!(
            sections.get(i).is_some_and(|title| title.starts_with(want)),
            "section {} should be `{want}`; the first are {:?}",
            i + 1,
            &sections[..FIRST.len().min(sections.len())]
        );
    }
    let mut after = titles
        .iter()
        .position(|t| t.starts_with(FIRST[FIRST.len() - 1]))
        .unwrap();
    for want in EVERYDAY {
        let at = titles
            .iter()
            .position(|t| t.starts_with(want))
            .unwrap_or_else(|| panic!("no section `{want}` in {titles:?}"));
        assert!(
            at > after,
            "`{want}` comes before `{}`: {titles:?}",
            titles[after]
        );
        after = at;
    }
}

#[test]
fn set_up_is_two_commands_the_demo_and_the_test_suite() {
    let readme = readme();
    let set_up = section(&readme, "Set up");
    let (_, block) = &code_blocks(set_up)[0];
    let commands: Vec<&str> = block
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect();
    assert_eq!(commands.len(), 2, "{block}");
    assert!(
        commands[0].contains("troupe run")
            && commands[0].contains("--model scripted:examples/team/script.json"),
        "{}",
        commands[0]
    );
    assert_eq!(commands[1], "cargo test");
    assert!(set_up.contains("cargo install --path ."), "{set_up}");
}

#[test]
fn every_link_leads_to_a_file_and_a_heading_that_exist() {
    let mut broken = Vec::new();
    for doc in documents() {
        for target in links(&read(&doc)) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let dest = match path {
                "" => doc.clone(),
                path => doc.parent().unwrap().join(path),
            };
            let name = doc.strip_prefix(repo()).unwrap().display().to_string();
            if !dest.exists() {
                broken.push(format!("{name}: {target}: no such file"));
            } else if !anchor.is_empty() && !anchors(&read(&dest)).contains(anchor) {
                broken.push(format!("{name}: {target}: no such heading"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_links_every_file_of_docs() {
    let linked = links(&readme());
    for doc in documents().into_iter().skip(1) {
        let name = format!("docs/{}", doc.file_name().unwrap().to_string_lossy());
        assert!(
            linked
                .iter()
                .any(|target| target.split('#').next() == Some(&name)),
            "the README does not link {name}"
        );
    }
}

/// The README's own script: a planner, a worker and a reviewer rule, run
/// as printed, with the first attempt rejected and the second approved.
#[test]
fn the_readmes_script_runs_as_printed() {
    let readme = readme();
    let part = section(&readme, "Writing a script");
    let blocks = code_blocks(part);
    let (_, script) = blocks.iter().find(|(info, _)| info == "json").unwrap();
    let (_, command) = blocks.iter().find(|(info, _)| info == "sh").unwrap();
    let sandbox = Sandbox::new();
    std::fs::write(sandbox.root().join("greet.json"), script).unwrap();
    let mut words = shlex::split(command.trim()).expect("shell words");
    assert_eq!(words.remove(0), "troupe", "{command}");
    let at = words.iter().position(|w| w == "--workspace").unwrap();
    words[at + 1] = sandbox.ws().display().to_string();
    let mut printed = troupe();
    printed.args(&words).current_dir(sandbox.root());
    let out = run(printed);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let runs = sandbox.ws().join("sub_agent_results");
    let dir = std::fs::read_dir(&runs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let record = read_json(&dir.join("run.json"));
    let attempts = record["steps"][0]["attempts"].as_array().unwrap();
    let verdicts: Vec<&serde_json::Value> = attempts
        .iter()
        .map(|a| &a["reviews"][0]["verdict"]["approved"])
        .collect();
    assert_eq!(verdicts, [false, true], "{record}");
    assert!(Path::new(&sandbox.ws().join("demo/1.txt")).is_file());
}

/// Every block the README marks runnable runs as printed, with `sh -e`:
/// in a directory where the demo ran, with the task files its examples
/// name (`t1.md` ...) and `examples/`, and troupe on PATH. A block's
/// `/tmp/troupe-...` directories are made in the test's own place, and
/// its build step is the test's build.
#[test]
fn every_block_marked_runnable_runs_as_printed() {
    let blocks = runnable_blocks(&readme());
    assert!(blocks.len() >= 3, "{blocks:?}");
    for block in blocks {
        let sandbox = Sandbox::new();
        let here = sandbox.ws();
        std::fs::create_dir_all(&here).unwrap();
        std::os::unix::fs::symlink(repo().join("examples"), here.join("examples")).unwrap();
        for (file, task) in [
            ("t1.md", "Write the API docs to docs/api.md."),
            ("t2.md", "Write CHANGELOG.md."),
            ("t3.md", "Write the tests."),
        ] {
            std::fs::write(here.join(file), task).unwrap();
        }
        let mut demo = shell(
            "troupe run --goal-file examples/team/goal.txt --model scripted:examples/team/script.json",
        );
        demo.current_dir(&here);
        let ran = run(demo);
        assert_eq!(ran.code, 0, "the demo, first: {}", ran.stderr);
        let places = format!("{}/troupe-", sandbox.root().display());
        let script = block
            .replace("cargo build --release && ./target/release/troupe", "troupe")
            .replace("/tmp/troupe-", &places);
        let mut command = shell(&script);
        command.current_dir(&here).env("HOME", sandbox.root());
        let out = run(command);
        assert_eq!(
            out.code, 0,
            "this block of the README fails as printed:\n{block}\nstdout:\n{}\nstderr:\n{}",
            out.stdout, out.stderr
        );
    }
}
