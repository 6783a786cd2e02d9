//! The child's cancel signal: set once by a `cancel` message, the parent
//! closing the pipe, or SIGTERM, and awaited at every point where the agent
//! waits for something.

use std::future::Future;

use tokio::sync::watch;

#[derive(Clone)]
pub struct Cancel {
    tx: std::sync::Arc<watch::Sender<Option<String>>>,
    rx: watch::Receiver<Option<String>>,
}

impl Cancel {
    pub fn new() -> Self {
        let (tx, rx) = watch::channel(None);
        Cancel {
            tx: std::sync::Arc::new(tx),
            rx,
        }
    }

    /// Cancels with `reason`; the first reason wins.
    pub fn trigger(&self, reason: impl Into<String>) {
        let reason = reason.into();
        self.tx.send_if_modified(|current| {
            if current.is_none() {
                *current = Some(reason);
                true
            } else {
                false
            }
        });
    }

    pub async fn cancelled(&self) -> String {
        let mut rx = self.rx.clone();
        match rx.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone().unwrap_or_default(),
            Err(_) => std::future::pending().await,
        }
    }

    /// Runs `work` unless cancelled first; the work is dropped on cancel,
    /// which kills any command it was running.
    pub async fn race<T>(&self, work: impl Future<Output = T>) -> Result<T, String> {
        tokio::select! {
            biased;
            reason = self.cancelled() => Err(reason),
            done = work => Ok(done),
        }
    }
}
