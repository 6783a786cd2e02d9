//! The child's stdout: the one writer of protocol lines.
//!
//! Everything the child tells its parent goes through this channel to one
//! task, so lines never interleave, and `flush` lets the child wait until
//! its last words are out before it exits.

use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot};

use crate::protocol::{FromChild, encode_line};

enum Out {
    Line(String),
    Flush(oneshot::Sender<()>),
}

#[derive(Clone)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<Out>,
}

impl Outbox {
    /// Starts the writer on the process's stdout.
    pub fn stdout() -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<Out>();
        tokio::spawn(async move {
            let mut stdout = super::stdio::output();
            let mut broken = false;
            while let Some(out) = rx.recv().await {
                match out {
                    Out::Line(line) if !broken => {
                        broken = stdout.write_all(line.as_bytes()).await.is_err()
                            || stdout.flush().await.is_err();
                    }
                    Out::Line(_) => {}
                    Out::Flush(done) => {
                        let _ = done.send(());
                    }
                }
            }
        });
        Outbox { tx }
    }

    /// Queues a message; a parent that stopped reading is not an error
    /// here, the child finds out from stdin.
    pub fn send(&self, message: &FromChild) {
        let _ = self.tx.send(Out::Line(encode_line(message)));
    }

    /// Waits until every message queued so far is written.
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Out::Flush(done)).is_ok() {
            let _ = wait.await;
        }
    }
}
