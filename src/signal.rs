//! A stop request that many waiters can watch, used on both sides of the
//! pipe: the child's cancel (a `cancel` message, the parent gone, SIGTERM)
//! and the parent's stop of a run (its deadline). The first reason given
//! wins.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::watch;

#[derive(Clone)]
pub struct StopSignal {
    tx: Arc<watch::Sender<Option<String>>>,
    rx: watch::Receiver<Option<String>>,
}

impl Default for StopSignal {
    fn default() -> Self {
        let (tx, rx) = watch::channel(None);
        StopSignal {
            tx: Arc::new(tx),
            rx,
        }
    }
}

impl StopSignal {
    pub fn trigger(&self, reason: impl Into<String>) {
        let reason = reason.into();
        self.tx.send_if_modified(|current| {
            let first = current.is_none();
            if first {
                *current = Some(reason);
            }
            first
        });
    }

    /// The reason, once stopped.
    pub fn reason(&self) -> Option<String> {
        self.rx.borrow().clone()
    }

    /// Resolves with the reason when the stop is triggered; never when it
    /// is not.
    pub async fn stopped(&self) -> String {
        let mut rx = self.rx.clone();
        let reason = match rx.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone(),
            Err(_) => None,
        };
        match reason {
            Some(reason) => reason,
            None => std::future::pending().await,
        }
    }

    /// Runs `work` unless stopped first; on a stop the work is dropped,
    /// which kills any command it was running.
    pub async fn race<T>(&self, work: impl Future<Output = T>) -> Result<T, String> {
        tokio::select! {
            biased;
            reason = self.stopped() => Err(reason),
            done = work => Ok(done),
        }
    }
}
