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

#[derive(Default)]
struct State {
    responses: VecDeque<MockResponse>,
    requests: Vec<Recorded>,
}

pub struct MockModel {
    /// The base URL to pass as --base-url.
    pub url: String,
    state: Arc<Mutex<State>>,
}

impl MockModel {
    pub fn start(responses: Vec<MockResponse>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State {
            responses: responses.into(),
            requests: Vec::new(),
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
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let response = {
        let mut state = state.lock().unwrap();
        state.requests.push(Recorded {
            path,
            headers,
            body,
            at: Instant::now(),
        });
        state.responses.pop_front().unwrap_or_else(|| {
            MockResponse::raw(
                500,
                r#"{"error":{"message":"the mock has no more responses"}}"#,
            )
        })
    };
    std::thread::sleep(response.delay);
    let mut out = stream;
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
