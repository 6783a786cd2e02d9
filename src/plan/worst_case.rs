//! The most a plan may cost under the caps a run would be given, for
//! `troupe validate`: what a user can know before spending anything.

use serde::Serialize;

/// The caps that bound what a run of a plan spends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Caps {
    /// `--max-retries`: attempts after a rejection.
    pub max_retries: u32,
    /// `--max-agents`.
    pub max_agents: u32,
    /// `--max-cost`, dollars.
    pub max_cost: Option<f64>,
    /// `--max-agent-cost`, dollars.
    pub max_agent_cost: Option<f64>,
}

/// An attempt has one worker and at most two reviewers (a review that
/// fails is given to a second one).
const AGENTS_PER_ATTEMPT: u64 = 3;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorstCase {
    /// The agents a run of the plan may start.
    pub agents: u64,
    /// Dollars, when a cap in money bounds it.
    pub cost: Option<f64>,
}

impl WorstCase {
    pub fn of(steps: usize, caps: Caps) -> Self {
        let attempts = u64::from(caps.max_retries) + 1;
        let agents = (steps as u64)
            .saturating_mul(attempts)
            .saturating_mul(AGENTS_PER_ATTEMPT)
            .min(u64::from(caps.max_agents));
        let by_agents = caps.max_agent_cost.map(|each| each * agents as f64);
        let cost = match (caps.max_cost, by_agents) {
            (Some(run), Some(agents)) => Some(run.min(agents)),
            (run, agents) => run.or(agents),
        };
        WorstCase { agents, cost }
    }

    /// In words, for the line under a valid plan.
    pub fn describe(&self, caps: Caps) -> String {
        let agents = crate::text::count(self.agents, "agent");
        let Some(cost) = self.cost else {
            return format!(
                "worst case: {agents} at most; no cap in money (give --max-cost or --max-agent-cost to bound it)"
            );
        };
        let mut bounds = vec![format!("{agents} at most")];
        if let Some(each) = caps.max_agent_cost {
            bounds.push(format!("at ${each:.2} each (--max-agent-cost)"));
        }
        if let Some(run) = caps.max_cost {
            bounds.push(format!("within ${run:.2} in all (--max-cost)"));
        }
        format!(
            "worst case: ${cost:.2}: {}; a cap lets the answers already asked for finish, and a replan's planner is bound by --max-cost alone",
            bounds.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(max_cost: Option<f64>, max_agent_cost: Option<f64>) -> Caps {
        Caps {
            max_retries: 2,
            max_agents: 200,
            max_cost,
            max_agent_cost,
        }
    }

    #[test]
    fn the_tighter_cap_bounds_it() {
        let four = |c| WorstCase::of(4, c);
        assert_eq!(
            four(caps(None, None)),
            WorstCase {
                agents: 36,
                cost: None
            }
        );
        assert_eq!(four(caps(None, Some(0.5))).cost, Some(18.0));
        assert_eq!(four(caps(Some(5.0), Some(0.5))).cost, Some(5.0));
        assert_eq!(four(caps(Some(50.0), Some(0.5))).cost, Some(18.0));
        let many = WorstCase::of(100, caps(None, Some(0.1)));
        assert_eq!(many.agents, 200, "--max-agents bounds the agents");
        assert!((many.cost.unwrap_or(0.0) - 20.0).abs() < 1e-9);
    }
}
