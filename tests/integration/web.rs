//! web_fetch and web_search (issue 45): troupe fetches and searches for
//! its agents under the run's host rules, against servers on 127.0.0.1
//! that the tests allow by name.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{Sandbox, read_json};
use crate::hostile::{files_holding, unprivileged};
use crate::team::{
    approving_reviewer, finish_team_run, planner, step, team_command, team_run, worker_rule,
};

/// One canned answer of the test server.
#[derive(Clone)]
struct Page {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    delay: Duration,
}

fn page(content_type: &str, body: impl Into<Vec<u8>>) -> Page {
    Page {
        status: 200,
        headers: vec![("Content-Type", content_type.to_string())],
        body: body.into(),
        delay: Duration::ZERO,
    }
}

fn redirect(to: &str) -> Page {
    Page {
        status: 302,
        headers: vec![("Location", to.to_string())],
        body: Vec::new(),
        delay: Duration::ZERO,
    }
}

/// A request the server read: its target, its headers by lowercase name,
/// and its body.
type Request = (String, HashMap<String, String>, Vec<u8>);

/// A server on 127.0.0.1 answering by path (query left off), counting
/// the requests for each and keeping their headers.
struct Server {
    port: u16,
    seen: Arc<Mutex<Vec<Request>>>,
}

impl Server {
    fn start(pages: Vec<(&str, Page)>) -> Server {
        let pages: HashMap<String, Page> = pages
            .into_iter()
            .map(|(p, page)| (p.to_string(), page))
            .collect();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let pages = pages.clone();
                let log = Arc::clone(&log);
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut line = String::new();
                    if reader.read_line(&mut line).is_err() {
                        return;
                    }
                    let target = line.split(' ').nth(1).unwrap_or("/").to_string();
                    let mut headers = HashMap::new();
                    loop {
                        let mut header = String::new();
                        if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                            break;
                        }
                        if let Some((name, value)) = header.trim_end().split_once(':') {
                            headers.insert(name.to_ascii_lowercase(), value.trim().to_string());
                        }
                    }
                    let length: usize = headers
                        .get("content-length")
                        .and_then(|l| l.parse().ok())
                        .unwrap_or(0);
                    let mut body = vec![0; length];
                    let _ = reader.read_exact(&mut body);
                    log.lock().unwrap().push((target.clone(), headers, body));
                    let path = target.split('?').next().unwrap_or("/");
                    let page = pages.get(path).cloned().unwrap_or(Page {
                        status: 404,
                        headers: Vec::new(),
                        body: b"not here".to_vec(),
                        delay: Duration::ZERO,
                    });
                    std::thread::sleep(page.delay);
                    let mut stream = stream;
                    let mut head = format!(
                        "HTTP/1.1 {} X\r\nContent-Length: {}\r\nConnection: close\r\n",
                        page.status,
                        page.body.len()
                    );
                    for (name, value) in &page.headers {
                        head.push_str(&format!("{name}: {value}\r\n"));
                    }
                    head.push_str("\r\n");
                    let _ = stream.write_all(head.as_bytes());
                    let _ = stream.write_all(&page.body);
                });
            }
        });
        Server { port, seen }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// How many requests asked for `path`.
    fn hits(&self, path: &str) -> usize {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|(target, ..)| target.split('?').next() == Some(path))
            .count()
    }

    fn requests(&self) -> Vec<Request> {
        self.seen.lock().unwrap().clone()
    }
}

const ARTICLE: &str = r#"<!doctype html><html><head><title>The Tides</title></head><body>
<nav><ul><li><a href="/">Home</a></li><li><a href="/shop">Shop our menu items</a></li><li><a href="/login">Log in</a></li></ul></nav>
<article><h1>The Tides</h1>
<p>The tides are the rise and fall of sea levels caused by the combined effects of the gravitational forces exerted by the Moon and the Sun and the rotation of the Earth. Tide tables can be used for any given locale to find the predicted times and amplitude.</p>
<p>The predicted times are affected by the alignment of the Sun and Moon, the phase and amplitude of the tide, and the shape of the coastline and near-shore bathymetry. See <a href="/more/tides.html">the longer account</a> for the harmonic analysis of tidal records.</p>
<p>Tidal phenomena are not limited to the oceans, but can occur in other systems whenever a gravitational field that varies in time and space is present. The solid Earth is deformed a few centimetres by the same forces.</p>
</article>
<footer>Copyright and cookie notices</footer></body></html>"#;

fn fetch(url: &str, format: Option<&str>) -> Value {
    let mut arguments = json!({"url": url});
    if let Some(format) = format {
        arguments["format"] = json!(format);
    }
    json!({"tool_calls": [{"name": "web_fetch", "arguments": arguments}]})
}

fn search(query: &str) -> Value {
    json!({"tool_calls": [{"name": "web_search", "arguments": {"query": query}}]})
}

fn finish() -> Value {
    json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "read it"}}]})
}

/// What each tool call of an agent's transcript came back with, error and
/// content together.
fn said(dir: &std::path::Path) -> Vec<String> {
    crate::hostile::outputs(&read_json(&dir.join(".subagent/conversations.json")))
}

/// A team run's arguments: no replans, one shared workspace, and
/// `extra`.
fn with<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--max-replans", "0", "--isolation", "shared"];
    args.extend_from_slice(extra);
    args
}

/// A one-step run whose worker makes `calls`, then finishes.
fn one_step(sandbox: &Sandbox, calls: Vec<Value>, extra: &[&str]) -> crate::team::TeamRun {
    let mut reply = calls;
    reply.push(finish());
    let rules = vec![
        planner(json!([step("read", &[])])),
        worker_rule("read", reply),
        approving_reviewer(),
    ];
    team_run(sandbox, rules, &with(extra))
}

#[test]
fn an_article_reaches_the_worker_as_markdown_without_its_menus_and_framed() {
    let server = Server::start(vec![("/tides", page("text/html; charset=utf-8", ARTICLE))]);
    let sandbox = Sandbox::new();
    let team = one_step(
        &sandbox,
        vec![
            fetch(&server.url("/tides"), None),
            fetch(&server.url("/tides"), Some("text")),
        ],
        &["--allow-web", &server.host()],
    );
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let worker = team.dir.join("read/worker-1");
    let outputs = said(&worker);
    let markdown = &outputs[0];
    assert!(
        markdown.contains("gravitational forces exerted by the Moon"),
        "{markdown}"
    );
    assert!(
        !markdown.contains("Shop our menu items"),
        "the menu is left out: {markdown}"
    );
    assert!(!markdown.contains("cookie notices"), "{markdown}");
    let absolute = format!("({})", server.url("/more/tides.html"));
    assert!(
        markdown.contains(&absolute),
        "links are absolute: {markdown}"
    );
    assert!(
        markdown.contains("untrusted content from the web"),
        "{markdown}"
    );
    assert!(markdown.contains(&format!(
        "troupe fetched this from {}",
        server.url("/tides")
    )));
    assert!(markdown.contains("title \"The Tides\""), "{markdown}");
    let text = &outputs[1];
    assert!(text.contains("rise and fall of sea levels"), "{text}");
    assert!(
        !text.contains("]("),
        "plain text has no Markdown links: {text}"
    );
    assert!(text.contains("from this run's cache"), "{text}");
    assert_eq!(server.hits("/tides"), 1, "fetched once for both formats");
    let result = read_json(&worker.join(".subagent/result.json"));
    assert_eq!(result["stats"]["web_pages"], 2, "{result}");
    let run_id = team.record()["run_id"].as_str().unwrap().to_string();
    let show = crate::common::cli(&sandbox, &["show", &format!("{run_id}/read/worker-1")]);
    assert!(show.stdout.contains(", 2 web pages"), "{}", show.stdout);
}

#[test]
fn redirects_are_checked_again_and_a_private_address_needs_its_host_named() {
    let server = Server::start(vec![
        ("/tides", page("text/html", ARTICLE)),
        ("/moved", redirect("/tides")),
    ]);
    // The redirect to localhost names this server's port.
    let inside = Server::start(vec![(
        "/inside",
        redirect(&format!("http://localhost:{}/tides", server.port)),
    )]);
    let sandbox = Sandbox::new();
    let team = one_step(
        &sandbox,
        vec![
            fetch(&server.url("/moved"), None),
            fetch(&inside.url("/inside"), None),
            fetch(&format!("http://localhost:{}/tides", server.port), None),
        ],
        &[
            "--allow-web",
            &server.host(),
            "--allow-web",
            &inside.host(),
            "--allow-web",
            "*",
        ],
    );
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let outputs = said(&team.dir.join("read/worker-1"));
    assert!(
        outputs[0].contains("gravitational forces"),
        "{}",
        outputs[0]
    );
    assert!(
        outputs[0].contains(&format!(
            "troupe fetched this from {}",
            server.url("/tides")
        )),
        "the page is named by where it was: {}",
        outputs[0]
    );
    for refused in &outputs[1..3] {
        assert!(
            refused.contains("troupe refused to fetch")
                && refused.contains("is 127.0.0.1, a loopback address")
                && refused.contains("only when a rule names the host exactly"),
            "{refused}"
        );
    }
    assert_eq!(
        server.hits("/tides"),
        1,
        "no request reached it through localhost"
    );
}

#[test]
fn what_troupe_will_not_read_is_refused_with_the_reason() {
    let big = "<p>".to_string() + &"x".repeat(6 * 1024 * 1024) + "</p>";
    let mut slow = page("text/plain", "late");
    slow.delay = Duration::from_secs(5);
    let server = Server::start(vec![
        (
            "/binary",
            page("application/octet-stream", vec![0u8, 1, 2, 255]),
        ),
        ("/big", page("text/plain", big)),
        ("/slow", slow),
        ("/plain", page("text/plain", "plain words")),
    ]);
    let other = Server::start(vec![("/plain", page("text/plain", "elsewhere"))]);
    let sandbox = Sandbox::new();
    let config = sandbox.root().join("troupe.toml");
    std::fs::write(&config, "[web]\ntimeout = 2\n").unwrap();
    let team = one_step(
        &sandbox,
        vec![
            fetch(&server.url("/binary"), None),
            json!({"tool_calls": [{"name": "web_fetch", "arguments": {"url": server.url("/big"), "max_bytes": 1000}}]}),
            fetch(&server.url("/slow"), None),
            fetch(&other.url("/plain"), None),
            fetch("file:///etc/passwd", None),
            fetch(&server.url("/plain"), Some("raw")),
        ],
        &[
            "--allow-web",
            &server.host(),
            "--config",
            &config.display().to_string(),
        ],
    );
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let outputs = said(&team.dir.join("read/worker-1"));
    assert!(
        outputs[0].contains("its content type is application/octet-stream: troupe reads only text, HTML, JSON and XML"),
        "{}",
        outputs[0]
    );
    assert!(
        outputs[1].contains("cut at 1000 bytes"),
        "{}",
        &outputs[1][..400]
    );
    assert!(outputs[1].len() < 2000, "the agent gets what it asked for");
    assert!(
        outputs[2].contains("no whole answer within 2 s"),
        "{}",
        outputs[2]
    );
    assert!(
        outputs[3].contains(&format!(
            "{} is not among the hosts this agent may fetch from ({})",
            other.host(),
            server.host()
        )),
        "{}",
        outputs[3]
    );
    assert_eq!(other.hits("/plain"), 0);
    assert!(outputs[4].contains("only http and https"), "{}", outputs[4]);
    assert!(outputs[5].contains("plain words"), "{}", outputs[5]);
}

#[test]
fn a_run_without_web_rules_offers_no_web_tools() {
    let sandbox = Sandbox::new();
    let team = one_step(&sandbox, vec![fetch("http://127.0.0.1:9/", None)], &[]);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let outputs = said(&team.dir.join("read/worker-1"));
    assert!(outputs[0].contains("web_fetch"), "{}", outputs[0]);
    let task = read_json(&team.dir.join("read/worker-1/.subagent/task.json"));
    assert!(task.get("web").is_none(), "{task}");
}

fn searxng() -> Server {
    let answer = json!({"results": [
        {"title": "Tides - an account", "url": "https://example.org/tides", "content": "The rise and fall of the sea."},
        {"title": "Tide tables", "url": "https://example.org/tables", "content": "Times and heights."}
    ]});
    Server::start(vec![(
        "/search",
        page("application/json", answer.to_string()),
    )])
}

#[test]
fn web_search_asks_a_searxng_endpoint_and_counts() {
    let server = searxng();
    let sandbox = Sandbox::new();
    let team = one_step(
        &sandbox,
        vec![search("why are there tides")],
        &["--search-url", &server.url("")],
    );
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let worker = team.dir.join("read/worker-1");
    let outputs = said(&worker);
    assert!(
        outputs[0].contains("1. Tides - an account\n   https://example.org/tides"),
        "{}",
        outputs[0]
    );
    assert!(outputs[0].contains("untrusted content"), "{}", outputs[0]);
    let asked = &server.requests()[0].0;
    assert!(
        asked.starts_with("/search?q=why+are+there+tides&format=json"),
        "{asked}"
    );
    let result = read_json(&worker.join(".subagent/result.json"));
    assert_eq!(result["stats"]["searches"], 1, "{result}");
    let task = read_json(&worker.join(".subagent/task.json"));
    assert_eq!(
        task["web"]["tools"],
        json!(["web_search"]),
        "no host: no web_fetch"
    );
}

/// A one-step run whose worker searches "tides" through the `kind`
/// backend at `path` of `server`, its key `key` in the variable
/// `TEST_SEARCH_KEY`; the run.
fn keyed_search(
    server: &Server,
    kind: &str,
    path: &str,
    key: &str,
) -> (Sandbox, crate::team::TeamRun) {
    let sandbox = Sandbox::new();
    let config = sandbox.root().join("troupe.toml");
    let table = format!(
        "[web.search]\nkind = \"{kind}\"\nurl = \"{}\"\napi_key_env = \"TEST_SEARCH_KEY\"\n",
        server.url(path)
    );
    std::fs::write(&config, table).unwrap();
    let rules = vec![
        planner(json!([step("read", &[])])),
        worker_rule("read", vec![search("tides"), finish()]),
        approving_reviewer(),
    ];
    let mut command = team_command(
        &sandbox,
        rules,
        &with(&["--config", &config.display().to_string()]),
    );
    command.env("TEST_SEARCH_KEY", key);
    let team = finish_team_run(&sandbox, command);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    (sandbox, team)
}

#[test]
fn a_brave_key_goes_to_brave_alone_and_never_into_a_record() {
    let key = "brave-key-5f1e9c0d7a";
    let answer = json!({"web": {"results": [{"title": "Tides", "url": "https://example.org/t", "description": "Sea levels."}]}});
    let path = "/res/v1/web/search";
    let server = Server::start(vec![(path, page("application/json", answer.to_string()))]);
    let (_sandbox, team) = keyed_search(&server, "brave", path, key);
    let outputs = said(&team.dir.join("read/worker-1"));
    assert!(
        outputs[0].contains("1. Tides\n   https://example.org/t\n   Sea levels."),
        "{}",
        outputs[0]
    );
    let (target, headers, _) = &server.requests()[0];
    assert_eq!(
        headers.get("x-subscription-token").map(String::as_str),
        Some(key)
    );
    assert!(
        target.contains("q=tides") && target.contains("count=8"),
        "{target}"
    );
    let leaked = files_holding(&team.dir, key);
    assert!(leaked.is_empty(), "the key is in {leaked:?}");
}

#[test]
fn parallel_steps_share_one_fetch_and_a_step_gets_only_its_powers_web() {
    let mut slow = page("text/html", ARTICLE);
    slow.delay = Duration::from_millis(500);
    let server = Server::start(vec![("/tides", slow)]);
    let other = Server::start(vec![("/plain", page("text/plain", "elsewhere"))]);
    let narrow = json!({"id": "narrow", "description": "read", "type": "RESEARCH", "dependencies": [], "powers": {"web": [server.host()]}});
    let rules = vec![
        planner(json!([step("a", &[]), step("b", &[]), narrow])),
        worker_rule("a", vec![fetch(&server.url("/tides"), None), finish()]),
        worker_rule("b", vec![fetch(&server.url("/tides"), None), finish()]),
        worker_rule("narrow", vec![fetch(&other.url("/plain"), None), finish()]),
        approving_reviewer(),
    ];
    let sandbox = Sandbox::new();
    let team = team_run(
        &sandbox,
        rules,
        &with(&["--allow-web", &server.host(), "--allow-web", &other.host()]),
    );
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    assert_eq!(server.hits("/tides"), 1, "two steps at once, one fetch");
    let a = said(&team.dir.join("a/worker-1")).remove(0);
    let b = said(&team.dir.join("b/worker-1")).remove(0);
    assert!(
        a.contains("gravitational") && b.contains("gravitational"),
        "{a}\n{b}"
    );
    assert!(
        a.contains("from this run's cache") != b.contains("from this run's cache"),
        "one fetched it, the other had it from the cache:\n{a}\n{b}"
    );
    let refused = said(&team.dir.join("narrow/worker-1")).remove(0);
    assert!(
        refused.contains(&format!(
            "{} is not among the hosts this agent may fetch from ({})",
            other.host(),
            server.host()
        )),
        "{refused}"
    );
    assert_eq!(other.hits("/plain"), 0);
}

#[test]
fn a_plan_whose_powers_web_the_run_does_not_cover_is_refused() {
    let sandbox = Sandbox::new();
    let narrow = json!({"id": "narrow", "description": "read", "type": "RESEARCH", "dependencies": [], "powers": {"web": ["*.example.org"]}});
    let team = team_run(
        &sandbox,
        vec![planner(json!([narrow])), approving_reviewer()],
        &with(&["--allow-web", "docs.rs"]),
    );
    assert_ne!(team.run.code, 0);
    assert!(
        team.run.stderr.contains("powers.web names *.example.org, which the run's --allow-web does not cover (it allows: docs.rs)"),
        "{}",
        team.run.stderr
    );
}

#[test]
fn web_fetch_works_the_same_as_an_ordinary_user() {
    let server = Server::start(vec![("/tides", page("text/html", ARTICLE))]);
    let sandbox = Sandbox::new();
    let rules = vec![
        planner(json!([step("read", &[])])),
        worker_rule(
            "read",
            vec![
                fetch(&server.url("/tides"), None),
                fetch("http://localhost:9/", None),
                finish(),
            ],
        ),
        approving_reviewer(),
    ];
    let command = team_command(
        &sandbox,
        rules,
        &with(&["--allow-web", &server.host(), "--allow-web", "*"]),
    );
    let mut command = unprivileged(&sandbox, command);
    command.env("HOME", sandbox.root());
    let team = finish_team_run(&sandbox, command);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let outputs = said(&team.dir.join("read/worker-1"));
    assert!(outputs[0].contains("gravitational"), "{}", outputs[0]);
    assert!(outputs[1].contains("a loopback address"), "{}", outputs[1]);
}

#[test]
fn each_fetch_and_search_is_a_client_span_of_its_agent() {
    let Some(collector) = crate::common::otlp::Collector::start(
        "each_fetch_and_search_is_a_client_span_of_its_agent",
    ) else {
        return;
    };
    let server = Server::start(vec![("/tides", page("text/html", ARTICLE))]);
    let engine = searxng();
    let sandbox = Sandbox::new();
    let rules = vec![
        planner(json!([step("read", &[])])),
        worker_rule(
            "read",
            vec![
                fetch(&server.url("/tides"), None),
                fetch(&server.url("/missing-host-rule"), None),
                search("tides"),
                finish(),
            ],
        ),
        approving_reviewer(),
    ];
    let host = format!("127.0.0.1:{}", server.port);
    let mut command = team_command(
        &sandbox,
        rules,
        &with(&["--allow-web", &host, "--search-url", &engine.url("")]),
    );
    command.args(["--otlp-endpoint", &collector.url()]);
    let team = finish_team_run(&sandbox, command);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let spans =
        collector.spans_when(|spans| !crate::common::otlp::named(spans, "troupe.run").is_empty());
    let fetches = crate::common::otlp::named(&spans, "web_fetch");
    let fetched = fetches
        .iter()
        .find(|s| s["attributes"]["http.response.status_code"] == 200)
        .unwrap_or_else(|| panic!("a fetch span with its status: {fetches:#?}"));
    assert_eq!(fetched["attributes"]["url.full"], server.url("/tides"));
    // SPAN_KIND_CLIENT, as the receiver decodes it.
    assert_eq!(fetched["kind"], 3, "{fetched:#}");
    assert!(fetched["attributes"]["troupe.web.bytes"].as_i64() > Some(1000));
    let searched = crate::common::otlp::named(&spans, "web_search");
    assert_eq!(searched.len(), 1, "{searched:#?}");
    assert_eq!(searched[0]["attributes"]["troupe.web.query"], "tides");
    let agent = spans
        .iter()
        .find(|s| s["span_id"] == fetched["parent_span_id"])
        .expect("the fetch's parent");
    assert_eq!(agent["name"], "invoke_agent worker", "{agent:#}");
    assert_eq!(agent["attributes"]["gen_ai.agent.id"], "read/worker-1");
}

#[test]
fn a_tavily_backend_is_asked_with_its_key_as_a_bearer_token() {
    let answer = json!({"results": [{"title": "Tides", "url": "https://example.org/t", "content": "Sea levels."}]});
    let server = Server::start(vec![(
        "/search",
        page("application/json", answer.to_string()),
    )]);
    let (_sandbox, team) = keyed_search(&server, "tavily", "/search", "tvly-test-key");
    let outputs = said(&team.dir.join("read/worker-1"));
    assert!(
        outputs[0].contains("1. Tides\n   https://example.org/t"),
        "{}",
        outputs[0]
    );
    let (_, headers, body) = &server.requests()[0];
    assert_eq!(
        headers.get("authorization").map(String::as_str),
        Some("Bearer tvly-test-key")
    );
    let asked: Value = serde_json::from_slice(body).unwrap();
    assert_eq!(asked, json!({"query": "tides", "max_results": 8}));
}

#[test]
fn a_search_backend_without_its_key_is_refused_before_the_run() {
    let sandbox = Sandbox::new();
    let config = sandbox.root().join("troupe.toml");
    std::fs::write(
        &config,
        "[web.search]\nkind = \"brave\"\napi_key_env = \"TEST_UNSET_KEY_41\"\n",
    )
    .unwrap();
    let mut command = team_command(
        &sandbox,
        vec![],
        &with(&["--config", &config.display().to_string()]),
    );
    command.env_remove("TEST_UNSET_KEY_41");
    let out = crate::common::run(command);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("[web.search] api_key_env names TEST_UNSET_KEY_41, which is not set"),
        "{}",
        out.stderr
    );
}
