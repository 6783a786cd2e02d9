//! A chat-completions endpoint on 127.0.0.1 that enforces a rate limit as
//! providers do: `limit` requests per one-second window, a 429 with
//! `Retry-After` past it, and the `x-ratelimit-*` headers of OpenAI on
//! every answer. It answers any number of agents without a script: a
//! worker writes one file named after its task, then finishes; a reviewer
//! approves. It counts what it answered, by status, and keeps the
//! requests it answered.
//!
//! The benches use it too (`benches/orchestration.rs` includes this file).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub struct RateLimited {
    /// The base URL to pass as --base-url.
    pub url: String,
    counts: Arc<Mutex<Counts>>,
    requests: Arc<Mutex<Vec<Value>>>,
}

/// What the endpoint answered.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub answered: u64,
    pub limited: u64,
}

/// What one connection's thread shares with the others.
struct Seen {
    window: Arc<Mutex<Window>>,
    counts: Arc<Mutex<Counts>>,
    requests: Arc<Mutex<Vec<Value>>>,
}

struct Window {
    started: Instant,
    limit: u64,
    /// The window each request fell in, and how many it has had.
    current: (u64, u64),
}

impl RateLimited {
    /// `limit` requests a second; each answer after `latency`.
    pub fn start(limit: u64, latency: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let url = format!(
            "http://{}/v1",
            listener.local_addr().expect("local address")
        );
        let counts = Arc::new(Mutex::new(Counts::default()));
        let window = Arc::new(Mutex::new(Window {
            started: Instant::now(),
            limit,
            current: (0, 0),
        }));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let shared = (Arc::clone(&counts), Arc::clone(&requests));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let seen = Seen {
                    window: Arc::clone(&window),
                    counts: Arc::clone(&shared.0),
                    requests: Arc::clone(&shared.1),
                };
                std::thread::spawn(move || serve(stream, latency, &seen));
            }
        });
        RateLimited {
            url,
            counts,
            requests,
        }
    }

    /// The requests answered with a completion, in the order they came.
    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().expect("the requests").clone()
    }

    pub fn counts(&self) -> Counts {
        *self.counts.lock().expect("the counts")
    }
}

/// Whether a request now is within the limit, and the headers that say
/// where the window stands.
fn admit(window: &Mutex<Window>) -> (bool, Vec<(String, String)>) {
    let mut window = window.lock().expect("the window");
    let elapsed = window.started.elapsed();
    let index = elapsed.as_secs();
    if window.current.0 != index {
        window.current = (index, 0);
    }
    let admitted = window.current.1 < window.limit;
    if admitted {
        window.current.1 += 1;
    }
    let left = Duration::from_secs(index + 1).saturating_sub(elapsed);
    let mut headers = vec![
        (
            "x-ratelimit-limit-requests".into(),
            window.limit.to_string(),
        ),
        (
            "x-ratelimit-remaining-requests".into(),
            (window.limit - window.current.1).to_string(),
        ),
        (
            "x-ratelimit-reset-requests".into(),
            format!("{}ms", left.as_millis().max(1)),
        ),
    ];
    if !admitted {
        headers.push(("retry-after".into(), left.as_secs_f64().ceil().to_string()));
    }
    (admitted, headers)
}

fn serve(stream: TcpStream, latency: Duration, seen: &Seen) {
    let Ok(mut out) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    while let Some(body) = read_request(&mut reader) {
        let (admitted, headers) = admit(&seen.window);
        let (status, answer) = match admitted {
            true => {
                std::thread::sleep(latency);
                let request = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let answer = completion(&request).to_string();
                seen.requests.lock().expect("the requests").push(request);
                (200, answer)
            }
            false => (
                429,
                r#"{"error": {"message": "Rate limit reached for requests"}}"#.to_string(),
            ),
        };
        {
            let mut counts = seen.counts.lock().expect("the counts");
            counts.answered += 1;
            counts.limited += u64::from(!admitted);
        }
        let mut head = format!(
            "HTTP/1.1 {status} Mock\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
            answer.len()
        );
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        if out.write_all(head.as_bytes()).is_err() || out.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// The body of the next request on a kept-alive connection, `None` once
/// it closes.
pub fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let mut length = 0usize;
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return None,
            Ok(_) if line == "\r\n" => break,
            Ok(_) => {}
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(body)
}

/// The answer to `request`: a worker (offered `finish_task`) writes a
/// file named after its task and then finishes; anyone else approves.
fn completion(request: &Value) -> Value {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let worker = request["tools"]
        .as_array()
        .is_some_and(|tools| tools.iter().any(|t| t["function"]["name"] == "finish_task"));
    let call = |name: &str, arguments: Value| {
        json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": format!("call-{}", messages.len()), "type": "function",
            "function": {"name": name, "arguments": arguments.to_string()}}]})
    };
    let message = if !worker {
        let verdict = json!({"approved": true, "summary": "checked", "issues": [],
                             "suggestions": [], "retry": false});
        json!({"role": "assistant", "content": verdict.to_string()})
    } else if messages.iter().any(|m| m["role"] == "tool") {
        call(
            "finish_task",
            json!({"success": true, "summary": "wrote it"}),
        )
    } else {
        let task = messages
            .iter()
            .filter(|m| m["role"] == "user")
            .map(|m| m["content"].to_string())
            .collect::<String>();
        let name = format!("out-{:016x}.txt", fnv(&task));
        call("write_file", json!({"path": name, "content": "done"}))
    };
    json!({
        "id": "chatcmpl-rate", "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    })
}

fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}
