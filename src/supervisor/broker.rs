//! The connection broker of a step whose powers name the hosts it may
//! reach: agents have no network of their own, so troupe opens the allowed
//! connections for them. It listens on a Unix socket in the agent's
//! `.subagent/` (which the agent's proxy, `agent::proxy`, forwards its
//! commands' HTTP proxy connections to) and speaks the two requests an
//! HTTP proxy gets: `CONNECT host:port` and a request with an absolute
//! `http://` URL. Any other host, or request, is answered with why and
//! kept in `.subagent/network.log`.
//!
//! What one agent may cost troupe is bounded: `MAX_OPEN` connections at
//! once (more are refused at once, so an agent cannot spend troupe's
//! descriptors and starve the other agents of the run), a request's head
//! within `HEAD_DEADLINE`, and a log of `MAX_LOG` bytes, its control
//! characters written out. An accept that fails (no descriptor left) is
//! tried again, never the end of the broker.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::protocol::BROKER_SOCKET;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

/// The most a request's head may take.
const MAX_HEAD: usize = 16 * 1024;

/// Connections one agent may hold open through troupe at once.
const MAX_OPEN: usize = 64;

/// How long a client may take to send its request's head.
const HEAD_DEADLINE: Duration = Duration::from_secs(10);

/// The most `network.log` grows to; past it one line says so, and later
/// refusals are answered but not kept.
const MAX_LOG: u64 = 256 * 1024;

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
    /// `hosts` (`host:port`), from the session of the agent whose pid
    /// `caller` will hold (its proxy makes every connection), and from no
    /// other: every agent of the run sees the socket, and `connect(2)`
    /// needs no more than that. `None` (an agent a launcher started,
    /// whose pid troupe does not know) takes any caller.
    pub fn start(
        records: &Path,
        hosts: Vec<String>,
        caller: Option<Arc<OnceLock<u32>>>,
    ) -> std::io::Result<Broker> {
        // Through the directory's descriptor: the socket's path would be
        // longer than a Unix socket address may be.
        let dir = crate::fsutil::nofollow::open_dir(records)?;
        let at = PathBuf::from(format!("/proc/self/fd/{}/{BROKER_SOCKET}", dir.as_raw_fd()));
        let _ = std::fs::remove_file(&at);
        let listener = std::os::unix::net::UnixListener::bind(&at)?;
        std::fs::set_permissions(&at, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        listener.set_nonblocking(true)?;
        let listener = UnixListener::from_std(listener)?;
        // The agent's directory: its log is reached without a link.
        let log = Arc::new(Log {
            records: crate::fsutil::RecordDir::from_fd(dir, records.to_path_buf()),
            full: AtomicBool::new(false),
        });
        let open = Arc::new(Semaphore::new(MAX_OPEN));
        let task = tokio::spawn(async move {
            loop {
                let client = match listener.accept().await {
                    Ok((client, _)) => client,
                    Err(_) => {
                        // Out of descriptors, most likely: some close
                        // in time, and the broker goes on.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let log = Arc::clone(&log);
                if let Some(stranger) = stranger(&client, caller.as_deref()) {
                    tokio::spawn(turn_away(client, "403 Forbidden", stranger, log));
                    continue;
                }
                let Ok(permit) = Arc::clone(&open).try_acquire_owned() else {
                    let why = format!(
                        "troupe refused a connection: this agent holds {MAX_OPEN} open through troupe already"
                    );
                    tokio::spawn(turn_away(client, "503 Service Unavailable", why, log));
                    continue;
                };
                let hosts = hosts.clone();
                tokio::spawn(async move {
                    let _held = permit;
                    if let Some(refused) = serve(client, &hosts).await {
                        log.note(&refused);
                    }
                });
            }
        });
        Ok(Broker { task })
    }
}

/// Why `client` is not the agent's, if it is not: its process (the
/// kernel's word, `SO_PEERCRED`) is not of the session of the agent
/// `caller` holds (each agent takes a session of its own at birth, and
/// everything it starts is in it: its namespace's init, its proxy).
fn stranger(client: &UnixStream, caller: Option<&OnceLock<u32>>) -> Option<String> {
    let expected = caller?;
    let peer = client.peer_cred().ok().and_then(|cred| cred.pid());
    let agent = expected.get().copied();
    let session = |pid: i32| nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(pid))).ok();
    match (peer, agent) {
        (Some(peer), Some(agent))
            if session(peer).is_some_and(|s| u32::try_from(s.as_raw()).ok() == Some(agent)) =>
        {
            None
        }
        (peer, _) => Some(format!(
            "troupe refused a connection from {}: this broker answers its own agent's proxy only",
            peer.map_or("an unknown process".to_string(), |pid| format!("pid {pid}"))
        )),
    }
}

/// Refuses a connection before its request is looked at, once its head
/// was read (within the deadline): a refusal written over a request not
/// read is lost to the client's reset.
async fn turn_away(mut client: UnixStream, status: &'static str, why: String, log: Arc<Log>) {
    let _ = read_head(&mut client).await;
    if let Some(refused) = refuse(&mut client, status, why).await {
        log.note(&refused);
    }
}

/// One connection: the request read, and the way opened or refused. What
/// was refused, in words.
async fn serve(mut client: UnixStream, hosts: &[String]) -> Option<String> {
    let (head, rest) = match read_head(&mut client).await {
        Ok(read) => read,
        Err(why) => return refuse(&mut client, "400 Bad Request", why.to_string()).await,
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
    if let Some(host) = request.foreign_host() {
        let why = format!(
            "troupe refused a request for {} whose Host: is {host}: a request goes to the host it names",
            request.target
        );
        return refuse(&mut client, "403 Forbidden", why).await;
    }
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
    /// For a plain HTTP request, a `Host:` that names another host than
    /// the one the request goes to (a site behind the same address that
    /// the step was not given).
    fn foreign_host(&self) -> Option<String> {
        let head = self.forward.as_ref()?;
        let host = head.lines().skip(1).find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.trim()
                .eq_ignore_ascii_case("host")
                .then(|| value.trim().to_string())
        })?;
        let name = |authority: &str| match authority.rsplit_once(':') {
            Some((name, port)) if port.parse::<u16>().is_ok() => name.to_ascii_lowercase(),
            _ => authority.to_ascii_lowercase(),
        };
        (name(&host) != name(&self.target)).then_some(host)
    }

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

/// Why a request's head could not be read, as its refusal says.
#[derive(Debug, thiserror::Error)]
enum HeadError {
    #[error("the request is not text")]
    NotText,
    #[error("the request's head is over {MAX_HEAD} bytes")]
    TooLong,
    #[error("no request within {} s", HEAD_DEADLINE.as_secs())]
    TooSlow,
    #[error("the connection closed before its request")]
    Closed,
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The request's head, up to its blank line, and what came after it.
async fn read_head(client: &mut UnixStream) -> Result<(String, Vec<u8>), HeadError> {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    let started = tokio::time::Instant::now();
    loop {
        if let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = bytes.split_off(end + 4);
            let head = String::from_utf8(bytes).map_err(|_| HeadError::NotText)?;
            return Ok((head, rest));
        }
        if bytes.len() > MAX_HEAD {
            return Err(HeadError::TooLong);
        }
        let read = tokio::time::timeout_at(started + HEAD_DEADLINE, client.read(&mut chunk))
            .await
            .map_err(|_| HeadError::TooSlow)??;
        if read == 0 {
            return Err(HeadError::Closed);
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

/// The broker's log, `network.log` in the agent's records, where the
/// agent could have planted a link: opened beneath the directory without
/// following one.
struct Log {
    records: crate::fsutil::RecordDir,
    /// It reached `MAX_LOG`, and said so.
    full: AtomicBool,
}

impl Log {
    /// One line, its control characters written out (a refused host's
    /// name is the agent's text); nothing once the log is full. A log
    /// that cannot be written loses it.
    fn note(&self, line: &str) {
        use std::io::Write;
        if self.full.load(Ordering::Relaxed) {
            return;
        }
        let Ok(mut file) = self.records.open_append("network.log") else {
            return;
        };
        if file.metadata().is_ok_and(|m| m.len() >= MAX_LOG) {
            if !self.full.swap(true, Ordering::Relaxed) {
                let _ = writeln!(
                    file,
                    "troupe: network.log reached {} KiB; later refusals were answered, not kept",
                    MAX_LOG / 1024
                );
            }
            return;
        }
        let _ = writeln!(file, "{}", crate::text::controls_written_out(line, &[]));
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

    #[test]
    fn a_host_header_that_names_another_host_is_foreign() {
        let request = |head: &str| Request::parse(head).unwrap().foreign_host();
        assert_eq!(
            request("GET http://10.0.0.1/ HTTP/1.1\r\nHost: 10.0.0.1\r\n\r\n"),
            None
        );
        assert_eq!(
            request("GET http://a.org:8080/ HTTP/1.1\r\nhost: A.org:8080\r\n\r\n"),
            None
        );
        assert_eq!(request("GET http://a.org/ HTTP/1.1\r\n\r\n"), None);
        assert_eq!(
            request("GET http://10.0.0.1/ HTTP/1.1\r\nHost: internal.example\r\n\r\n").as_deref(),
            Some("internal.example")
        );
        assert_eq!(
            request("CONNECT a.org:443 HTTP/1.1\r\nHost: b.org\r\n\r\n"),
            None
        );
    }

    #[test]
    fn a_logged_line_has_its_control_characters_written_out() {
        assert_eq!(
            crate::text::controls_written_out("refused \u{1b}]52;c;Zm9v\u{7}x\ny", &[]),
            "refused \\u{1b}]52;c;Zm9v\\u{7}x\\u{a}y"
        );
    }
}
