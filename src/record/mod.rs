//! The records a team run leaves, as types: the schema of `run.json`
//! (`run`), with what it keeps of isolation and changes (`change`), of the
//! claims check (`claims`) and of troupe's own time (`timings`). The run
//! writes them and `inspect` reads them; neither is needed to read the
//! other. Calls `chat`, `plan`, `protocol`, `timefmt`.

mod change;
mod claims;
pub mod run;
mod timings;

pub use change::{ChangeRecord, IsolationMode, IsolationRecord};
pub use claims::Claims;
pub use run::{
    AgentRecord, ApplyRecord, ApplyState, AttemptRecord, RunRecord, RunStatus, StepRecord,
    StepStatus, Totals,
};
pub use timings::AgentTimings;
