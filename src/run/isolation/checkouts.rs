//! Which checkout an isolated attempt gets: a copy-on-write overlay where
//! the agents' sandbox can mount one (what the agent binary's own probe
//! says, asked once per run), else a full checkout of the repository,
//! with the reason said in the run's `isolation` event.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OnceCell;

use crate::protocol::{SandboxMode, SandboxReport};
use crate::supervisor::spawn::AgentSettings;

/// The variable that asks for full checkouts whatever the probe says.
const CHECKOUTS_ENV: &str = "TROUPE_CHECKOUTS";

/// How long the probe may take before full checkouts are used.
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckoutKind {
    /// An overlay on a shared read-only tree of the attempt's base.
    Layered,
    /// A whole checkout per attempt, for this reason.
    Full(String),
}

impl CheckoutKind {
    /// What the run's `isolation` event says of it.
    pub fn note(&self) -> String {
        match self {
            CheckoutKind::Layered => "copy-on-write checkouts".to_string(),
            CheckoutKind::Full(why) => format!(
                "full checkouts ({why}): each attempt writes the whole tree and the change is found by scanning it"
            ),
        }
    }
}

/// The run's choice, made when an isolated run first needs it.
#[derive(Debug, Clone)]
pub struct Checkouts {
    chosen: Arc<OnceCell<CheckoutKind>>,
    /// Full checkouts without asking, and why.
    settled: Option<String>,
    program: PathBuf,
}

impl Checkouts {
    pub fn new(settings: &AgentSettings) -> Checkouts {
        let asked_full = std::env::var(CHECKOUTS_ENV).is_ok_and(|v| v == "full");
        let settled = if asked_full {
            Some(format!("{CHECKOUTS_ENV}=full"))
        } else if settings.sandbox.mode == SandboxMode::Off {
            Some("--sandbox off gives the agents no mount namespace to mount one in".to_string())
        } else if settings.launcher.is_some() {
            Some("agents placed by --launcher may run where the run directory cannot be mounted from".to_string())
        } else if !settings.program_takes_session {
            Some("the agent program is not troupe-agent".to_string())
        } else {
            None
        };
        Checkouts {
            chosen: Arc::new(OnceCell::new()),
            settled,
            program: settings.program.clone(),
        }
    }

    /// Full checkouts, for this reason (tests, and runs without agents).
    pub fn full(why: &str) -> Checkouts {
        Checkouts {
            chosen: Arc::new(OnceCell::new()),
            settled: Some(why.to_string()),
            program: PathBuf::new(),
        }
    }

    pub async fn kind(&self) -> CheckoutKind {
        self.chosen
            .get_or_init(|| async {
                match &self.settled {
                    Some(why) => CheckoutKind::Full(why.clone()),
                    None => probe(&self.program).await,
                }
            })
            .await
            .clone()
    }
}

/// What `troupe-agent --probe-sandbox` says of overlays.
async fn probe(program: &PathBuf) -> CheckoutKind {
    let mut command = crate::process::Spawn::agent(&[]).command_for(program);
    command
        .arg("--probe-sandbox")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let ran = tokio::time::timeout(PROBE_TIMEOUT, command.output()).await;
    let out = match ran {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => return CheckoutKind::Full(format!("cannot probe the sandbox: {e}")),
        Err(_) => {
            return CheckoutKind::Full(format!(
                "the sandbox's probe did not answer within {} s",
                PROBE_TIMEOUT.as_secs()
            ));
        }
    };
    let report = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|line| serde_json::from_str::<SandboxReport>(line).ok());
    match report {
        Some(report) if report.overlay => CheckoutKind::Layered,
        Some(report) => CheckoutKind::Full(
            report
                .note
                .split("; ")
                .find(|n| n.starts_with("no copy-on-write"))
                .unwrap_or("the sandbox cannot mount an overlay here")
                .to_string(),
        ),
        None => CheckoutKind::Full("the sandbox's probe gave no report".to_string()),
    }
}
