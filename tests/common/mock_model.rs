//! A chat-completions endpoint on 127.0.0.1 that answers from a queue and
//! records every request, so tests can assert on what troupe sent.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub struct MockResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
    delay: Duration,
}

impl MockResponse {
    /// 200 with a chat completion whose choice carries `message`.
    pub fn completion(message: Value) -> Self {
        Self::answer(message, "stop", Some((100, 20)))
    }

    /// A completion with this `finish_reason` and `usage` (prompt,
    /// completion), or none.
    pub fn answer(message: Value, finish_reason: &str, usage: Option<(u64, u64)>) -> Self {
        let mut body = json!({
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        });
        if let Some((prompt, completion)) = usage {
            body["usage"] = json!({
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion
            });
        }
        Self::raw(200, body.to_string())
    }

    /// 200 with an assistant message that says `text`.
    pub fn text(text: &str) -> Self {
        Self::completion(json!({"role": "assistant", "content": text}))
    }

    /// A refusal in the words an endpoint uses for a prompt too long for
    /// its model (llama.cpp's).
    pub fn too_long() -> Self {
        Self::raw(
            400,
            r#"{"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it", "type": "exceed_context_size_error"}}"#,
        )
    }

    pub fn raw(status: u16, body: impl Into<String>) -> Self {
        MockResponse {
            status,
            headers: Vec::new(),
            body: body.into(),
            delay: Duration::ZERO,
        }
    }

    /// Answers only after `delay`, like a slow endpoint.
    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
}

#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Value,
    pub at: Instant,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What the upstream of a proxy answered to one forwarded request.
#[derive(Debug, Clone)]
pub struct Forwarded {
    pub status: u16,
    pub body: Value,
}

#[derive(Default)]
struct State {
    responses: VecDeque<MockResponse>,
    requests: Vec<Recorded>,
    /// Where requests go once the canned responses are used up.
    upstream: Option<String>,
    forwarded: Vec<Forwarded>,
}

pub struct MockModel {
    /// The base URL to pass as --base-url.
    pub url: String,
    state: Arc<Mutex<State>>,
}

impl MockModel {
    pub fn start(responses: Vec<MockResponse>) -> Self {
        Self::serving(responses, None)
    }

    /// A proxy to `upstream` (a base URL, `http://127.0.0.1:PORT/v1`) that
    /// answers the first requests itself, with `canned`: how a test gives a
    /// real server the turn a tiny model cannot make.
    pub fn proxy(canned: Vec<MockResponse>, upstream: &str) -> Self {
        Self::serving(canned, Some(upstream.to_string()))
    }

    fn serving(responses: Vec<MockResponse>, upstream: Option<String>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State {
            responses: responses.into(),
            upstream,
            ..State::default()
        }));
        let shared = Arc::clone(&state);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let shared = Arc::clone(&shared);
                std::thread::spawn(move || serve(stream, &shared));
            }
        });
        MockModel { url, state }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.lock().unwrap().requests.clone()
    }

    /// The upstream's answers to the requests a proxy forwarded.
    pub fn forwarded(&self) -> Vec<Forwarded> {
        self.state.lock().unwrap().forwarded.clone()
    }
}

fn serve(stream: TcpStream, state: &Mutex<State>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return;
    }
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .to_string();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    let raw = body;
    let body = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let (response, upstream) = {
        let mut state = state.lock().unwrap();
        state.requests.push(Recorded {
            path: path.clone(),
            headers: headers.clone(),
            body,
            at: Instant::now(),
        });
        match state.responses.pop_front() {
            Some(response) => (Some(response), None),
            None => (None, state.upstream.clone()),
        }
    };
    let mut out = stream;
    if let Some(upstream) = upstream {
        let (answer, forwarded) = forward(&upstream, &path, &headers, &raw);
        state.lock().unwrap().forwarded.push(forwarded);
        let _ = out.write_all(&answer);
        return;
    }
    let response = response.unwrap_or_else(|| {
        MockResponse::raw(
            500,
            r#"{"error":{"message":"the mock has no more responses"}}"#,
        )
    });
    std::thread::sleep(response.delay);
    let mut head = format!(
        "HTTP/1.1 {} Mock\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        response.status,
        response.body.len()
    );
    for (name, value) in &response.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let _ = out.write_all(head.as_bytes());
    let _ = out.write_all(response.body.as_bytes());
    let _ = out.flush();
}

/// Sends the request on to `upstream` as it came, and returns the
/// upstream's whole answer, and what it said.
fn forward(
    upstream: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> (Vec<u8>, Forwarded) {
    let host = upstream
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap();
    let mut stream = TcpStream::connect(host).expect("connect to the upstream");
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        if !["host", "connection", "content-length"].contains(&name.as_str()) {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let json = text
        .split_once("\r\n\r\n")
        .and_then(|(_, body)| serde_json::from_str(body).ok())
        .unwrap_or(Value::Null);
    (answer, Forwarded { status, body: json })
}
