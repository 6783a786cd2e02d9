//! `troupe report` as a person sees it: the page of a real run, opened in
//! headless Chromium, with a script (added to a copy, the report has none)
//! that measures the laid-out page and leaves its findings in the DOM.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::common::{Sandbox, present, run, troupe};
use crate::team::{
    approving_reviewer, planner, step, team_run, verdict, worker_rule, worker_writes,
};

const LONG_ID: &str = "a_step_whose_id_is_much_longer_than_any_box_would_normally_be";

/// What the page looks like once laid out, as the browser measured it.
const PROBE: &str = r#"<script>
const nodes = [...document.querySelectorAll('g.node')].map(g => {
  const box = g.querySelector('rect').getBBox();
  const text = g.querySelector('text').getBBox();
  return {step: g.dataset.step, fits: text.x + text.width <= box.x + box.width + 0.5};
});
const ends = {};
for (const edge of document.querySelectorAll('path.edge')) {
  const end = edge.getPointAtLength(edge.getTotalLength());
  (ends[edge.dataset.to] = ends[edge.dataset.to] || []).push(Math.round(end.y));
}
const badges = {};
for (const agent of document.querySelectorAll('details.agent')) {
  badges[agent.dataset.agent] = agent.querySelector('summary .status').textContent;
}
const outcomes = {};
for (const row of document.querySelectorAll('table.steps tr[data-step]')) {
  outcomes[row.dataset.step] = row.querySelector('td.outcome').textContent;
}
const table = document.querySelector('table.steps');
const check = {
  nodes, ends, badges, outcomes,
  tableFits: table.getBoundingClientRect().right <= document.documentElement.clientWidth,
  tableRight: table.getBoundingClientRect().right,
  pageWidth: document.documentElement.clientWidth,
  widest: [...table.querySelectorAll('td')].map(td => [td.getBoundingClientRect().width, td.textContent.slice(0, 40)]).sort((a, b) => b[0] - a[0]).slice(0, 3),
  badgesOnOneLine: [...document.querySelectorAll('span.status')].every(b => b.getClientRects().length === 1),
  systemOpen: [...document.querySelectorAll('details.system')].some(d => d.open),
  systemPrompts: document.querySelectorAll('details.system').length,
  countLines: [...document.querySelectorAll('p')].filter(p => p.textContent.includes(' failed, ')).length,
  reason: (document.querySelector('p.reason') || {}).textContent,
  toolLabels: [...document.querySelectorAll('.call .who')].map(w => w.textContent),
};
document.body.setAttribute('data-check', JSON.stringify(check));
</script></body>"#;

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|name| {
            Command::new(name)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

/// A fontconfig file in `dir` that gives the browser only the fonts in
/// `fonts`: the page must read right whichever fonts a machine has.
fn only_fonts(dir: &Path, fonts: &Path) -> std::path::PathBuf {
    let file = dir.join(format!(
        "fonts-{}.conf",
        fonts.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(
        &file,
        format!(
            "<?xml version=\"1.0\"?>\n<!DOCTYPE fontconfig SYSTEM \"fonts.dtd\">\n<fontconfig><dir>{}</dir><cachedir>{}</cachedir></fontconfig>\n",
            fonts.display(),
            dir.join("font-cache").display()
        ),
    )
    .unwrap();
    file
}

fn browse(browser: &str, page: &Path, extra: &[&str]) -> std::process::Output {
    browse_with(browser, page, extra, None)
}

fn browse_with(
    browser: &str,
    page: &Path,
    extra: &[&str],
    fonts: Option<&Path>,
) -> std::process::Output {
    let mut command = Command::new(browser);
    if let Some(conf) = fonts {
        command.env("FONTCONFIG_FILE", conf);
    }
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1280,2400",
        ])
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("start the browser")
}

#[test]
fn the_report_reads_right_in_a_browser() {
    let browser = chromium();
    if !present(
        "report_page",
        "Chromium (Debian's chromium)",
        browser.is_some(),
    ) {
        return;
    }
    let browser = browser.unwrap();
    let sandbox = Sandbox::new();
    let steps = json!([
        step("a", &[]),
        step(LONG_ID, &[]),
        step("c", &[]),
        step("join", &["a", LONG_ID, "c"]),
        step("broken", &[]),
    ]);
    let first_review_of_a = json!({"role": "reviewer", "step": "a", "attempt": 1, "reply": [
        verdict(json!(false), "a.txt is missing a line")
    ]});
    let rules = vec![
        planner(steps),
        worker_rule("a", worker_writes("a", 0)),
        worker_rule(LONG_ID, worker_writes("long", 0)),
        worker_rule("c", worker_writes("c", 0)),
        worker_rule("join", worker_writes("join", 0)),
        worker_rule(
            "broken",
            vec![json!({"error": "model overloaded", "status": 503})],
        ),
        first_review_of_a,
        approving_reviewer(),
    ];
    let team = team_run(
        &sandbox,
        rules,
        &["--max-replans", "0", "--http-retries", "0"],
    );
    assert_eq!(team.run.code, 1, "broken fails: {}", team.run.stderr);
    let page = sandbox.root().join("report.html");
    let mut command = troupe();
    command
        .args(["report", "last", "-o"])
        .arg(&page)
        .arg("--workspace")
        .arg(sandbox.ws());
    assert_eq!(run(command).code, 0);

    let html = std::fs::read_to_string(&page).unwrap();
    let probed = sandbox.root().join("probed.html");
    std::fs::write(&probed, html.replace("</body>", PROBE)).unwrap();
    let dom = browse(browser, &probed, &["--dump-dom"]);
    let dom = String::from_utf8_lossy(&dom.stdout);
    let start = dom.find("data-check=\"").expect("the probe ran") + "data-check=\"".len();
    let end = start + dom[start..].find('"').unwrap();
    let check: Value = serde_json::from_str(&html_unescape(&dom[start..end])).unwrap();

    for node in check["nodes"].as_array().unwrap() {
        assert_eq!(node["fits"], true, "the id stays in its box: {node}");
    }
    // And with only one family of the fonts Debian ships, each in turn.
    let families = ["dejavu", "liberation", "noto", "freefont"]
        .map(|name| Path::new("/usr/share/fonts/truetype").join(name));
    for fonts in families.iter().filter(|dir| dir.is_dir()) {
        let conf = only_fonts(sandbox.root(), fonts);
        let dom = browse_with(browser, &probed, &["--dump-dom"], Some(&conf));
        let dom = String::from_utf8_lossy(&dom.stdout);
        let start = dom.find("data-check=\"").expect("the probe ran") + "data-check=\"".len();
        let end = start + dom[start..].find('"').unwrap();
        let check: Value = serde_json::from_str(&html_unescape(&dom[start..end])).unwrap();
        for node in check["nodes"].as_array().unwrap() {
            assert_eq!(
                node["fits"],
                true,
                "the id stays in its box with only {}: {node}",
                fonts.display()
            );
        }
    }
    let into_join: Vec<i64> = check["ends"]["join"]
        .as_array()
        .unwrap()
        .iter()
        .map(|y| y.as_i64().unwrap())
        .collect();
    assert_eq!(into_join.len(), 3);
    let mut distinct = into_join.clone();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        3,
        "three arrows, three ports: {into_join:?}"
    );
    let badges = &check["badges"];
    assert_eq!(badges["a/review-1"], "rejected", "{badges}");
    assert_eq!(badges["a/review-2"], "approved", "{badges}");
    let outcome = check["outcomes"]["broken"].as_str().unwrap();
    assert!(
        outcome.contains("model overloaded"),
        "the failure's reason: {outcome}"
    );
    assert_eq!(
        check["tableFits"], true,
        "the table fits the page: {} > {}, widest cells {}",
        check["tableRight"], check["pageWidth"], check["widest"]
    );
    assert_eq!(check["badgesOnOneLine"], true, "no status word is broken");
    assert_eq!(check["systemOpen"], false, "system prompts start folded");
    assert!(check["systemPrompts"].as_u64().unwrap() > 0);
    assert_eq!(check["countLines"], 1, "the counts once");
    assert_eq!(check["reason"], "failed: broken", "and which step, by name");
    let labels: Vec<&str> = check["toolLabels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(labels.contains(&"calls write_file"), "{labels:?}");

    let shot = std::env::var_os("TROUPE_REPORT_SHOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| sandbox.root().join("report.png"));
    let taken = browse(
        browser,
        &page,
        &[&format!("--screenshot={}", shot.display())],
    );
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(
        size > 10_000,
        "a screenshot of the page ({size} bytes): {}",
        String::from_utf8_lossy(&taken.stderr)
    );
}

/// The attribute's text as the JSON it holds.
fn html_unescape(text: &str) -> String {
    text.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}
