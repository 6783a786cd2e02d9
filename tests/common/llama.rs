//! A real llama.cpp `llama-server`, as `.ci/llama-up` provides it: the
//! shared one at `$TROUPE_LLAMA_URL`, and servers of a test's own (another
//! context size, an API key) from `$TROUPE_LLAMA_SERVER` and
//! `$TROUPE_LLAMA_MODEL`. Without them the tests say they were skipped
//! (and fail under `CI=true`, see `present`).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::present;

/// How long a server may take to load its model.
const START_BOUND: Duration = Duration::from_secs(120);

/// The shared server's base URL (`http://127.0.0.1:PORT/v1`), if there is one.
pub fn shared(test: &str) -> Option<String> {
    let url = std::env::var("TROUPE_LLAMA_URL")
        .ok()
        .filter(|u| !u.is_empty());
    present(
        test,
        "a llama.cpp server at $TROUPE_LLAMA_URL (start one with .ci/llama-up)",
        url.is_some(),
    )
    .then(|| url.unwrap_or_default())
}

/// A server of the test's own, stopped when dropped.
pub struct LlamaServer {
    pub url: String,
    pub log: PathBuf,
    child: Child,
    _dir: tempfile::TempDir,
}

impl LlamaServer {
    /// A server with `args` added to the usual ones, once it is healthy.
    pub fn start(test: &str, args: &[&str]) -> Option<Self> {
        let binary = std::env::var("TROUPE_LLAMA_SERVER").ok();
        let model = std::env::var("TROUPE_LLAMA_MODEL").ok();
        let here = binary.is_some() && model.is_some();
        if !present(
            test,
            "$TROUPE_LLAMA_SERVER and $TROUPE_LLAMA_MODEL (.ci/llama-up sets them)",
            here,
        ) {
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("server.log");
        let out = std::fs::File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        let child = Command::new(binary.unwrap())
            .args([
                "-m",
                &model.unwrap(),
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
            ])
            .args(["-t", "1", "-np", "1", "--jinja"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap();
        let server = LlamaServer {
            url: format!("http://127.0.0.1:{port}/v1"),
            log,
            child,
            _dir: dir,
        };
        server.wait_healthy(port);
        Some(server)
    }

    fn wait_healthy(&self, port: u16) {
        let started = Instant::now();
        while started.elapsed() < START_BOUND {
            if health(port) {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("llama-server did not start; its log:\n{}", self.log_text());
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `/health` answers 200.
fn health(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let request =
        format!("GET /health HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nconnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}
