//! What troupe adds on top of the model: per-agent overhead (wall and
//! CPU), scheduling efficiency against the critical path and against a
//! batch barrier, fan-out with memory, plan scale, protocol throughput,
//! the model round trip's relay, the agent's start-up, and what isolating
//! steps in checkouts costs.
//!
//! `cargo bench --bench orchestration` runs every scenario three times and
//! prints one Markdown table (min / median / max); `-- --quick` (or
//! TROUPE_BENCH_QUICK=1) runs each once, smaller, as a smoke check, and
//! `-- relay fan-out` only the scenarios named. The
//! numbers also go to target/bench/orchestration.json. The scenarios use
//! the release binaries and the scripted model, in a temporary directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[path = "support/collector.rs"]
mod collector;
#[path = "support/endpoint.rs"]
mod endpoint;
#[path = "support/mcp_host.rs"]
mod mcp_host;
#[path = "../tests/common/rate_limited.rs"]
mod rate_limited;

const TROUPE: &str = env!("CARGO_BIN_EXE_troupe");
const AGENT: &str = env!("CARGO_BIN_EXE_troupe-agent");

struct Metric {
    scenario: &'static str,
    name: String,
    unit: &'static str,
    target: &'static str,
    samples: Vec<f64>,
}

impl Metric {
    fn new(scenario: &'static str, name: &str, unit: &'static str, target: &'static str) -> Self {
        Metric {
            scenario,
            name: name.to_string(),
            unit,
            target,
            samples: Vec::new(),
        }
    }

    fn sorted(&self) -> Vec<f64> {
        let mut s = self.samples.clone();
        s.sort_by(f64::total_cmp);
        s
    }
}

struct Bench {
    quick: bool,
    runs: usize,
    metrics: Vec<Metric>,
}

impl Bench {
    fn record(
        &mut self,
        scenario: &'static str,
        name: &str,
        unit: &'static str,
        target: &'static str,
        value: f64,
    ) {
        match self
            .metrics
            .iter_mut()
            .find(|m| m.scenario == scenario && m.name == name)
        {
            Some(metric) => metric.samples.push(value),
            None => {
                let mut metric = Metric::new(scenario, name, unit, target);
                metric.samples.push(value);
                self.metrics.push(metric);
            }
        }
    }
}

/// One scenario: it records its metrics in the bench.
type Scenario = fn(&mut Bench);

fn main() {
    let quick = std::env::args().any(|a| a == "--quick")
        || std::env::var_os("TROUPE_BENCH_QUICK").is_some();
    let mut bench = Bench {
        quick,
        runs: if quick { 1 } else { 3 },
        metrics: Vec::new(),
    };
    let scenarios: [(&str, Scenario); 17] = [
        ("overhead", overhead),
        ("scheduling", scheduling),
        ("fan-out", fan_out),
        ("fan-out-isolated", fan_out_isolated),
        ("plan-scale", plan_scale),
        ("protocol", protocol),
        ("relay", relay),
        ("startup", startup),
        ("worktree", worktree_cost),
        ("large-repository", large_repository),
        ("peer", peer_dag),
        ("namespaces", namespace_set),
        ("traces", trace_export),
        ("mcp", mcp_round_trip),
        ("broker", broker),
        ("rate", rate_limit),
        ("prefix", prefix_share),
    ];
    // Words that are not options pick scenarios by name (`-- relay`).
    let picked: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    for run in 0..bench.runs {
        eprintln!("run {} of {}", run + 1, bench.runs);
        for (name, scenario) in scenarios {
            if picked.is_empty() || picked.iter().any(|p| name.contains(p.as_str())) {
                scenario(&mut bench);
            }
        }
    }
    print!("{}", table(&bench.metrics));
    write_json(&bench);
}

/// A temporary directory with the scripted model and a plan in it.
struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new(plan: &Value, rules: Vec<Value>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("plan.json"), plan.to_string()).expect("plan");
        std::fs::write(
            dir.path().join("script.json"),
            json!({"rules": rules}).to_string(),
        )
        .expect("script");
        Setup { dir }
    }

    fn ws(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    /// `troupe run --plan` on this setup; the wall time and the run record.
    fn run(&self, extra: &[&str], sample: impl FnMut(u32)) -> (Duration, Value) {
        self.run_with(extra, &[], sample)
    }

    /// `run`, with these variables set for troupe.
    fn run_with(
        &self,
        extra: &[&str],
        env: &[(&str, &str)],
        sample: impl FnMut(u32),
    ) -> (Duration, Value) {
        self.run_binary(TROUPE, extra, env, sample)
    }

    /// `run_with` of the troupe binary `troupe` (with its agent beside
    /// it): this commit's, or the baseline's.
    fn run_binary(
        &self,
        troupe: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        mut sample: impl FnMut(u32),
    ) -> (Duration, Value) {
        let started = Instant::now();
        let mut child = Command::new(troupe)
            .args(["run", "--plan"])
            .arg(self.dir.path().join("plan.json"))
            .arg("--model")
            .arg(format!(
                "scripted:{}",
                self.dir.path().join("script.json").display()
            ))
            .arg("--workspace")
            .arg(self.ws())
            .args([
                "--max-agents",
                "100000",
                "--idle-timeout",
                "0",
                "--max-replans",
                "0",
            ])
            .args(extra)
            .envs(env.iter().copied())
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start troupe");
        let pid = child.id();
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            sample(pid);
            std::thread::sleep(Duration::from_millis(5));
        };
        let wall = started.elapsed();
        assert!(
            status.success(),
            "the benchmark run failed in {}",
            self.ws().display()
        );
        let results = self.ws().join("sub_agent_results");
        let run_dir = std::fs::read_dir(&results)
            .expect("results")
            .filter_map(Result::ok)
            .find(|e| e.file_name().to_string_lossy().starts_with("run_"))
            .expect("a run directory")
            .path();
        let record = serde_json::from_str(
            &std::fs::read_to_string(run_dir.join("run.json")).expect("run.json"),
        )
        .expect("run.json parses");
        (wall, record)
    }
}

fn step(id: &str, deps: &[String]) -> Value {
    json!({"id": id, "description": format!("step {id}"), "type": "FILE_WRITE", "dependencies": deps})
}

/// A worker for `id` that waits `delay_ms` on its first answer, writes a
/// file and finishes.
/// The model's time per call in the scenarios that stand for a real
/// run (10 and 12): 200 ms, or `TROUPE_BENCH_LATENCY_MS`, which a change
/// made for speed is measured at (1000, by docs/performance.md).
fn model_latency() -> u64 {
    std::env::var("TROUPE_BENCH_LATENCY_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .unwrap_or(200)
}

fn worker(id: &str, delay_ms: u64) -> Value {
    json!({"role": "worker", "step": id, "reply": [
        {"delay_ms": delay_ms, "tool_calls": [{"name": "write_file", "arguments": {"path": format!("out/{id}.txt"), "content": id}}]},
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "written"}}]}
    ]})
}

fn reviewer() -> Value {
    json!({"role": "reviewer", "reply": [{"content": "{\"approved\": true, \"summary\": \"ok\"}"}]})
}

/// Every agent record of a run.
fn agents(record: &Value) -> Vec<Value> {
    record["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["attempts"].as_array().cloned().unwrap_or_default())
        .flat_map(|a| {
            let mut out: Vec<Value> = a["reviews"].as_array().cloned().unwrap_or_default();
            out.push(a["worker"].clone());
            out
        })
        .collect()
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let all: Vec<f64> = values.collect();
    if all.is_empty() {
        0.0
    } else {
        all.iter().sum::<f64>() / all.len() as f64
    }
}

/// Scenario 1: independent steps one at a time, no model latency.
fn overhead(bench: &mut Bench) {
    let steps = if bench.quick { 10 } else { 50 };
    let ids: Vec<String> = (0..steps).map(|i| format!("s{i}")).collect();
    let plan = json!({"summary": "overhead", "steps": ids.iter().map(|id| step(id, &[])).collect::<Vec<_>>()});
    let mut rules: Vec<Value> = ids.iter().map(|id| worker(id, 0)).collect();
    rules.push(reviewer());
    let setup = Setup::new(&plan, rules);
    let cpu_before = children_cpu();
    let (wall, record) = setup.run(&["--max-parallel", "1"], |_| {});
    let cpu = children_cpu() - cpu_before;
    let agents = agents(&record);
    let children = agents.len() as f64;
    const S: &str = "1. per-agent overhead";
    bench.record(
        S,
        "wall time per agent",
        "ms",
        "< 5 (tmpfs < 3)",
        wall.as_secs_f64() * 1000.0 / children,
    );
    bench.record(
        S,
        "CPU per agent (parent + child, user + system)",
        "ms",
        "< 3",
        cpu.as_secs_f64() * 1000.0 / children,
    );
    for (key, name) in [
        ("startup_ms", "spawn to hello"),
        ("working_ms", "hello to report"),
        ("exit_ms", "report to exit"),
        ("teardown_ms", "teardown"),
        ("transcript_ms", "transcript writes (in the child)"),
    ] {
        let value = mean(
            agents
                .iter()
                .map(|a| a["timings"][key].as_f64().unwrap_or(0.0)),
        );
        bench.record(S, name, "ms", "", value);
    }
}

/// Scenario 14: a blocking `create_sub_agent` through `troupe mcp
/// serve` against `troupe spawn` of the same agent, side by side, on a
/// model that answers at once (what the server adds is all there is).
fn mcp_round_trip(bench: &mut Bench) {
    let agents = if bench.quick { 3 } else { 20 };
    let setup = Setup::new(&json!({"summary": "mcp", "steps": []}), Vec::new());
    let script = setup.dir.path().join("agents.json");
    let finish = json!({"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "done"}}]});
    std::fs::write(
        &script,
        json!({"rules": [{"role": "worker", "reply": [finish]}]}).to_string(),
    )
    .expect("the script");
    let ws = setup.ws();
    std::fs::create_dir_all(&ws).expect("the workspace");
    let model = format!("scripted:{}", script.display());
    let (spawned, created) = mcp_host::spawn_against_create(TROUPE, &ws, &model, agents);
    const S: &str = "14. create_sub_agent over MCP";
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (spawn, create) = (median(spawned), median(created));
    bench.record(S, "troupe spawn, one agent (median)", "ms", "", spawn);
    bench.record(S, "create_sub_agent, blocking (median)", "ms", "", create);
    bench.record(
        S,
        "create_sub_agent - troupe spawn",
        "ms",
        "< 10",
        create - spawn,
    );
}

/// An HTTP server on 127.0.0.1 that answers `ok` to each connection and
/// closes it; its port.
fn ok_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    let port = listener.local_addr().expect("local address").port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                    head.push(byte[0]);
                }
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                );
            });
        }
    });
    port
}

/// Scenario 15: one step whose powers name a host on 127.0.0.1 fetches
/// it with curl through troupe's broker, one request after another, with
/// this commit's troupe and with the baseline's (`TROUPE_BENCH_BASELINE`)
/// in one run: the time per request the command measured itself.
fn broker(bench: &mut Bench) {
    let requests = if bench.quick { 50 } else { 500 };
    let port = ok_server();
    let host = format!("127.0.0.1:{port}");
    let fetch = format!(
        "s=$(date +%s%N); for i in $(seq {requests}); do curl -s -o /dev/null -f http://{host}/ || echo failed; done; e=$(date +%s%N); echo per_request_us=$(( (e - s) / {requests} / 1000 ))"
    );
    let plan = json!({"summary": "broker", "steps": [
        {"id": "fetch", "description": "fetch", "type": "COMMAND", "dependencies": [], "powers": {"network": [host]}}
    ]});
    let rules = vec![
        json!({"role": "worker", "reply": [
            {"tool_calls": [{"name": "run_command", "arguments": {"command": fetch}}]},
            {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "fetched"}}]}
        ]}),
        reviewer(),
    ];
    const S: &str = "15. broker";
    for (label, troupe) in this_and_baseline() {
        let setup = Setup::new(&plan, rules.clone());
        std::fs::create_dir_all(setup.ws()).expect("the workspace");
        let (_, record) = setup.run_binary(&troupe, &["--allow-host", &host], &[], |_| {});
        let dir = setup.ws().join("sub_agent_results");
        let run = std::fs::read_dir(&dir)
            .expect("results")
            .flatten()
            .next()
            .expect("a run")
            .path();
        let transcript =
            std::fs::read_to_string(run.join("fetch/worker-1/.subagent/conversations.json"))
                .expect("the worker's transcript");
        assert!(
            !transcript.contains("failed\\n"),
            "a request failed: {transcript}"
        );
        let per_request = transcript
            .rsplit("per_request_us=")
            .next()
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no measure in {record}"));
        bench.record(
            S,
            &format!("one request through the broker, {label}"),
            "ms",
            "",
            per_request / 1000.0,
        );
    }
}

/// Scenario 16: 50 independent steps (20 in the quick form) against an
/// endpoint on 127.0.0.1 that allows 10 requests a second, answers after
/// the model latency and sends a 429 with `Retry-After` past the limit,
/// with this commit's troupe and the baseline's in one run: the share of
/// requests that met a 429, and the makespan over what the limit alone
/// allows (every request answered with a completion, at 10 a second).
fn rate_limit(bench: &mut Bench) {
    const S: &str = "16. rate limit";
    const LIMIT: u64 = 10;
    let steps = if bench.quick { 20 } else { 50 };
    for (label, troupe) in this_and_baseline() {
        let endpoint =
            rate_limited::RateLimited::start(LIMIT, Duration::from_millis(model_latency()));
        let parallel = steps.to_string();
        let started = Instant::now();
        let success = fan_out_against(
            &troupe,
            steps,
            &endpoint.url,
            &["--isolation", "shared", "--max-parallel", &parallel],
        );
        let wall = started.elapsed();
        let counts = endpoint.counts();
        let ideal = (counts.answered - counts.limited) as f64 / LIMIT as f64;
        bench.record(
            S,
            &format!("requests that met a 429, {label}"),
            "%",
            "<= 5",
            100.0 * counts.limited as f64 / counts.answered.max(1) as f64,
        );
        bench.record(
            S,
            &format!("makespan over the limit's own time, {label}"),
            "x",
            "<= 1.2",
            wall.as_secs_f64() / ideal.max(0.001),
        );
        bench.record(
            S,
            &format!("the run succeeded, {label}"),
            "1 = yes",
            "",
            f64::from(u8::from(success)),
        );
    }
}

/// Scenario 17: 12 independent steps, isolated (`--isolation auto` in a
/// workspace that is not a git repository), `--max-parallel 4`, against
/// an endpoint on 127.0.0.1 that keeps every request, with this commit's
/// troupe and the baseline's in one run: how much of what troupe sends a
/// provider's prompt cache could serve. Each request is laid out as the
/// providers cache it, tools first and then the messages; the share is the
/// bytes of its longest common prefix with any earlier request over all
/// its bytes, over every request, and over the first request of each
/// agent alone (where only what agents share can repeat).
fn prefix_share(bench: &mut Bench) {
    const S: &str = "17. prompt prefix share";
    for (label, troupe) in this_and_baseline() {
        let endpoint = rate_limited::RateLimited::start(1000, Duration::ZERO);
        let extra = ["--isolation", "auto", "--max-parallel", "4"];
        let success = fan_out_against(&troupe, 12, &endpoint.url, &extra);
        assert!(success, "the prefix run of {label} failed");
        let requests = endpoint.requests();
        let laid_out: Vec<String> = requests
            .iter()
            .map(|r| format!("{}{}", r["tools"], r["messages"]))
            .collect();
        let repeated = |i: usize| {
            laid_out[..i]
                .iter()
                .map(|earlier| common_prefix(earlier, &laid_out[i]))
                .max()
                .unwrap_or(0)
        };
        let (mut all, mut all_repeated, mut first, mut first_repeated) = (0, 0, 0, 0);
        for (i, request) in requests.iter().enumerate() {
            let shared = repeated(i);
            all += laid_out[i].len();
            all_repeated += shared;
            if request["messages"].as_array().is_some_and(|m| m.len() == 2) {
                first += laid_out[i].len();
                first_repeated += shared;
            }
        }
        let share = |part: usize, whole: usize| 100.0 * part as f64 / whole.max(1) as f64;
        bench.record(
            S,
            &format!("bytes a cache could serve, every request, {label}"),
            "%",
            "",
            share(all_repeated, all),
        );
        bench.record(
            S,
            &format!("bytes a cache could serve, each agent's first request, {label}"),
            "%",
            "",
            share(first_repeated, first),
        );
        bench.record(
            S,
            &format!("bytes sent per request, {label}"),
            "KB",
            "",
            all as f64 / requests.len().max(1) as f64 / 1000.0,
        );
    }
}

/// This commit's troupe, and the baseline's when `TROUPE_BENCH_BASELINE`
/// names one, with their labels.
fn this_and_baseline() -> Vec<(&'static str, String)> {
    let mut binaries = vec![("this commit", TROUPE.to_string())];
    binaries.extend(baseline_troupe().map(|troupe| ("the baseline", troupe)));
    binaries
}

/// `troupe run` of `steps` independent steps, each writing one file, in a
/// workspace of its own, against the endpoint at `url`, with `extra`
/// flags; whether it succeeded.
fn fan_out_against(troupe: &str, steps: usize, url: &str, extra: &[&str]) -> bool {
    let plan = json!({"summary": "fan-out", "steps": (0..steps)
        .map(|n| json!({"id": format!("s{n}"), "description": format!("write the file of step s{n}"), "dependencies": []}))
        .collect::<Vec<_>>()});
    let dir = tempfile::tempdir().expect("a temporary directory");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).expect("the workspace");
    std::fs::write(dir.path().join("plan.json"), plan.to_string()).expect("the plan");
    Command::new(troupe)
        .args(["run", "--plan"])
        .arg(dir.path().join("plan.json"))
        .arg("--workspace")
        .arg(&ws)
        .args(["--model", "bench-model", "--base-url", url])
        .args(["--max-replans", "0", "--api-key-env", "TROUPE_BENCH_NO_KEY"])
        .args(extra)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("start troupe")
        .success()
}

/// How many bytes `a` and `b` begin with alike.
fn common_prefix(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

/// User and system time of every waited-for descendant so far: troupe,
/// and through it every agent it reaped.
fn children_cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN).expect("getrusage");
    let time = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec() as u64) + Duration::from_micros(t.tv_usec() as u64)
    };
    time(usage.user_time()) + time(usage.system_time())
}

/// A small deterministic generator, so every run draws the same DAG.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % below
    }
}

/// A layered DAG: `levels` of `width` steps, each depending on one to
/// three steps of the level before.
fn layered(levels: usize, width: usize, rng: &mut Lcg) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for level in 0..levels {
        for i in 0..width {
            let id = format!("l{level}_{i}");
            let deps = if level == 0 {
                Vec::new()
            } else {
                let mut deps: Vec<String> = (0..1 + rng.next(3))
                    .map(|_| format!("l{}_{}", level - 1, rng.next(width as u64)))
                    .collect();
                deps.sort();
                deps.dedup();
                deps
            };
            out.push((id, deps));
        }
    }
    out
}

/// Scenario 2: a random layered DAG with scripted latencies, every ready
/// step free to start.
fn scheduling(bench: &mut Bench) {
    let (levels, width) = if bench.quick { (3, 5) } else { (6, 10) };
    let mut rng = Lcg(42);
    let dag = layered(levels, width, &mut rng);
    let latency: Vec<u64> = dag.iter().map(|_| 100 + rng.next(701)).collect();
    let plan = json!({"summary": "scheduling", "steps": dag.iter().map(|(id, deps)| step(id, deps)).collect::<Vec<_>>()});
    let mut rules: Vec<Value> = dag
        .iter()
        .zip(&latency)
        .map(|((id, _), l)| worker(id, *l))
        .collect();
    rules.push(reviewer());
    let setup = Setup::new(&plan, rules);
    let slots = dag.len().to_string();
    let (wall, _) = setup.run(&["--max-parallel", &slots, "--isolation", "shared"], |_| {});
    let index = |id: &str| dag.iter().position(|(d, _)| d == id).unwrap_or(0);
    let mut finish = vec![0u64; dag.len()];
    for (i, (_, deps)) in dag.iter().enumerate() {
        let start = deps.iter().map(|d| finish[index(d)]).max().unwrap_or(0);
        finish[i] = start + latency[i];
    }
    let critical = *finish.iter().max().unwrap_or(&1) as f64;
    let barrier: u64 = (0..levels)
        .map(|level| {
            (0..width)
                .map(|i| latency[level * width + i])
                .max()
                .unwrap_or(0)
        })
        .sum();
    let makespan = wall.as_secs_f64() * 1000.0;
    const S: &str = "2. scheduling efficiency";
    bench.record(S, "makespan", "ms", "", makespan);
    bench.record(S, "critical path (scripted)", "ms", "", critical);
    bench.record(
        S,
        "makespan / critical path",
        "x",
        "<= 1.03 (tmpfs <= 1.02)",
        makespan / critical,
    );
    bench.record(
        S,
        "batch-barrier makespan (computed)",
        "ms",
        "",
        barrier as f64,
    );
    bench.record(
        S,
        "gain over a batch barrier",
        "x",
        "",
        barrier as f64 / makespan,
    );
}

/// Peak resident memory of a process, in MiB, from /proc.
fn peak_rss_mib(pid: u32) -> Option<f64> {
    status_mib(pid, "VmHWM:")
}

/// A size line of `/proc/PID/status` (`VmHWM:`, `RssAnon:`), in MiB.
fn status_mib(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Pids of live processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter(|pid| {
                    std::fs::read(format!("/proc/{pid}/cmdline"))
                        .map(|raw| {
                            String::from_utf8_lossy(&raw)
                                .replace('\0', " ")
                                .contains(marker)
                        })
                        .unwrap_or(false)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Scenario 3: many independent steps through a bounded number of slots.
/// The fan-out's steps, its slots and its ideal makespan (steps / slots x
/// latency, in ms).
fn fan_out_setup(quick: bool) -> (Setup, usize, f64) {
    let (steps, slots, latency) = if quick { (40, 10, 200) } else { (200, 50, 200) };
    let ids: Vec<String> = (0..steps).map(|i| format!("f{i}")).collect();
    let plan = json!({"summary": "fan-out", "steps": ids.iter().map(|id| step(id, &[])).collect::<Vec<_>>()});
    let mut rules: Vec<Value> = ids.iter().map(|id| worker(id, latency)).collect();
    rules.push(reviewer());
    let ideal = (steps as f64 / slots as f64).ceil() * latency as f64;
    (Setup::new(&plan, rules), slots, ideal)
}

fn fan_out(bench: &mut Bench) {
    let (setup, slots, ideal) = fan_out_setup(bench.quick);
    let marker = setup.ws().display().to_string();
    let (mut parent_peak, mut child_peak, mut child_private) = (0.0f64, 0.0f64, 0.0f64);
    let mut last_sample = Instant::now();
    let slots_arg = slots.to_string();
    let (wall, _) = setup.run(
        &["--max-parallel", &slots_arg, "--isolation", "shared"],
        |pid| {
            parent_peak = parent_peak.max(peak_rss_mib(pid).unwrap_or(0.0));
            if last_sample.elapsed() > Duration::from_millis(50) {
                last_sample = Instant::now();
                for child in processes_with(&format!("--task {marker}")) {
                    child_peak = child_peak.max(peak_rss_mib(child).unwrap_or(0.0));
                    child_private = child_private.max(status_mib(child, "RssAnon:").unwrap_or(0.0));
                }
            }
        },
    );
    let makespan = wall.as_secs_f64() * 1000.0;
    const S: &str = "3. fan-out";
    bench.record(S, "makespan", "ms", "", makespan);
    bench.record(S, "ideal (steps / slots x latency)", "ms", "", ideal);
    bench.record(
        S,
        "makespan / ideal",
        "x",
        "< 1.5 (tmpfs < 1.3)",
        makespan / ideal,
    );
    bench.record(S, "parent peak RSS", "MiB", "< 50", parent_peak);
    bench.record(S, "child peak RSS", "MiB", "< 4", child_peak);
    bench.record(
        S,
        "child private memory (RssAnon, largest seen)",
        "MiB",
        "",
        child_private,
    );
}

/// Scenario 3b: the fan-out with every step attempt in a checkout of its
/// own (`--isolation worktree`, troupe's private repository, since the
/// workspace is not one).
fn fan_out_isolated(bench: &mut Bench) {
    let (setup, slots, ideal) = fan_out_setup(bench.quick);
    let slots_arg = slots.to_string();
    let (wall, _) = setup.run(
        &["--max-parallel", &slots_arg, "--isolation", "worktree"],
        |_| {},
    );
    const S: &str = "3b. fan-out, isolated";
    bench.record(
        S,
        "makespan / ideal",
        "x",
        "",
        wall.as_secs_f64() * 1000.0 / ideal,
    );
}

/// A repository of `files` files in 100 directories, committed, at `ws`.
fn repository_of(ws: &Path, files: usize) {
    for i in 0..files {
        let sub = ws.join(format!("d{}", i / 100));
        std::fs::create_dir_all(&sub).expect("dir");
        std::fs::write(sub.join(format!("f{i}.txt")), format!("file {i}\n")).expect("file");
    }
    // Packed, as a user's repository is, and at once: left to itself the
    // commit of 10,000 loose objects starts a `gc --auto` in the
    // background, which would take a core from the run it races.
    for args in [
        &["init", "-q"][..],
        &["add", "-A"],
        &["commit", "-q", "-m", "files"],
        &["gc", "-q"],
    ] {
        let ok = Command::new("git")
            .args([
                "-c",
                "user.name=b",
                "-c",
                "user.email=b@b",
                "-c",
                "gc.auto=0",
            ])
            .args(args)
            .current_dir(ws)
            .stdout(Stdio::null())
            .status()
            .expect("git")
            .success();
        assert!(ok, "git {args:?}");
    }
    // A user's index is older than their files' last change: its entries
    // are not racy, so git trusts their stat data. One just written is,
    // and every run would hash the whole tree once; a second later
    // `status` writes it again, settled.
    std::thread::sleep(Duration::from_millis(1100));
    let ok = Command::new("git")
        .args(["status", "--porcelain"])
        .current_dir(ws)
        .stdout(Stdio::null())
        .status()
        .expect("git")
        .success();
    assert!(ok, "git status");
}

/// Scenario 8: what a step's checkout and landing cost on a repository of
/// 1,000, 10,000 and 100,000 files, in-process, through the same calls a
/// run makes, with full checkouts and with copy-on-write ones (whose
/// writes the benchmark puts in the upper layer, as the overlay would).
/// The largest gets copy-on-write ones only: the target is theirs, and
/// three full checkouts of it would take minutes.
fn worktree_cost(bench: &mut Bench) {
    let sizes: &[usize] = if bench.quick {
        &[200]
    } else {
        &[1000, 10_000, 100_000]
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for &files in sizes {
        for layered in [false, true] {
            if files > 10_000 && !layered {
                continue;
            }
            worktree_cost_of(bench, &runtime, files, layered);
        }
    }
}

fn worktree_cost_of(
    bench: &mut Bench,
    runtime: &tokio::runtime::Runtime,
    files: usize,
    layered: bool,
) {
    {
        let dir = tempfile::tempdir().expect("temp dir");
        let ws = dir.path().join("ws");
        repository_of(&ws, files);
        settle();
        let run_dir = ws.join("sub_agent_results").join("run_bench");
        std::fs::create_dir_all(&run_dir).expect("run dir");
        let ms = |since: Instant| since.elapsed().as_secs_f64() * 1000.0;
        let times = runtime.block_on(async {
            use troupe::run::isolation::Worktrees;
            let started = Instant::now();
            use troupe::run::isolation::CheckoutKind;
            let bounds = troupe::run::isolation::Bounds {
                stop: troupe::signal::StopSignal::default(),
                max_file_size: None,
                guarded: Vec::new(),
                checkouts: match layered {
                    true => CheckoutKind::Layered,
                    false => CheckoutKind::Full("the benchmark's other mode".to_string()),
                },
            };
            let record = Worktrees::prepare(&ws, &run_dir, "run_bench", &bounds.stop)
                .await
                .expect("snapshot");
            let fresh = troupe::run::isolation::Snapshot::JustTaken;
            let trees = Worktrees::open(record, &ws, &run_dir, bounds, fresh)
                .await
                .expect("branch");
            let snapshot = ms(started);
            let started = Instant::now();
            let first = trees.checkout("a", 1).await.expect("checkout");
            let first_checkout = ms(started);
            let started = Instant::now();
            let second = trees.checkout("b", 1).await.expect("checkout");
            let checkout = ms(started);
            let written = |c: &troupe::run::isolation::Checkout| match &c.layers {
                Some(layers) => layers.upper.clone(),
                None => c.dir.clone(),
            };
            let (a, b) = (written(&first), written(&second));
            std::fs::create_dir_all(a.join("d0")).expect("dir");
            std::fs::create_dir_all(b.join("d1")).expect("dir");
            std::fs::write(a.join("d0/f0.txt"), "changed by a\n").expect("write");
            std::fs::write(b.join("d1/new.txt"), "new from b\n").expect("write");
            let started = Instant::now();
            let change_a = trees.change(&first, "a", 1).await.expect("change");
            let change = ms(started);
            let change_b = trees.change(&second, "b", 1).await.expect("change");
            let started = Instant::now();
            trees.land(&change_a, "a", 1, true).await.expect("land");
            let forward = ms(started);
            let started = Instant::now();
            trees.land(&change_b, "b", 1, true).await.expect("land");
            let merge = ms(started);
            let started = Instant::now();
            trees.discard(&first).await;
            let discard = ms(started);
            trees.discard(&second).await;
            // A dependent's start: the first checkout of the head the
            // landings made, whose base nothing has written yet.
            let started = Instant::now();
            let third = trees.checkout("c", 1).await.expect("checkout");
            let landed_head = ms(started);
            trees.discard(&third).await;
            trees.finish().await;
            [
                snapshot,
                first_checkout,
                checkout,
                change,
                forward,
                merge,
                discard,
                landed_head,
            ]
        });
        const S: &str = "8. worktree cost";
        let names = [
            "snapshot (once per run)",
            "first checkout of a head",
            "checkout",
            "change (commit, diff)",
            "land, fast-forward",
            "land, three-way merge",
            "remove the checkout",
            "first checkout of a landed head",
        ];
        let kind = match layered {
            true => "copy-on-write",
            false => "full",
        };
        let target = |name: &str| match (layered, name) {
            (true, "checkout") => "< 5",
            _ => "",
        };
        for (name, value) in names.iter().zip(times) {
            let metric = format!("{name}, {kind}, {files} files");
            bench.record(S, &metric, "ms", target(name), value);
        }
    }
}

/// The troupe binary of an earlier commit, from the directory
/// `TROUPE_BENCH_BASELINE` names (its troupe-agent beside it), for the
/// scenarios that compare isolation with the commit before.
fn baseline_troupe() -> Option<String> {
    let dir = std::env::var_os("TROUPE_BENCH_BASELINE")?;
    let troupe = Path::new(&dir).join("troupe");
    assert!(
        troupe.is_file() && Path::new(&dir).join("troupe-agent").is_file(),
        "TROUPE_BENCH_BASELINE names {}, which holds no troupe and troupe-agent",
        Path::new(&dir).display()
    );
    Some(troupe.display().to_string())
}

/// How a scenario that compares isolations runs troupe: a name, the
/// binary, its `--isolation` and the variables it is given.
struct Mode {
    name: &'static str,
    troupe: String,
    isolation: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
}

/// `--isolation shared`, then `isolation` under the names `names` gives
/// it: this commit's, and the baseline's when there is one.
fn compared(names: (&'static str, &'static str), isolation: &'static [&'static str]) -> Vec<Mode> {
    let mut modes = vec![
        Mode {
            name: "shared",
            troupe: TROUPE.to_string(),
            isolation: &["--isolation", "shared"],
            env: &[],
        },
        Mode {
            name: names.0,
            troupe: TROUPE.to_string(),
            isolation,
            env: &[],
        },
    ];
    if let Some(troupe) = baseline_troupe() {
        modes.push(Mode {
            name: names.1,
            troupe,
            isolation,
            env: &[],
        });
    }
    modes
}

/// Scenario 10: 20 independent steps (`model_latency` per call, each writing
/// one file) on a repository of 10,000 files, shared, isolated with
/// copy-on-write checkouts (and with the baseline's, when
/// `TROUPE_BENCH_BASELINE` is set), and isolated with full ones, in one
/// run: the makespan and CPU of each, and the isolated ones over the
/// shared one.
fn large_repository(bench: &mut Bench) {
    let (files, steps) = if bench.quick { (1000, 5) } else { (10_000, 20) };
    let ids: Vec<String> = (0..steps).map(|i| format!("s{i}")).collect();
    let plan = json!({"summary": "large repository", "steps": ids.iter().map(|id| step(id, &[])).collect::<Vec<_>>()});
    let latency = model_latency();
    let mut rules: Vec<Value> = ids.iter().map(|id| worker(id, latency)).collect();
    rules.push(reviewer());
    let parallel = steps.to_string();
    let isolated: &[&str] = &["--isolation", "worktree", "--no-apply"];
    let mut modes = compared(("copy-on-write", "copy-on-write, baseline"), isolated);
    modes.push(Mode {
        name: "full checkouts",
        troupe: TROUPE.to_string(),
        isolation: isolated,
        env: &[("TROUPE_CHECKOUTS", "full")],
    });
    let mut measured = Vec::new();
    for mode in &modes {
        let setup = Setup::new(&plan, rules.clone());
        repository_of(&setup.ws(), files);
        settle();
        let mut args = vec!["--max-parallel", parallel.as_str()];
        args.extend(mode.isolation);
        let cpu_before = children_cpu();
        let (wall, _) = setup.run_binary(&mode.troupe, &args, mode.env, |_| {});
        let cpu = children_cpu() - cpu_before;
        measured.push((
            mode.name,
            wall.as_secs_f64() * 1000.0,
            cpu.as_secs_f64() * 1000.0,
        ));
    }
    const S: &str = "10. large repository";
    for (name, wall, cpu) in &measured {
        bench.record(
            S,
            &format!("makespan, {name}, {files} files"),
            "ms",
            "",
            *wall,
        );
        bench.record(S, &format!("CPU, {name}, {files} files"), "ms", "", *cpu);
    }
    let (_, shared_wall, shared_cpu) = measured[0];
    for (name, wall, cpu) in &measured[1..] {
        let target = |t: &'static str| if *name == "copy-on-write" { t } else { "" };
        bench.record(
            S,
            &format!("makespan {name} / shared"),
            "x",
            "",
            wall / shared_wall,
        );
        bench.record(
            S,
            &format!("CPU {name} / shared"),
            "x",
            target("<= 3"),
            cpu / shared_cpu,
        );
    }
}

/// Scenario 12: the peer DAG (6 levels of 10 steps, each on one to three
/// of the level before, `model_latency` per call, each writing one file) in
/// a workspace that is not a git repository, under the default `--isolation
/// auto` (which isolates it: ten steps run at once) and under `shared`,
/// alternating in one run, and under the baseline's `auto` when
/// `TROUPE_BENCH_BASELINE` is set: what isolating costs a run whose
/// workspace is small.
fn peer_dag(bench: &mut Bench) {
    let (levels, width) = if bench.quick { (3, 5) } else { (6, 10) };
    let dag = layered(levels, width, &mut Lcg(42));
    let plan = json!({"summary": "peer", "steps": dag.iter().map(|(id, deps)| step(id, deps)).collect::<Vec<_>>()});
    let latency = model_latency();
    let mut rules: Vec<Value> = dag.iter().map(|(id, _)| worker(id, latency)).collect();
    rules.push(reviewer());
    let slots = dag.len().to_string();
    let auto: &[&str] = &["--isolation", "auto", "--no-apply"];
    let modes = compared(("auto", "auto, baseline"), auto);
    const S: &str = "12. peer DAG";
    let mut walls = Vec::new();
    for mode in &modes {
        let setup = Setup::new(&plan, rules.clone());
        std::fs::create_dir_all(setup.ws()).expect("workspace");
        std::fs::write(setup.ws().join("README.md"), "a workspace\n").expect("file");
        settle();
        let mut args = vec!["--max-parallel", slots.as_str()];
        args.extend(mode.isolation);
        let (wall, record) = setup.run_binary(&mode.troupe, &args, mode.env, |_| {});
        let mode_ran = record["isolation_mode"].as_str().unwrap_or("?");
        let expected = match mode.name {
            "shared" => "shared",
            _ => "worktree",
        };
        assert_eq!(mode_ran, expected, "{} ran as {mode_ran}", mode.name);
        let wall = wall.as_secs_f64() * 1000.0;
        bench.record(S, &format!("makespan, {}", mode.name), "ms", "", wall);
        walls.push((mode.name, wall));
    }
    let (_, shared) = walls[0];
    for (name, wall) in &walls[1..] {
        let target = if *name == "auto" { "<= 1.02" } else { "" };
        bench.record(
            S,
            &format!("makespan {name} / shared"),
            "x",
            target,
            wall / shared,
        );
    }
}

/// Waits for the disk to take what the runs before wrote: on an ext4
/// a run that follows a full checkout's 38 s of writes otherwise pays
/// for their writeback, and the modes of one scenario are compared.
fn settle() {
    nix::unistd::sync();
    std::thread::sleep(Duration::from_secs(2));
}

/// Scenario 4: parse, validate and level a large plan, in-process.
fn plan_scale(bench: &mut Bench) {
    let steps = if bench.quick { 1000 } else { 5000 };
    let mut rng = Lcg(7);
    let dag: Vec<Value> = (0..steps)
        .map(|i| {
            let deps: Vec<String> = if i == 0 {
                Vec::new()
            } else {
                (0..rng.next(4))
                    .map(|_| format!("p{}", rng.next(i as u64)))
                    .collect()
            };
            let mut deps = deps;
            deps.sort();
            deps.dedup();
            step(&format!("p{i}"), &deps)
        })
        .collect();
    let text = json!({"summary": "scale", "steps": dag}).to_string();
    let started = Instant::now();
    let plan = troupe::plan::parse_plan(&text).expect("the generated plan is valid");
    let parsed = started.elapsed();
    let levels = troupe::plan::levels(&plan);
    let total = started.elapsed();
    assert!(!levels.is_empty());
    const S: &str = "4. plan scale";
    bench.record(
        S,
        &format!("parse + validate ({steps} steps)"),
        "ms",
        "",
        parsed.as_secs_f64() * 1000.0,
    );
    bench.record(
        S,
        "parse + validate + levels",
        "ms",
        "< 50",
        total.as_secs_f64() * 1000.0,
    );
}

/// Scenario 5: one child that reports many tool calls, as fast as a pipe.
fn protocol(bench: &mut Bench) {
    let events = if bench.quick { 20_000 } else { 100_000 };
    let dir = tempfile::tempdir().expect("temp dir");
    let mut lines = String::from(
        "{\"type\":\"hello\",\"protocol\":1,\"agent_id\":1,\"role\":\"worker\",\"pid\":1}\n",
    );
    for i in 0..events / 2 {
        lines.push_str(&format!(
            "{{\"type\":\"tool_call\",\"call_id\":\"c{i}\",\"name\":\"read_file\",\"arguments\":{{\"path\":\"src/file_{i}.rs\"}}}}\n\
             {{\"type\":\"tool_result\",\"call_id\":\"c{i}\",\"success\":true,\"summary\":\"412 lines\"}}\n"
        ));
    }
    lines.push_str("{\"type\":\"finished\",\"success\":true,\"summary\":\"done\"}\n");
    let feed = dir.path().join("events.jsonl");
    std::fs::write(&feed, lines).expect("events");
    let child = dir.path().join("chatty-agent");
    std::fs::write(&child, format!("#!/bin/sh\nexec cat {}\n", feed.display())).expect("child");
    make_executable(&child);
    std::fs::write(
        dir.path().join("script.json"),
        json!({"rules": [{"reply": [{"content": "x"}]}]}).to_string(),
    )
    .expect("script");
    let started = Instant::now();
    let status = Command::new(TROUPE)
        .args([
            "spawn",
            "--id",
            "1",
            "--summary",
            "chatty",
            "--task",
            "talk",
        ])
        .arg("--workspace")
        .arg(dir.path().join("ws"))
        .arg("--agent-bin")
        .arg(&child)
        .arg("--model")
        .arg(format!(
            "scripted:{}",
            dir.path().join("script.json").display()
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("troupe spawn");
    let wall = started.elapsed();
    assert!(status.success(), "the protocol run failed");
    const S: &str = "5. protocol throughput";
    bench.record(
        S,
        &format!("events ingested ({events})"),
        "events/s",
        "",
        events as f64 / wall.as_secs_f64(),
    );
}

/// Scenario 6: one agent's model turns through a real HTTP endpoint on
/// 127.0.0.1 with a fixed latency; what the agent waited per completion
/// beyond the endpoint's own time is the relay (child to parent, the HTTP
/// client, parent to child).
fn relay(bench: &mut Bench) {
    let turns: u64 = if bench.quick { 5 } else { 40 };
    let dir = tempfile::tempdir().expect("temp dir");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).expect("workspace");
    for n in 0..turns {
        std::fs::write(ws.join(format!("notes{n}")), "a short file\n").expect("notes");
    }
    let endpoint = endpoint::Endpoint::start(Duration::from_millis(20), turns, "notes");
    let output = Command::new(TROUPE)
        .args(["spawn", "--id", "1", "--summary", "relay", "--task", "read"])
        .arg("--workspace")
        .arg(&ws)
        .args(["--model", "bench-model", "--base-url", &endpoint.url])
        .args(["--api-key-env", "TROUPE_BENCH_KEY", "--max-turns", "1000"])
        .env("TROUPE_BENCH_KEY", "none")
        .stdin(Stdio::null())
        .output()
        .expect("troupe spawn");
    assert!(
        output.status.success(),
        "the relay run failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let result: Value = serde_json::from_slice(&output.stdout).expect("the result object");
    let timings = &result["timings"];
    let waited = timings["model_wait_ms"].as_f64().unwrap_or(0.0);
    let completions = timings["completions"].as_f64().unwrap_or(0.0);
    assert_eq!(
        completions as u64,
        endpoint.served(),
        "every request reached the endpoint once"
    );
    const S: &str = "6. model round trip";
    bench.record(
        S,
        "relay overhead per completion",
        "ms",
        "< 1",
        (waited - endpoint.service_ms()) / completions.max(1.0),
    );
}

/// Scenario 7: what starting troupe-agent costs by itself (`--version`,
/// exec to exit) beside the floor (`/bin/true`), and what it is on disk.
fn startup(bench: &mut Bench) {
    let times = if bench.quick { 20 } else { 200 };
    let clock = |program: &str, args: &[&str]| {
        let started = Instant::now();
        for _ in 0..times {
            let status = Command::new(program)
                .args(args)
                .stdout(Stdio::null())
                .status()
                .expect("start");
            assert!(status.success(), "{program} failed");
        }
        started.elapsed().as_secs_f64() * 1000.0 / times as f64
    };
    const S: &str = "7. agent start-up";
    bench.record(
        S,
        "troupe-agent --version, exec to exit",
        "ms",
        "",
        clock(AGENT, &["--version"]),
    );
    bench.record(
        S,
        "/bin/true (the floor)",
        "ms",
        "",
        clock("/bin/true", &[]),
    );
    let size = std::fs::metadata(AGENT).map(|m| m.len()).unwrap_or(0);
    bench.record(
        S,
        "troupe-agent binary",
        "MiB",
        "",
        size as f64 / (1024.0 * 1024.0),
    );
}

/// Scenario 9: what an agent's namespace set (and the rest of its
/// confinement) adds to starting it, side by side in one run: `troupe
/// spawn` of one agent that finishes at once, with the whole sandbox and
/// with `--sandbox off`, and with the troupe-agent binary that
/// `TROUPE_BENCH_BASELINE_AGENT` names (an earlier commit's) when set.
/// Spawn to `hello` is the parent's clock on the child's start, where the
/// confinement happens; CPU is troupe's and the agent's together.
fn namespace_set(bench: &mut Bench) {
    let times = if bench.quick { 10 } else { 100 };
    let dir = tempfile::tempdir().expect("temp dir");
    let script = dir.path().join("script.json");
    let rules = json!({"rules": [{"role": "worker", "reply": [
        {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "done"}}]}
    ]}]});
    std::fs::write(&script, rules.to_string()).expect("script");
    let model = format!("scripted:{}", script.display());
    let baseline = std::env::var("TROUPE_BENCH_BASELINE_AGENT").ok();
    let mut modes: Vec<(String, Vec<String>)> = vec![
        ("the whole sandbox".to_string(), Vec::new()),
        (
            "--sandbox off".to_string(),
            vec!["--sandbox".into(), "off".into()],
        ),
    ];
    if let Some(agent) = &baseline {
        modes.push((
            "the baseline agent".to_string(),
            vec!["--agent-bin".into(), agent.clone()],
        ));
    }
    const S: &str = "9. namespace set";
    let mut medians = Vec::new();
    for (label, extra) in &modes {
        let ws = dir.path().join(format!("ws-{}", medians.len()));
        std::fs::create_dir_all(&ws).expect("workspace");
        let cpu_before = children_cpu();
        let mut hellos = Vec::new();
        for id in 1..=times {
            let out = Command::new(TROUPE)
                .args([
                    "spawn",
                    "--id",
                    &id.to_string(),
                    "--summary",
                    "s",
                    "--task",
                    "t",
                ])
                .arg("--workspace")
                .arg(&ws)
                .args(["--model", &model])
                .args(extra)
                .env("TROUPE_CONFIG", "")
                .stderr(Stdio::null())
                .output()
                .expect("troupe spawn");
            let result: Value = serde_json::from_slice(&out.stdout).expect("result");
            hellos.push(result["timings"]["startup_ms"].as_f64().unwrap_or(0.0));
        }
        let cpu = (children_cpu() - cpu_before).as_secs_f64() * 1000.0 / times as f64;
        hellos.sort_by(f64::total_cmp);
        let median = hellos[hellos.len() / 2];
        bench.record(S, &format!("spawn to hello, {label}"), "ms", "", median);
        bench.record(S, &format!("CPU per agent, {label}"), "ms", "", cpu);
        medians.push((median, cpu));
    }
    bench.record(
        S,
        "added to spawn to hello by the sandbox",
        "ms",
        "< 1.5",
        medians[0].0 - medians[1].0,
    );
    bench.record(
        S,
        "added CPU per agent by the sandbox",
        "ms",
        "< 1",
        medians[0].1 - medians[1].1,
    );
    if let Some(base) = medians.get(2) {
        bench.record(
            S,
            "added to spawn to hello, against the baseline",
            "ms",
            "< 1.5",
            medians[0].0 - base.0,
        );
        bench.record(
            S,
            "added CPU per agent, against the baseline",
            "ms",
            "< 1",
            medians[0].1 - base.1,
        );
    }
}

/// What exporting a run's traces costs it: the same plan run without an
/// endpoint, and with a collector that takes everything, one whose port
/// refuses, and one that never answers (its export timeout set to 1 s),
/// one after another so each sees the same machine.
fn trace_export(bench: &mut Bench) {
    let steps = if bench.quick { 3 } else { 10 };
    let ids: Vec<String> = (0..steps).map(|i| format!("s{i}")).collect();
    let plan = json!({"summary": "traces", "steps": ids.iter().map(|id| step(id, &[])).collect::<Vec<_>>()});
    let mut rules: Vec<Value> = ids.iter().map(|id| worker(id, 0)).collect();
    rules.push(reviewer());
    let wall = |endpoint: Option<String>, env: &[(&str, &str)]| {
        let setup = Setup::new(&plan, rules.clone());
        let mut extra = vec!["--max-parallel".to_string(), "4".to_string()];
        if let Some(url) = endpoint {
            extra.extend(["--otlp-endpoint".to_string(), url]);
        }
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        setup.run_with(&extra, env, |_| {}).0.as_secs_f64() * 1000.0
    };
    let none = wall(None, &[]);
    let taken = wall(Some(collector::start(collector::Answers::At200)), &[]);
    let refused = wall(Some(collector::refusing()), &[]);
    let silent = collector::start(collector::Answers::Never);
    let stalled = wall(Some(silent), &[("OTEL_EXPORTER_OTLP_TIMEOUT", "1000")]);
    const S: &str = "11. trace export";
    bench.record(S, "run without an endpoint", "ms", "", none);
    bench.record(
        S,
        "added by a collector that takes all",
        "ms",
        "< 100",
        taken - none,
    );
    bench.record(
        S,
        "added by an unreachable collector (refused)",
        "ms",
        "< 100",
        refused - none,
    );
    bench.record(
        S,
        "added by a collector that never answers (timeout 1 s)",
        "ms",
        "<= 1100",
        stalled - none,
    );
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

fn table(metrics: &[Metric]) -> String {
    let mut out = String::from(
        "| scenario | metric | min | median | max | unit | target |\n|---|---|---:|---:|---:|---|---|\n",
    );
    for metric in metrics {
        let s = metric.sorted();
        let (min, med, max) = (s[0], s[s.len() / 2], s[s.len() - 1]);
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            metric.scenario,
            metric.name,
            fmt(min),
            fmt(med),
            fmt(max),
            metric.unit,
            metric.target
        ));
    }
    out
}

fn fmt(value: f64) -> String {
    if value >= 1000.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.3}")
    }
}

fn write_json(bench: &Bench) {
    let metrics: Vec<Value> = bench
        .metrics
        .iter()
        .map(|m| {
            let s = m.sorted();
            json!({
                "scenario": m.scenario, "metric": m.name, "unit": m.unit, "target": m.target,
                "min": s[0], "median": s[s.len() / 2], "max": s[s.len() - 1], "samples": m.samples,
            })
        })
        .collect();
    let out = json!({"quick": bench.quick, "runs": bench.runs, "metrics": metrics});
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let dir = target.join("bench");
    if std::fs::create_dir_all(&dir).is_ok() {
        let path = dir.join("orchestration.json");
        match std::fs::write(
            &path,
            serde_json::to_string_pretty(&out).unwrap_or_default(),
        ) {
            Ok(()) => eprintln!("written to {}", path.display()),
            Err(e) => eprintln!("cannot write {}: {e}", path.display()),
        }
    }
}
