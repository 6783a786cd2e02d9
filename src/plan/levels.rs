//! The levels of a valid plan: level 0 has no dependencies among the
//! plan's steps, level n depends on something at level n-1. Shown to
//! people (`troupe validate`, the plan tree); the scheduler itself never
//! waits for a level, only for each step's own dependencies.

use super::Plan;

/// The step indices of each level, in plan order. Dependencies outside the
/// plan (completed steps of a replanned run) do not count.
pub fn levels(plan: &Plan) -> Vec<Vec<usize>> {
    let count = plan.steps.len();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); count];
    let mut waiting: Vec<usize> = vec![0; count];
    for (i, deps) in plan.dependency_indices().into_iter().enumerate() {
        for d in deps {
            dependents[d].push(i);
            waiting[i] += 1;
        }
    }
    let mut level = vec![0usize; count];
    let mut ready: Vec<usize> = (0..count).filter(|&i| waiting[i] == 0).collect();
    while let Some(node) = ready.pop() {
        for &next in &dependents[node] {
            level[next] = level[next].max(level[node] + 1);
            waiting[next] -= 1;
            if waiting[next] == 0 {
                ready.push(next);
            }
        }
    }
    let depth = level.iter().max().map_or(0, |max| max + 1);
    let mut out = vec![Vec::new(); depth];
    for (i, &l) in level.iter().enumerate() {
        out[l].push(i);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::parse_plan;
    use super::levels;

    #[test]
    fn a_diamond_has_three_levels() {
        let plan = parse_plan(
            r#"{"steps":[{"id":"a","description":"x"},{"id":"b","description":"x","dependencies":["a"]},
               {"id":"c","description":"x","dependencies":["a"]},{"id":"d","description":"x","dependencies":["b","c"]},
               {"id":"e","description":"x"}]}"#,
        )
        .unwrap();
        assert_eq!(levels(&plan), vec![vec![0, 4], vec![1, 2], vec![3]]);
    }
}
