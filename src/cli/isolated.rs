//! `troupe apply` and `troupe clean`: what is left to do with a run that
//! kept its workers in checkouts (`--isolation worktree`), and the end of
//! `troupe run` for such a run: its result applied, or where it is.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use super::UsageError;
use super::agents::Place;
use super::apply::{Applied, ApplyError, Meanwhile, apply};
use crate::inspect::{Target, load_run, resolve};
use crate::record::IsolationRecord;
use crate::record::{ApplyRecord, ApplyState, RunRecord, RunStatus, StepRecord, StepStatus};
use crate::run::RunEvent;
use crate::telemetry::Span;
use crate::text::count;

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  troupe apply last\n  troupe apply run_20261201T101500Z_3f2a --workspace ./repo"
)]
pub struct ApplyArgs {
    /// The run (its id, `last`, or its directory).
    #[arg(value_name = "RUN")]
    pub run: String,

    /// Where you changed a path since the run began and the run changed
    /// it too, merge the run's change into your version (as git
    /// merge-file does) instead of refusing; overlapping changes are
    /// written with conflict markers, named, and the exit is 1.
    #[arg(long = "3way")]
    pub three_way: bool,

    #[command(flatten)]
    pub place: Place,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  troupe clean last\n  troupe clean --branches")]
pub struct CleanArgs {
    /// The run (its id, `last`, or its directory).
    #[arg(value_name = "RUN", required_unless_present = "branches")]
    pub run: Option<String>,

    /// Delete the workspace repository's troupe/run_* branches instead,
    /// but those of runs a troupe is still running (the runs' records
    /// stay; a branch that is gone cannot be applied any more).
    #[arg(long, conflicts_with = "run")]
    pub branches: bool,

    #[command(flatten)]
    pub place: Place,
}

/// A run and its isolation, found by name.
fn isolated_run(
    place: &Place,
    name: &str,
) -> Result<(PathBuf, RunRecord, IsolationRecord), UsageError> {
    let results = place.results();
    let dir = match resolve(&results, name).map_err(UsageError::Said)? {
        Target::Run(dir) => dir,
        _ => return Err(UsageError::Said(format!("{name} is not a run"))),
    };
    let record = load_run(&dir).map_err(UsageError::Said)?;
    let Some(isolation) = record.isolation.clone() else {
        return Err(UsageError::Said(format!(
            "run {} shared its workspace (no --isolation worktree): its changes are already there",
            record.run_id
        )));
    };
    Ok((dir, record, isolation))
}

pub async fn apply_run(args: ApplyArgs) -> anyhow::Result<ExitCode> {
    let (dir, record, isolation) = isolated_run(&args.place, &args.run)?;
    let workspace = PathBuf::from(&record.workspace);
    let meanwhile = match args.three_way {
        true => Meanwhile::Merge,
        false => Meanwhile::Refuse,
    };
    let span = Span::root("troupe.apply", record.trace());
    span.set("troupe.run.id", record.run_id.clone());
    match apply_into(&isolation, &workspace, &dir, meanwhile, span).await {
        Ok(Applied { conflicted, .. }) if !conflicted.is_empty() => {
            crate::tell!(
                "troupe: {} conflict markers where your changes and the run's overlap: {}; resolve them there",
                if conflicted.len() == 1 {
                    "this path has"
                } else {
                    "these paths have"
                },
                conflicted.join(", ")
            );
            Ok(ExitCode::FAILURE)
        }
        Ok(_) => Ok(ExitCode::SUCCESS),
        Err(e @ (ApplyError::ChangedMeanwhile { .. } | ApplyError::LeadsOut { .. })) => {
            crate::tell!("troupe: {e}");
            Ok(ExitCode::FAILURE)
        }
        Err(e) => Err(e.into()),
    }
}

pub async fn clean(args: CleanArgs) -> anyhow::Result<ExitCode> {
    let Some(run) = &args.run else {
        return clean_branches(&args.place).await;
    };
    let (dir, record, isolation) = isolated_run(&args.place, run)?;
    // Held while cleaning: a troupe still running the run works in them.
    let _held = match crate::fsutil::dir_lock::DirLock::take(&dir) {
        Ok(held) => held,
        Err(e) => {
            crate::tell!(
                "troupe: not cleaned: run {} is still being run ({e}); clean it when that ends",
                record.run_id
            );
            return Ok(ExitCode::FAILURE);
        }
    };
    let (removed, kept) = crate::run::isolation::clean(&dir)?;
    // The attempts whose change never landed, and the commits that wrote
    // the kept checkouts out: what they wrote into the repository is
    // nothing's but theirs.
    let mut unlanded = unlanded(&record, |_| true);
    unlanded.extend(kept);
    let pruned = crate::run::isolation::prune(&isolation, &unlanded).await?;
    crate::say!(
        "removed {} of run {}; {} ({} bytes) of its unlanded attempts pruned from {}; branch {} stays",
        count(removed.len(), "checkout"),
        dir.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        count(pruned.objects, "object"),
        pruned.bytes,
        isolation.git_dir.display(),
        isolation.branch
    );
    Ok(ExitCode::SUCCESS)
}

/// The commits of the attempts of `record`'s steps `of` selects whose
/// change never landed.
fn unlanded(record: &RunRecord, of: impl Fn(&StepRecord) -> bool) -> Vec<String> {
    record
        .steps
        .iter()
        .filter(|step| of(step))
        .flat_map(|step| &step.attempts)
        .filter_map(|attempt| attempt.change.as_ref())
        .filter(|change| change.merge.is_none())
        .filter_map(|change| change.commit.clone())
        .collect()
}

/// What only a completed step's rejected attempts wrote, removed from the
/// user's repository as the run ends rather than at `troupe clean`: no
/// attempt will continue on them. Left while another run of the
/// workspace is running, which may have written one of those objects
/// too and build on it; a failed step's stay for a resume to continue on.
async fn prune_rejected(run_dir: &Path, record: &RunRecord, isolation: &IsolationRecord) {
    let rejected = unlanded(record, |step| step.status == StepStatus::Completed);
    if rejected.is_empty() {
        return;
    }
    let others_running = run_dir
        .parent()
        .and_then(|results| std::fs::read_dir(results).ok());
    let others_running = others_running.into_iter().flatten().flatten().any(|entry| {
        let path = entry.path();
        path != run_dir
            && entry.file_name().to_string_lossy().starts_with("run_")
            && crate::fsutil::dir_lock::probe(&path).unwrap_or(true)
    });
    if others_running {
        return;
    }
    if let Err(e) = crate::run::isolation::prune(isolation, &rejected).await {
        crate::tell!(
            "troupe: what the rejected attempts wrote stays in {} ({e}); troupe clean {} removes it",
            isolation.git_dir.display(),
            record.run_id
        );
    }
}

/// `troupe clean --branches`: every `troupe/run_*` branch of the
/// workspace's repository whose run no troupe is running, deleted.
async fn clean_branches(place: &Place) -> anyhow::Result<ExitCode> {
    use crate::git::{Git, Place as At};
    let workspace = place
        .workspace
        .canonicalize()
        .map_err(|e| UsageError::Said(format!("--workspace {}: {e}", place.workspace.display())))?;
    let Some(git_dir) = crate::git::repository_at(&workspace).await else {
        return Err(UsageError::Said(format!(
            "{} is not the top of a git repository: its runs' branches are in their own repo.git, removed with the run's directory",
            workspace.display()
        ))
        .into());
    };
    let git = Git::new(git_dir);
    let here = At::default();
    let refs = git
        .run(
            &here,
            ["for-each-ref", "--format=%(refname)", "refs/heads/troupe/"],
        )
        .await?;
    let results = place.results();
    let (mut removed, mut kept) = (Vec::new(), Vec::new());
    for reference in refs.lines().filter(|r| !r.is_empty()) {
        let branch = reference.trim_start_matches("refs/heads/");
        let run_id = branch.trim_start_matches("troupe/");
        let running = crate::fsutil::dir_lock::probe(&results.join(run_id)).unwrap_or(false);
        if running {
            kept.push(branch.to_string());
            continue;
        }
        git.run(&here, ["update-ref", "-d", reference]).await?;
        removed.push(branch.to_string());
    }
    crate::say!(
        "removed {}{}",
        count(removed.len(), "branch"),
        match removed.is_empty() {
            true => String::new(),
            false => format!(": {}", removed.join(", ")),
        }
    );
    if !kept.is_empty() {
        crate::say!("kept, their runs still running: {}", kept.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}

/// `event`, after the run's end (its recorder gone): appended to its
/// `events.jsonl`, and on stdout with `--json`, as the run's own events
/// are. A line that cannot be appended is said.
fn append_event(run_dir: &Path, record: &RunRecord, event: &RunEvent, json: bool) {
    let now = chrono::Utc::now();
    let mut line = serde_json::json!({
        "at": now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "elapsed_ms": (now - record.created_at).num_milliseconds().max(0),
    });
    if let (Some(line), Ok(serde_json::Value::Object(fields))) =
        (line.as_object_mut(), serde_json::to_value(event))
    {
        line.extend(fields);
    }
    let text = format!("{line}\n");
    let path = run_dir.join("events.jsonl");
    let appended = crate::fsutil::open_append(&path)
        .and_then(|mut file| std::io::Write::write_all(&mut file, text.as_bytes()));
    if let Err(e) = appended {
        crate::tell!("troupe: cannot append to {}: {e}", path.display());
    }
    if json {
        crate::console::out(&text);
    }
}

/// What `applied` says of the apply: what it wrote, or why it did not;
/// pending still when another troupe was at work on the workspace.
fn apply_record(applied: &Result<Applied, ApplyError>) -> ApplyRecord {
    match applied {
        Ok(done) => ApplyRecord {
            state: ApplyState::Applied,
            written: done.written.clone(),
            added: done.added.clone(),
            removed: done.removed.clone(),
            merged: done.merged.clone(),
            conflicted: done.conflicted.clone(),
            reason: None,
        },
        Err(e) => ApplyRecord {
            state: match e {
                ApplyError::Busy(_) => ApplyState::Pending,
                _ => ApplyState::Refused,
            },
            reason: Some(e.to_string()),
            ..ApplyRecord::default()
        },
    }
}

/// What `applied` leaves in the run's record. A pending one (another
/// troupe at work on the workspace) leaves the record as it is. A record
/// that cannot be written is said: the workspace is right, and `troupe
/// show` would say the apply is still due.
fn record_apply(run_dir: &Path, applied: &Result<Applied, ApplyError>) {
    let apply = apply_record(applied);
    if apply.state == ApplyState::Pending {
        return;
    }
    let path = run_dir.join("run.json");
    let written = load_run(run_dir)
        .map_err(std::io::Error::other)
        .and_then(|mut record| {
            record.apply = Some(apply);
            crate::fsutil::write_json_atomic(&path, &record, crate::fsutil::Durability::Commit)
        });
    if let Err(e) = written {
        crate::tell!("troupe: cannot record the apply in {}: {e}", path.display());
    }
}

/// Applies the run's branch to `workspace`, in `span`, and says what it
/// wrote.
async fn apply_into(
    isolation: &IsolationRecord,
    workspace: &Path,
    run_dir: &Path,
    meanwhile: Meanwhile,
    span: Span,
) -> Result<Applied, ApplyError> {
    span.set("troupe.branch", isolation.branch.clone());
    let applied = apply(isolation, workspace, run_dir, meanwhile).await;
    record_apply(run_dir, &applied);
    match &applied {
        Ok(applied) => {
            span.set("troupe.apply.written", applied.written.len() as i64);
            span.set("troupe.apply.removed", applied.removed.len() as i64);
            span.set("troupe.apply.conflicted", applied.conflicted.len() as i64);
            span.succeed();
        }
        Err(e) => span.fail(e.to_string()),
    }
    span.end();
    let applied = applied?;
    if applied.is_empty() {
        crate::tell!(
            "troupe: nothing to apply: {} already has every change of branch {}",
            workspace.display(),
            isolation.branch
        );
        return Ok(applied);
    }
    crate::progress!(
        "troupe: applied branch {} to {}: {} written, {} removed",
        isolation.branch,
        workspace.display(),
        applied.written.len(),
        applied.removed.len()
    );
    for path in &applied.written {
        match applied.added.contains(path) {
            true => crate::progress!("  A {path}"),
            false => crate::progress!("  M {path}"),
        }
    }
    for path in &applied.removed {
        crate::progress!("  D {path}");
    }
    for path in &applied.merged {
        match applied.conflicted.contains(path) {
            true => crate::progress!("  C {path} (merged with yours; conflicts marked)"),
            false => crate::progress!("  M {path} (merged with yours)"),
        }
    }
    Ok(applied)
}

/// The last lines of an isolated run: its result applied (unless
/// `--no-apply`, and only when it completed), or where the result is and
/// the command that applies it; and the checkouts kept. The exit code
/// stays the run's, but a refused apply makes a completed run's 1.
pub async fn after_run(
    run_dir: &Path,
    apply_result: bool,
    exit_code: u8,
    run: &Span,
    json: bool,
) -> u8 {
    let Ok(record) = load_run(run_dir) else {
        return exit_code;
    };
    let Some(isolation) = record.isolation.clone() else {
        return exit_code;
    };
    let workspace = PathBuf::from(&record.workspace);
    let mut code = exit_code;
    let command = format!(
        "troupe apply {} --workspace {}",
        record.run_id,
        workspace.display()
    );
    match (apply_result, record.status == RunStatus::Completed) {
        (true, true) => {
            let span = run.child("troupe.apply");
            let applied =
                apply_into(&isolation, &workspace, run_dir, Meanwhile::Refuse, span).await;
            let event = RunEvent::Applied {
                branch: isolation.branch.clone(),
                apply: apply_record(&applied),
            };
            append_event(run_dir, &record, &event, json);
            match applied {
                Ok(_) => {}
                // Applying later would meet the same links.
                Err(e @ ApplyError::LeadsOut { .. }) => {
                    crate::tell!("troupe: {e}");
                    code = code.max(1);
                }
                Err(e) => {
                    crate::tell!("troupe: {e}");
                    crate::tell!(
                        "troupe: the result stays on branch {}; apply it later with: {command}",
                        isolation.branch
                    );
                    code = code.max(1);
                }
            }
        }
        (true, false) => crate::tell!(
            "troupe: not applied, the run did not complete; what landed is branch {}: {command}",
            isolation.branch
        ),
        (false, _) => crate::tell!(
            "troupe: the result is branch {} in {}; bring it into the workspace with: {command}",
            isolation.branch,
            isolation.git_dir.display()
        ),
    }
    prune_rejected(run_dir, &record, &isolation).await;
    let kept: Vec<String> = crate::run::isolation::kept_checkouts(run_dir)
        .iter()
        .filter_map(|dir| dir.strip_prefix(run_dir).ok())
        .map(|dir| dir.display().to_string())
        .collect();
    if !kept.is_empty() {
        crate::tell!(
            "troupe: {} of steps that did not complete kept ({}); remove with: troupe clean {} --workspace {}",
            count(kept.len(), "checkout"),
            kept.join(", "),
            record.run_id,
            workspace.display()
        );
    }
    code
}
