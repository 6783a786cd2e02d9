//! `troupe plan` (ask the Planner, print or save the plan) and `troupe
//! validate` (check a plan file strictly).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use super::UsageError;
use super::config::Sources;
use crate::chat::Actor;
use crate::llm::build_model;
use crate::plan::worst_case::{Caps, WorstCase};
use crate::plan::{Plan, levels, parse_plan_file, render_tree};
use crate::run::{PlanFailure, Planner};
use crate::settings::model::ModelFlags;
use crate::settings::pick;

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  troupe plan \"add tests for the parser\" --model gpt-4o-mini -o plan.json\n  troupe plan --goal-file goal.md --format mermaid"
)]
pub struct PlanArgs {
    /// The goal, in words.
    #[arg(
        value_name = "GOAL",
        required_unless_present = "goal_file",
        conflicts_with = "goal_file"
    )]
    pub goal: Option<String>,

    /// Read the goal from a file (- for standard input).
    #[arg(long, value_name = "FILE")]
    pub goal_file: Option<PathBuf>,

    /// Write the plan here instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// A directory of prompt overrides (planner.md) [env:
    /// TROUPE_PROMPTS_DIR].
    #[arg(long, value_name = "DIR")]
    pub prompts_dir: Option<PathBuf>,

    /// The plan as JSON, or its DAG as Graphviz (dot) or Mermaid.
    #[arg(long, value_enum, default_value = "json")]
    pub format: PlanFormat,

    #[command(flatten)]
    pub model: ModelFlags,

    #[command(flatten)]
    pub worst: WorstCaseFlags,

    /// The run's --max-agent-cost, for the worst case [env:
    /// TROUPE_MAX_AGENT_COST].
    #[arg(long, value_name = "USD", value_parser = crate::settings::numbers::dollars, help_heading = "The worst case")]
    pub max_agent_cost: Option<f64>,
}

/// The caps of the run a plan is for, from which `plan` and `validate`
/// say the most it may cost.
#[derive(Debug, Args)]
#[command(next_help_heading = "The worst case")]
pub struct WorstCaseFlags {
    /// The run's --max-retries.
    #[arg(long, value_name = "N", default_value_t = 2, allow_negative_numbers = true, value_parser = crate::settings::numbers::count::<u32>)]
    pub max_retries: u32,

    /// The run's --max-agents.
    #[arg(long, value_name = "N", default_value_t = 200, allow_negative_numbers = true, value_parser = crate::settings::numbers::positive::<u32>)]
    pub max_agents: u32,

    /// The run's --max-cost: with it or --max-agent-cost (or max_cost and
    /// max_agent_cost in troupe.toml) the plan's last line says the most a
    /// run of it may cost [env: TROUPE_MAX_COST].
    #[arg(long, value_name = "USD", value_parser = crate::settings::numbers::dollars)]
    pub max_cost: Option<f64>,
}

impl WorstCaseFlags {
    fn caps(&self, max_agent_cost: Option<f64>, sources: &Sources) -> Result<Caps, UsageError> {
        Ok(Caps {
            max_retries: self.max_retries,
            max_agents: self.max_agents,
            max_cost: crate::settings::money(self.max_cost, sources, "TROUPE_MAX_COST")
                .map_err(UsageError::Said)?,
            max_agent_cost,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PlanFormat {
    Json,
    Dot,
    Mermaid,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  troupe validate plan.json\n  troupe validate plan.json --json | jq .levels"
)]
pub struct ValidateArgs {
    /// The plan file.
    #[arg(value_name = "PLAN")]
    pub plan: PathBuf,

    /// Print the verdict as one JSON object: {"valid", "error"} or
    /// {"valid", "summary", "steps", "levels", "worst_case"} (the step ids
    /// of each level; the agents and dollars a run may spend at most).
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub worst: WorstCaseFlags,

    /// The agent flags of the run the plan is for: a step's powers may
    /// ask for no more than they (and troupe.toml) give every worker.
    #[command(flatten)]
    pub agent: super::agent_args::AgentArgs,
}

pub async fn plan(args: PlanArgs, sources: &Sources) -> anyhow::Result<ExitCode> {
    let max_agent_cost =
        crate::settings::money(args.max_agent_cost, sources, "TROUPE_MAX_AGENT_COST")
            .map_err(UsageError::Said)?;
    let caps = args.worst.caps(max_agent_cost, sources)?;
    let model_config = args
        .model
        .resolve_single(Actor::Planner, sources)
        .map_err(UsageError::Said)?
        .config;
    let model = build_model(&model_config).map_err(UsageError::of)?;
    let prompts_dir: Option<PathBuf> =
        pick(args.prompts_dir.clone(), sources, "TROUPE_PROMPTS_DIR").map_err(UsageError::Said)?;
    let goal = match (&args.goal, &args.goal_file) {
        (Some(goal), _) => goal.clone(),
        (None, Some(file)) => super::text_file::read(file, "the goal file")?,
        (None, None) => return Err(UsageError::Said("give the goal or --goal-file".into()).into()),
    };
    let delays = crate::llm::DelayObserver(std::sync::Arc::new(|delay: &crate::llm::Delay| {
        crate::tell!("troupe: planner | {delay}");
    }));
    let prompts = crate::prompts::Prompts::read(prompts_dir.as_deref()).map_err(UsageError::of)?;
    let mut planner = Planner::new(model, prompts, None).with_delays(delays);
    let plan = match planner.plan(goal.trim()).await {
        Ok(plan) => plan,
        Err(PlanFailure::NoAnswer(why)) => {
            crate::tell!("troupe: {why}");
            return Ok(ExitCode::FAILURE);
        }
        Err(failure @ PlanFailure::Invalid { .. }) => {
            crate::tell!("troupe: {failure}");
            if let PlanFailure::Invalid { answer, .. } = &failure
                && !answer.is_empty()
            {
                crate::tell!("its answer was:\n{answer}");
            }
            return Ok(ExitCode::from(2));
        }
    };
    crate::console::err(&render_tree(&plan, |_| None));
    crate::console::err(&format!(
        "{}\n",
        WorstCase::of(plan.steps.len(), caps).describe(caps)
    ));
    let text = match args.format {
        PlanFormat::Json => {
            let mut json = serde_json::to_string_pretty(&plan).context("cannot encode the plan")?;
            json.push('\n');
            json
        }
        PlanFormat::Dot => crate::inspect::graph::dot(&plan, &|_| None),
        PlanFormat::Mermaid => crate::inspect::graph::mermaid(&plan, &|_| None),
    };
    match &args.output {
        Some(path) => {
            std::fs::write(path, text)
                .with_context(|| format!("cannot write {}", path.display()))?;
            crate::tell!("plan written to {}", path.display());
        }
        None => crate::console::out(&text),
    }
    Ok(ExitCode::SUCCESS)
}

pub fn validate(args: ValidateArgs, sources: &Sources) -> anyhow::Result<ExitCode> {
    let settings = args.agent.settings(sources, Path::new("."), &[], None)?;
    let caps = args
        .worst
        .caps(args.agent.max_agent_cost(sources)?, sources)?;
    let ceiling = crate::run::ceiling::Ceiling::of(&settings);
    let checked = read_plan_file(&args.plan).and_then(|plan| {
        ceiling.check(&plan).map_err(|e| {
            UsageError::Said(format!(
                "the plan file {} is refused: {e}",
                args.plan.display()
            ))
        })?;
        Ok(plan)
    });
    if !args.json {
        let plan = checked?;
        crate::console::out(&render_tree(&plan, |_| None));
        crate::console::out(&format!(
            "{}\n",
            WorstCase::of(plan.steps.len(), caps).describe(caps)
        ));
        return Ok(ExitCode::SUCCESS);
    }
    let (verdict, code) = match checked {
        Ok(plan) => {
            let levels: Vec<Vec<&str>> = levels(&plan)
                .iter()
                .map(|level| level.iter().map(|&i| plan.steps[i].id.as_str()).collect())
                .collect();
            let verdict = serde_json::json!({
                "valid": true,
                "summary": plan.summary,
                "steps": plan.steps.len(),
                "levels": levels,
                "worst_case": WorstCase::of(plan.steps.len(), caps),
            });
            (verdict, ExitCode::SUCCESS)
        }
        Err(e) => (
            serde_json::json!({"valid": false, "error": e.to_string()}),
            ExitCode::from(2),
        ),
    };
    crate::say!("{verdict}");
    Ok(code)
}

/// A plan file, read and checked; an invalid one is a usage error that
/// names the file and the reason.
pub fn read_plan_file(path: &Path) -> Result<Plan, UsageError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError::Said(format!("cannot read the plan {}: {e}", path.display())))?;
    parse_plan_file(&text)
        .map_err(|e| UsageError::Said(format!("the plan file {} is invalid: {e}", path.display())))
}
