//! Property tests: whatever a model writes, the parser answers with a plan
//! or a reason, never a panic; and a valid plan survives the round trip.

use proptest::prelude::*;

use super::{Plan, Step, parse_plan};

/// Plans whose steps depend only on earlier ones: always acyclic.
fn valid_plan() -> impl Strategy<Value = Plan> {
    prop::collection::vec(
        (
            "[a-z ]{1,20}",
            "[A-Z_]{1,10}",
            prop::collection::vec(any::<prop::sample::Index>(), 0..3),
        ),
        1..12,
    )
    .prop_map(|raw| {
        let steps = raw
            .iter()
            .enumerate()
            .map(|(i, (description, kind, deps))| {
                let mut dependencies: Vec<String> = if i == 0 {
                    Vec::new()
                } else {
                    deps.iter().map(|d| format!("s{}", d.index(i))).collect()
                };
                dependencies.sort();
                dependencies.dedup();
                Step {
                    id: format!("s{i}"),
                    description: format!("do {description}"),
                    kind: kind.clone(),
                    dependencies,
                    output_schema: None,
                    powers: None,
                }
            })
            .collect();
        Plan {
            summary: "generated".to_string(),
            steps,
        }
    })
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in ".{0,400}") {
        let _ = parse_plan(&text);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let _ = parse_plan(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn a_valid_plan_round_trips(plan in valid_plan()) {
        let text = serde_json::to_string(&plan).unwrap();
        prop_assert_eq!(parse_plan(&text), Ok(plan.clone()));
        let wrapped = format!("Here it is:\n```json\n{text}\n```");
        prop_assert_eq!(parse_plan(&wrapped), Ok(plan));
    }
}
