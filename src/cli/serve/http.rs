//! The streamable HTTP transport: rmcp's session service on hyper, on a
//! loopback address, behind a bearer token checked before a request
//! reaches a session.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use super::Server;
use super::handler::Handler;

pub async fn serve(
    server: Arc<Server>,
    address: SocketAddr,
    token: String,
    idle_seconds: u64,
) -> anyhow::Result<ExitCode> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {address}: {e}"))?;
    let bound = listener.local_addr().unwrap_or(address);
    let mut session_config = SessionConfig::default();
    session_config.keep_alive = Some(Duration::from_secs(idle_seconds.max(1)));
    let mut sessions = LocalSessionManager::default();
    sessions.session_config = session_config;
    let stop = tokio_util::sync::CancellationToken::new();
    let config = StreamableHttpServerConfig::default()
        .with_sse_keep_alive(Some(Duration::from_secs(15)))
        .with_cancellation_token(stop.child_token());
    let made = server.clone();
    let service = StreamableHttpService::new(
        move || Ok(Handler::new(made.clone())),
        Arc::new(sessions),
        config,
    );
    crate::tell!(
        "troupe: serving MCP over streamable HTTP at http://{bound}/mcp (bearer token required)"
    );
    let interrupts = crate::supervisor::interrupt::Interrupts::new();
    let signal = crate::signal::StopSignal::default();
    interrupts
        .watch(signal.clone())
        .map_err(|e| anyhow::anyhow!("cannot watch for signals: {e}"))?;
    let token: Arc<str> = token.into();
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    crate::tell!("troupe: cannot accept a connection: {e}");
                    continue;
                }
            },
            _ = signal.stopped() => break,
        };
        let service = service.clone();
        let token = token.clone();
        tokio::spawn(async move {
            let answer = hyper::service::service_fn(move |request: Request<Incoming>| {
                let service = service.clone();
                let token = token.clone();
                async move {
                    if !authorized(&request, &token) {
                        return Ok::<_, Infallible>(unauthorized());
                    }
                    Ok(service.handle(request).await)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), answer)
                .await;
        });
    }
    // Every session ends; each handler stops what its host left running.
    stop.cancel();
    tokio::time::sleep(Duration::from_millis(500)).await;
    Ok(ExitCode::SUCCESS)
}

/// Whether the request carries the server's bearer token, compared in
/// time that does not depend on where it differs.
fn authorized(request: &Request<Incoming>, token: &str) -> bool {
    let given = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or_default();
    given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |differ, (a, b)| differ | (a ^ b))
            == 0
}

fn unauthorized() -> Response<BoxBody<Bytes, Infallible>> {
    let mut response = Response::new(
        Full::new(Bytes::from_static(
            b"troupe: this MCP server needs the header Authorization: Bearer <token> (the token it printed, or the one in its --token-env)\n",
        ))
        .boxed(),
    );
    *response.status_mut() = http::StatusCode::UNAUTHORIZED;
    response.headers_mut().insert(
        http::header::WWW_AUTHENTICATE,
        http::HeaderValue::from_static("Bearer"),
    );
    response
}
