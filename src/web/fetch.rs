//! One page fetched under an agent's rules, and the run's cache of what
//! was fetched. Each host on the way (the URL asked for and every
//! redirect) is admitted by the rules, resolved once, its addresses
//! checked, and connected to at the address checked: a name that
//! answers differently the second time reaches nothing new.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::Url;
use tokio::sync::OnceCell;

use super::rules::HostRules;
use super::{DOWNLOAD_CAP, WebError};

const MAX_REDIRECTS: usize = 5;
/// The most bytes of pages the cache holds; past it, pages are fetched
/// again when asked for.
const CACHE_CAP: usize = 64 * 1024 * 1024;

/// A response troupe read.
#[derive(Debug)]
pub struct Got {
    pub final_url: String,
    pub status: u16,
    /// Its media type, lowercase, without parameters; empty when the
    /// server named none.
    pub content_type: String,
    pub body: Vec<u8>,
    /// The body was longer than troupe reads.
    pub truncated: bool,
    /// Every host on the way, with the address connected to.
    visited: Vec<Visited>,
}

#[derive(Debug, Clone)]
struct Visited {
    host: String,
    port: u16,
    address: IpAddr,
}

/// Pages by the URL asked for, fetched once however many agents ask at
/// once; a failure is not kept.
#[derive(Debug, Default)]
pub struct Cache {
    pages: Mutex<HashMap<String, Arc<OnceCell<Arc<Got>>>>>,
    held: AtomicUsize,
}

impl Cache {
    /// The page at `url`, and whether it came from the cache. A page
    /// another agent fetched is given only when every host on its way
    /// passes these rules too.
    pub async fn get(
        &self,
        rules: &HostRules,
        url: &str,
        limit: Duration,
    ) -> Result<(Arc<Got>, bool), WebError> {
        let cell = {
            let mut pages = self.pages.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(pages.entry(url.to_string()).or_default())
        };
        let mine = AtomicBool::new(false);
        let got = cell
            .get_or_try_init(|| async {
                mine.store(true, Ordering::Relaxed);
                fetch(rules, url, limit).await.map(Arc::new)
            })
            .await?;
        let got = Arc::clone(got);
        if mine.load(Ordering::Relaxed) {
            let held = self.held.fetch_add(got.body.len(), Ordering::Relaxed) + got.body.len();
            if held > CACHE_CAP {
                self.held.fetch_sub(got.body.len(), Ordering::Relaxed);
                let mut pages = self.pages.lock().unwrap_or_else(|e| e.into_inner());
                pages.remove(url);
            }
            return Ok((got, false));
        }
        for visit in &got.visited {
            let refused = |why: String| WebError::Refused {
                url: url.to_string(),
                why,
            };
            let admitted = rules
                .admit(&visit.host, visit.port)
                .map_err(|r| refused(r.to_string()))?;
            admitted
                .check(visit.address)
                .map_err(|r| refused(r.to_string()))?;
        }
        Ok((got, true))
    }
}

/// `asked`, following redirects, within `limit`.
async fn fetch(rules: &HostRules, asked: &str, limit: Duration) -> Result<Got, WebError> {
    match tokio::time::timeout(limit, follow(rules, asked)).await {
        Ok(done) => done,
        Err(_) => Err(WebError::Failed {
            url: asked.to_string(),
            why: format!("no whole answer within {} s", limit.as_secs()),
        }),
    }
}

async fn follow(rules: &HostRules, asked: &str) -> Result<Got, WebError> {
    let mut url = Url::parse(asked)
        .map_err(|e| WebError::BadCall(format!("{asked:?} is not a URL troupe can fetch: {e}")))?;
    let mut visited = Vec::new();
    for _ in 0..=MAX_REDIRECTS {
        let at = url.to_string();
        let refused = |why: String| WebError::Refused {
            url: at.clone(),
            why,
        };
        let failed = |why: String| WebError::Failed {
            url: at.clone(),
            why,
        };
        if !matches!(url.scheme(), "http" | "https") {
            return Err(refused(format!(
                "troupe fetches only http and https URLs, not {}:",
                url.scheme()
            )));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(refused("the URL carries credentials".to_string()));
        }
        let Some(host) = url.host_str().map(str::to_string) else {
            return Err(refused("it names no host".to_string()));
        };
        let port = url.port_or_known_default().unwrap_or(80);
        let admitted = rules
            .admit(&host, port)
            .map_err(|r| refused(r.to_string()))?;
        let address = resolve(&admitted, port).await.map_err(&refused)?;
        visited.push(Visited {
            host: admitted.host.clone(),
            port,
            address,
        });
        let client = client_for(&admitted.host, SocketAddr::new(address, port))
            .map_err(|e| failed(e.to_string()))?;
        let response = client
            .get(url.clone())
            .send()
            .await
            .map_err(|e| failed(reqwest_reason(&e)))?;
        let status = response.status();
        if status.is_redirection()
            && let Some(location) = response.headers().get(reqwest::header::LOCATION)
        {
            let location = location
                .to_str()
                .map_err(|_| failed("its redirect's Location is not text".to_string()))?;
            url = url
                .join(location)
                .map_err(|e| failed(format!("its redirect to {location:?} is no URL: {e}")))?;
            continue;
        }
        let content_type = media_type(response.headers());
        if let Some(why) = unreadable(&content_type) {
            return Err(refused(why));
        }
        let (body, truncated) = read_capped(response).await.map_err(failed)?;
        if content_type.is_empty() && !textual(&body) {
            return Err(refused(
                "it names no content type and is not text: troupe reads only text, HTML, JSON and XML"
                    .to_string(),
            ));
        }
        return Ok(Got {
            final_url: url.to_string(),
            status: status.as_u16(),
            content_type,
            body,
            truncated,
            visited,
        });
    }
    Err(WebError::Refused {
        url: url.to_string(),
        why: format!("it redirects more than {MAX_REDIRECTS} times"),
    })
}

/// The address troupe connects to for the admitted host: its literal, or
/// the first its name resolves to, once every address was checked (a
/// name that resolves to a private address among public ones is
/// refused).
async fn resolve(admitted: &super::rules::Admitted, port: u16) -> Result<IpAddr, String> {
    let addresses: Vec<IpAddr> = match admitted.host.parse::<IpAddr>() {
        Ok(literal) => vec![literal],
        Err(_) => tokio::net::lookup_host((admitted.host.as_str(), port))
            .await
            .map_err(|e| format!("{} does not resolve: {e}", admitted.host))?
            .map(|found| found.ip())
            .collect(),
    };
    for address in &addresses {
        admitted.check(*address).map_err(|r| r.to_string())?;
    }
    addresses
        .first()
        .copied()
        .ok_or_else(|| format!("{} resolves to no address", admitted.host))
}

/// A client that connects `host` to `at` and nowhere else: no proxy, no
/// redirect of its own.
fn client_for(host: &str, at: SocketAddr) -> reqwest::Result<reqwest::Client> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(10))
        .user_agent(concat!(
            "troupe/",
            env!("CARGO_PKG_VERSION"),
            " (web_fetch)"
        ));
    if host.parse::<IpAddr>().is_err() {
        builder = builder.resolve(host, at);
    }
    builder.build()
}

fn reqwest_reason(e: &reqwest::Error) -> String {
    let mut why = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        why = format!("{why}: {inner}");
        source = inner.source();
    }
    why
}

fn media_type(headers: &reqwest::header::HeaderMap) -> String {
    headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// Why troupe does not read a response of `media_type`, if it does not.
fn unreadable(media_type: &str) -> Option<String> {
    let readable = media_type.is_empty()
        || media_type.starts_with("text/")
        || matches!(
            media_type,
            "application/json" | "application/xml" | "application/xhtml+xml"
        )
        || media_type.ends_with("+json")
        || media_type.ends_with("+xml");
    (!readable).then(|| {
        format!("its content type is {media_type}: troupe reads only text, HTML, JSON and XML")
    })
}

/// Whether `body` reads as text: UTF-8 with no NUL.
fn textual(body: &[u8]) -> bool {
    !body.contains(&0) && std::str::from_utf8(body).is_ok()
}

/// The body, at most `DOWNLOAD_CAP` bytes of it, and whether there was
/// more.
async fn read_capped(mut response: reqwest::Response) -> Result<(Vec<u8>, bool), String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| reqwest_reason(&e))? {
        let room = DOWNLOAD_CAP - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}
