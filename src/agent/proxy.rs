//! The agent's side of its step's connection broker: an HTTP proxy on the
//! loopback of its own network namespace, which its commands find in
//! `HTTP_PROXY` and friends, each connection handed as it is to troupe's
//! broker (`supervisor::broker`) over the Unix socket in `.subagent/`.
//! troupe decides what is reached; the agent only carries the bytes.

use std::path::PathBuf;

use tokio::net::{TcpListener, UnixStream};

/// Starts the proxy; the URL its commands are given.
pub async fn start(broker: PathBuf) -> std::io::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let broker = broker.clone();
            tokio::spawn(async move {
                if let Ok(mut upstream) = UnixStream::connect(&broker).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                }
            });
        }
    });
    Ok(url)
}
