//! A real OTLP/HTTP receiver for the trace tests: `otlp_receiver.py`,
//! which decodes what troupe sends with the official opentelemetry-proto
//! package and keeps each span as a JSON line.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::present;

pub struct Collector {
    child: Child,
    port: u16,
    spans: PathBuf,
    _dir: tempfile::TempDir,
}

/// The Python that imports opentelemetry-proto (`.ci/otel-up` names it
/// in `TROUPE_OTEL_PYTHON`; else `python3`), and whether it does.
fn receiver_python() -> (String, bool) {
    let python = std::env::var("TROUPE_OTEL_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let here = Command::new(&python)
        .args([
            "-c",
            "import opentelemetry.proto.collector.trace.v1.trace_service_pb2",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    (python, here)
}

impl Collector {
    /// A receiver on a free loopback port, or `None` (a visible skip, a
    /// failure under `CI=true`) where the package is missing.
    pub fn start(test: &str) -> Option<Collector> {
        let (python, here) = receiver_python();
        let what = "python3 with the opentelemetry-proto package (.ci/otel-up installs it and names it in TROUPE_OTEL_PYTHON)";
        if !present(test, what, here) {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let spans = dir.path().join("spans.jsonl");
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/common/otlp_receiver.py");
        let mut child = Command::new(python)
            .arg(script)
            .arg(&spans)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 starts");
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let port = first.trim().parse().expect("the receiver prints its port");
        Some(Collector {
            child,
            port,
            spans,
            _dir: dir,
        })
    }

    /// The base endpoint, as `--otlp-endpoint` takes it.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every span received, once `done` holds of them (troupe sends its
    /// last before it exits, so this is at once but on a slow machine).
    pub fn spans_when(&self, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let start = Instant::now();
        loop {
            let spans: Vec<Value> = std::fs::read_to_string(&self.spans)
                .unwrap_or_default()
                .lines()
                .map(|line| serde_json::from_str(line).unwrap())
                .collect();
            if done(&spans) || start.elapsed() > Duration::from_secs(20) {
                return spans;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The spans named `name`.
pub fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

/// The children of `parent`.
pub fn children<'a>(spans: &'a [Value], parent: &Value) -> Vec<&'a Value> {
    spans
        .iter()
        .filter(|s| s["parent_span_id"] == parent["span_id"])
        .collect()
}
