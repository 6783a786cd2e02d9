//! The connection broker of a step whose powers name the hosts it may
//! reach: agents have no network of their own, so troupe opens the allowed
//! connections for them. It listens on a Unix socket in the agent's
//! `.subagent/` (which the agent's proxy, `agent::proxy`, forwards its
//! commands' HTTP proxy connections to) and speaks the two requests an
//! HTTP proxy gets: `CONNECT host:port` and a request with an absolute
//! `http://` URL. Any other host, or request, is answered with why and
//! kept in `.subagent/network.log`.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::task::JoinHandle;

/// The socket's name in the agent's `.subagent/`.
pub const SOCKET: &str = "network.sock";

/// The most a request's head may take.
const MAX_HEAD: usize = 16 * 1024;

/// A running broker; it stops when dropped.
pub struct Broker {
    task: JoinHandle<()>,
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Broker {
    /// Listens in `records` (the agent's `.subagent/`) for connections to
    /// `hosts` (`host:port`).
    pub fn start(records: &Path, hosts: Vec<String>) -> std::io::Result<Broker> {
        // Through the directory's descriptor: the socket's path would be
        // longer than a Unix socket address may be.
        let dir = crate::fsutil::nofollow::open_dir(records)?;
        let at = PathBuf::from(format!("/proc/self/fd/{}/{SOCKET}", dir.as_raw_fd()));
        let _ = std::fs::remove_file(&at);
        let listener = std::os::unix::net::UnixListener::bind(&at)?;
        std::fs::set_permissions(&at, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        listener.set_nonblocking(true)?;
        let listener = UnixListener::from_std(listener)?;
        // The agent's directory: its log is reached without a link.
        let log = std::sync::Arc::new(crate::fsutil::RecordDir::from_fd(
            dir,
            records.to_path_buf(),
        ));
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (hosts, log) = (hosts.clone(), std::sync::Arc::clone(&log));
                tokio::spawn(async move {
                    if let Some(refused) = serve(client, &hosts).await {
                        note(&log, &refused);
                    }
                });
            }
        });
        Ok(Broker { task })
    }
}

/// One connection: the request read, and the way opened or refused. What
/// was refused, in words.
async fn serve(mut client: UnixStream, hosts: &[String]) -> Option<String> {
    let (head, rest) = match read_head(&mut client).await {
        Ok(read) => read,
        Err(why) => return refuse(&mut client, "400 Bad Request", why).await,
    };
    let Some(request) = Request::parse(&head) else {
        let why =
            "troupe's proxy takes CONNECT host:port, or a request for an absolute http:// URL"
                .to_string();
        return refuse(&mut client, "400 Bad Request", why).await;
    };
    let allowed = hosts
        .iter()
        .any(|h| h.eq_ignore_ascii_case(&request.target));
    if !allowed {
        let why = format!(
            "troupe refused {}: it is not among this step's powers.network ({})",
            request.target,
            hosts.join(", ")
        );
        return refuse(&mut client, "403 Forbidden", why).await;
    }
    let upstream =
        tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(&request.target)).await;
    let mut upstream = match upstream {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            let why = format!("troupe could not reach {}: {e}", request.target);
            return refuse(&mut client, "502 Bad Gateway", why).await;
        }
        Err(_) => {
            let why = format!("troupe could not reach {} within 10 s", request.target);
            return refuse(&mut client, "504 Gateway Timeout", why).await;
        }
    };
    let opened = match &request.forward {
        None => {
            client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
        }
        Some(head) => match upstream.write_all(head.as_bytes()).await {
            Ok(()) => upstream.write_all(&rest).await,
            Err(e) => Err(e),
        },
    };
    if opened.is_ok() {
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    }
    None
}

/// What a request asks for: the `host:port` to reach, and for a plain
/// HTTP request, its head as the origin server takes it.
#[derive(Debug, PartialEq, Eq)]
struct Request {
    target: String,
    forward: Option<String>,
}

impl Request {
    fn parse(head: &str) -> Option<Request> {
        let (line, rest) = head.split_once("\r\n")?;
        let mut words = line.split(' ');
        let (method, target, version) = (words.next()?, words.next()?, words.next()?);
        if words.next().is_some() || !version.starts_with("HTTP/") {
            return None;
        }
        if method == "CONNECT" {
            let (host, port) = target.rsplit_once(':')?;
            port.parse::<u16>().ok()?;
            return Some(Request {
                target: format!("{host}:{port}"),
                forward: None,
            });
        }
        let after = target.strip_prefix("http://")?;
        let (authority, path) = match after.find('/') {
            Some(at) => (&after[..at], &after[at..]),
            None => (after, "/"),
        };
        let target = match authority.rsplit_once(':') {
            Some((_, port)) if port.parse::<u16>().is_ok() => authority.to_string(),
            _ => format!("{authority}:80"),
        };
        Some(Request {
            target,
            forward: Some(format!("{method} {path} {version}\r\n{rest}")),
        })
    }
}

/// The request's head, up to its blank line, and what came after it.
async fn read_head(client: &mut UnixStream) -> Result<(String, Vec<u8>), String> {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = bytes.split_off(end + 4);
            let head =
                String::from_utf8(bytes).map_err(|_| "the request is not text".to_string())?;
            return Ok((head, rest));
        }
        if bytes.len() > MAX_HEAD {
            return Err(format!("the request's head is over {MAX_HEAD} bytes"));
        }
        let read = tokio::time::timeout(Duration::from_secs(30), client.read(&mut chunk))
            .await
            .map_err(|_| "no request within 30 s".to_string())?
            .map_err(|e| e.to_string())?;
        if read == 0 {
            return Err("the connection closed before its request".to_string());
        }
        bytes.extend_from_slice(&chunk[..read]);
    }
}

async fn refuse(client: &mut UnixStream, status: &str, why: String) -> Option<String> {
    let answer = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{why}\n",
        why.len() + 1
    );
    let _ = client.write_all(answer.as_bytes()).await;
    Some(why)
}

/// One line of the broker's log, `network.log` in the agent's records,
/// where the agent could have planted a link: opened beneath the
/// directory without following one. A log that cannot be written loses it.
fn note(records: &crate::fsutil::RecordDir, line: &str) {
    use std::io::Write;
    if let Ok(mut file) = records.open_append("network.log") {
        let _ = writeln!(file, "{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_request_names_the_host_it_asks_for() {
        let connect = Request::parse("CONNECT example.org:443 HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(connect.unwrap().target, "example.org:443");
        let plain =
            Request::parse("GET http://127.0.0.1:8080/a?b HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                .unwrap();
        assert_eq!(plain.target, "127.0.0.1:8080");
        assert_eq!(
            plain.forward.unwrap(),
            "GET /a?b HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        );
        let default_port = Request::parse("GET http://example.org HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!(default_port.target, "example.org:80");
        assert!(Request::parse("GET /local HTTP/1.1\r\n\r\n").is_none());
        assert!(Request::parse("GET https://example.org/ HTTP/1.1\r\n\r\n").is_none());
    }
}
