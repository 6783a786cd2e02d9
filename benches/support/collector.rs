//! Stand-in OTLP/HTTP collectors on 127.0.0.1 for the trace export's
//! cost: one that takes every request and answers 200 at once, and one
//! that takes connections and never answers.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};

/// How a stand-in collector treats a request.
#[derive(Clone, Copy)]
pub enum Answers {
    At200,
    Never,
}

/// A collector on a free port; its base URL.
pub fn start(answers: Answers) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    let url = format!("http://{}", listener.local_addr().expect("local address"));
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            match answers {
                Answers::At200 => {
                    std::thread::spawn(move || take(stream));
                }
                Answers::Never => held.push(stream),
            }
        }
    });
    url
}

/// Reads each request whole and answers it with an empty 200.
fn take(stream: TcpStream) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line == "\r\n" {
                break;
            }
            if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let answer =
            "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n";
        if writer.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// A loopback port nothing listens on.
pub fn refusing() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    format!("http://{}", listener.local_addr().expect("local address"))
}
