//! A blocking call's progress: each model turn and tool call of its
//! agent, as the agent's supervisor says them in its log (the lines a
//! `troupe spawn` prints on stderr), sent to the host when its call
//! carries a progress token.

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::task_manager::TaskContext;
use rmcp::{Peer, RoleServer};

pub struct Progress {
    to: Option<(Peer<RoleServer>, ProgressToken)>,
    /// The task the call runs as, whose status message is the last line.
    task: Option<TaskContext>,
    /// The supervisor's log, and how much of it was read.
    log: PathBuf,
    read: u64,
    /// What begins each of the agent's lines (`agent 3 | `).
    prefix: String,
    sent: u32,
}

impl Progress {
    pub fn new(to: Option<(Peer<RoleServer>, ProgressToken)>) -> Progress {
        Progress {
            to,
            task: None,
            log: PathBuf::new(),
            read: 0,
            prefix: String::new(),
            sent: 0,
        }
    }

    /// The same, for a call run as `task`.
    pub fn for_task(mut self, task: TaskContext) -> Progress {
        self.task = Some(task);
        self
    }

    /// Follows agent `id`, whose supervisor writes `log`.
    pub fn follow(&mut self, id: &str, log: PathBuf) {
        self.prefix = format!("agent {id} | ");
        self.log = log;
    }

    /// Sends each line the supervisor completed since the last look.
    pub fn poll(&mut self) {
        if self.to.is_none() && self.task.is_none() {
            return;
        }
        let Ok(mut file) = std::fs::File::open(&self.log) else {
            return;
        };
        let mut fresh = Vec::new();
        if file.seek(SeekFrom::Start(self.read)).is_err()
            || file.take(1 << 20).read_to_end(&mut fresh).is_err()
        {
            return;
        }
        let Some(end) = fresh.iter().rposition(|&b| b == b'\n') else {
            return;
        };
        self.read += end as u64 + 1;
        for line in String::from_utf8_lossy(&fresh[..end]).lines() {
            let Some(said) = line.strip_prefix(&self.prefix) else {
                continue;
            };
            self.sent += 1;
            if let Some(task) = &self.task {
                task.set_status_message(said);
            }
            let Some((peer, token)) = &self.to else {
                continue;
            };
            let note = ProgressNotificationParam::new(token.clone(), f64::from(self.sent))
                .with_message(said.to_string());
            let peer = peer.clone();
            tokio::spawn(async move {
                let _ = peer.notify_progress(note).await;
            });
        }
    }
}
