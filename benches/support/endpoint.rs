//! A chat-completions endpoint on 127.0.0.1 with a fixed latency, which
//! keeps its own clock: the time from holding a whole request to having
//! written its answer, summed over the requests. What the agent waited
//! beyond that is what troupe's relay added.

use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

pub struct Endpoint {
    pub url: String,
    served: Arc<AtomicU64>,
    service_us: Arc<AtomicU64>,
}

impl Endpoint {
    /// Answers each request after `latency`: `read_file` of `<prefix><n>`
    /// for request n of the first `turns - 1` (a different file each time,
    /// or the agent would stop a loop), then `finish_task`.
    pub fn start(latency: Duration, turns: u64, path: &str) -> Endpoint {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let url = format!(
            "http://{}/v1",
            listener.local_addr().expect("local address")
        );
        let served = Arc::new(AtomicU64::new(0));
        let service_us = Arc::new(AtomicU64::new(0));
        let (count, clock, path) = (served.clone(), service_us.clone(), path.to_string());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (count, clock, path) = (count.clone(), clock.clone(), path.clone());
                std::thread::spawn(move || serve(stream, latency, turns, &path, &count, &clock));
            }
        });
        Endpoint {
            url,
            served,
            service_us,
        }
    }

    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// The endpoint's own time, in milliseconds.
    pub fn service_ms(&self) -> f64 {
        self.service_us.load(Ordering::Relaxed) as f64 / 1000.0
    }
}

fn serve(
    stream: TcpStream,
    latency: Duration,
    turns: u64,
    path: &str,
    count: &AtomicU64,
    clock: &AtomicU64,
) {
    let _ = stream.set_nodelay(true);
    let Ok(writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let mut writer = writer;
    while crate::rate_limited::read_request(&mut reader).is_some() {
        let held = Instant::now();
        let n = count.fetch_add(1, Ordering::Relaxed);
        std::thread::sleep(latency);
        let call = match n + 1 < turns {
            true => {
                json!({"id": format!("c{n}"), "type": "function", "function": {"name": "read_file", "arguments": json!({"path": format!("{path}{n}")}).to_string()}})
            }
            false => {
                json!({"id": format!("c{n}"), "type": "function", "function": {"name": "finish_task", "arguments": json!({"success": true, "summary": "done"}).to_string()}})
            }
        };
        let answer = json!({
            "id": "chatcmpl-bench", "object": "chat.completion",
            "choices": [{"index": 0, "finish_reason": "tool_calls",
                "message": {"role": "assistant", "content": null, "tool_calls": [call]}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
        })
        .to_string();
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
            answer.len()
        );
        if writer.write_all(response.as_bytes()).is_err() || writer.flush().is_err() {
            return;
        }
        let us = u64::try_from(held.elapsed().as_micros()).unwrap_or(u64::MAX);
        clock.fetch_add(us, Ordering::Relaxed);
    }
}
