//! The child's stdin and stdout as the runtime reads and writes them.
//!
//! Tokio's own stdin and stdout hand every read and write to a blocking
//! thread, because a terminal or a file cannot be polled. The parent gives
//! its child pipes, which can: registered with the reactor they cost no
//! thread and no hand-over per line. Anything else (a terminal, a file, a
//! test's redirect) still goes the blocking way.

use std::os::fd::AsFd;
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::unix::pipe;

pub type Input = Pin<Box<dyn AsyncRead + Send>>;
pub type Output = Pin<Box<dyn AsyncWrite + Send>>;

/// Stdin, polled when it is a pipe. Must be called inside the runtime.
pub fn input() -> Input {
    let piped = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .and_then(pipe::Receiver::from_owned_fd);
    match piped {
        Ok(receiver) => Box::pin(receiver),
        Err(_) => Box::pin(tokio::io::stdin()),
    }
}

/// Stdout, polled when it is a pipe. Must be called inside the runtime.
pub fn output() -> Output {
    let piped = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .and_then(pipe::Sender::from_owned_fd);
    match piped {
        Ok(sender) => Box::pin(sender),
        Err(_) => Box::pin(tokio::io::stdout()),
    }
}
