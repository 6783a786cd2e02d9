//! The Python SDK as the host.

use serde_json::{Value, json};

use super::{Sdk, Transport, agents_script, ended, host, play, serve_command, status_of};
use crate::common::Sandbox;

const TOOLS: [&str; 6] = [
    "create_sub_agent",
    "get_sub_agent_status",
    "wait_sub_agents",
    "terminate_sub_agent",
    "run_team",
    "get_run_status",
];

fn listing(transport: Transport) {
    let Some(python) = host("listing", Sdk::Python) else {
        return;
    };
    let sandbox = Sandbox::new();
    let model = agents_script(&sandbox, &[], &[]);
    let report = play(
        python,
        "listing",
        transport,
        &serve_command(&sandbox, &model, &[]),
    );
    let tools = report["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, TOOLS);
    let create = &tools[0]["input_schema"];
    assert_eq!(create["type"], "object");
    let mut required: Vec<&str> = create["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    required.sort();
    assert_eq!(required, ["summary", "task"]);
    for field in [
        "agent_id",
        "deliverables_dir",
        "run_in_background",
        "timeout_seconds",
    ] {
        assert!(
            create["properties"][field].is_object(),
            "create_sub_agent has no {field}: {create}"
        );
    }
    let read_only: Vec<bool> = tools.iter().map(|t| t["read_only"] == true).collect();
    assert_eq!(read_only, [false, true, true, false, false, true]);
}

#[test]
fn a_host_lists_the_seeds_tools_with_their_schemas_over_stdio() {
    listing(Transport::Stdio);
}

#[test]
fn a_host_lists_the_seeds_tools_with_their_schemas_over_http() {
    listing(Transport::Http);
}

fn blocking(transport: Transport) {
    let Some(python) = host("blocking", Sdk::Python) else {
        return;
    };
    let sandbox = Sandbox::new();
    let model = agents_script(&sandbox, &[1], &[]);
    let report = play(
        python,
        "blocking",
        transport,
        &serve_command(&sandbox, &model, &[]),
    );
    let created = &report["created"];
    assert_eq!(created["is_error"], false, "{created}");
    let result = &created["structured"];
    assert_eq!(result["status"], "completed");
    assert_eq!(result["agent_id"], 1);
    assert_eq!(result["deliverables_files"], json!(["greeting-1.txt"]));
    assert_eq!(result["result_summary"], "wrote greeting-1.txt");
    assert!(
        created["text"]
            .as_str()
            .unwrap()
            .contains("Sub-agent 1 (write a greeting) ended: completed")
    );
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("greeting-1.txt")).unwrap(),
        "hello"
    );
    // The seed's result is the one `troupe spawn` prints and result.json keeps.
    let kept = crate::common::read_json(&sandbox.agent_dir(1).join(".subagent/result.json"));
    assert_eq!(&kept, result);
    let progress = report["progress"].as_array().unwrap();
    assert!(
        progress
            .iter()
            .any(|p| p["message"].as_str().unwrap_or_default().contains("turn 1")),
        "no progress at the model's first turn: {progress:?}"
    );
    assert_eq!(sandbox.transcript(1)["status"], "completed");
}

#[test]
fn a_blocking_create_returns_the_seeds_result_with_progress_over_stdio() {
    blocking(Transport::Stdio);
}

#[test]
fn a_blocking_create_returns_the_seeds_result_with_progress_over_http() {
    blocking(Transport::Http);
}

fn background(transport: Transport) {
    let Some(python) = host("background", Sdk::Python) else {
        return;
    };
    let sandbox = Sandbox::new();
    let model = agents_script(&sandbox, &[1, 2, 3], &[]);
    let report = play(
        python,
        "background",
        transport,
        &serve_command(&sandbox, &model, &[]),
    );
    for (n, started) in report["started"].as_array().unwrap().iter().enumerate() {
        assert_eq!(started["structured"]["status"], "running", "{started}");
        assert_eq!(
            started["structured"]["agent_id"],
            n + 1,
            "the next free ids"
        );
    }
    // wait_sub_agents any, looped: each agent is returned once, and the
    // loop ends with nothing running.
    let waits = report["waits"].as_array().unwrap();
    let mut returned: Vec<u64> = waits
        .iter()
        .flat_map(|w| w["structured"]["ended"].as_array().unwrap().clone())
        .map(|r| r["agent_id"].as_u64().unwrap())
        .collect();
    returned.sort();
    assert_eq!(returned, [1, 2, 3], "{waits:?}");
    assert_eq!(waits.last().unwrap()["structured"]["running"], json!([]));
    for wait in waits {
        for result in wait["structured"]["ended"].as_array().unwrap() {
            assert_eq!(result["status"], "completed");
        }
    }
    let statuses: Vec<&Value> = report["status"]["structured"]["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["status"])
        .collect();
    assert_eq!(statuses, ["completed", "completed", "completed"]);
}

#[test]
fn background_creates_are_waited_for_one_by_one_over_stdio() {
    background(Transport::Stdio);
}

#[test]
fn background_creates_are_waited_for_one_by_one_over_http() {
    background(Transport::Http);
}

fn notices(transport: Transport) {
    let Some(python) = host("notices", Sdk::Python) else {
        return;
    };
    let sandbox = Sandbox::new();
    let model = agents_script(&sandbox, &[1], &[]);
    let report = play(
        python,
        "notices",
        transport,
        &serve_command(&sandbox, &model, &[]),
    );
    // As a notification...
    let logs = report["logs"].as_array().unwrap();
    assert_eq!(logs.len(), 1, "{logs:?}");
    let text = logs[0].as_str().unwrap();
    for part in [
        "Sub-agent 1 (noticed later) ended: completed.",
        "Runtime:",
        // The scripted model costs nothing, and no cost is said.
        " tokens.\nDeliverables",
        "; spent ",
        "Deliverables: sub_agent_results/agent_1",
        "Result: wrote greeting-1.txt",
    ] {
        assert!(text.contains(part), "the notice lacks {part:?}: {text}");
    }
    // ...and in the next tool result, once.
    let later = &report["later"];
    let carried = later["structured"]["notices"].as_array().unwrap();
    assert_eq!(carried.len(), 1, "{later}");
    assert_eq!(carried[0]["text"], text);
    assert_eq!(carried[0]["result"]["status"], "completed");
    assert!(later["text"].as_str().unwrap().contains(text));
    assert!(report["again"]["structured"].get("notices").is_none());
}

#[test]
fn a_background_agents_end_is_noticed_as_a_message_and_in_the_next_result_over_stdio() {
    notices(Transport::Stdio);
}

#[test]
fn a_background_agents_end_is_noticed_as_a_message_and_in_the_next_result_over_http() {
    notices(Transport::Http);
}

fn terminate(transport: Transport) {
    let Some(python) = host("terminate", Sdk::Python) else {
        return;
    };
    let sandbox = Sandbox::new();
    let model = agents_script(&sandbox, &[], &[1]);
    let report = play(
        python,
        "terminate",
        transport,
        &serve_command(&sandbox, &model, &["--kill-grace", "2"]),
    );
    let stopped = &report["stopped"]["structured"];
    assert_eq!(stopped["success"], true, "{report}");
    assert_eq!(stopped["status"], "terminated");
    assert_eq!(stopped["partial_results"], true);
    assert_eq!(stopped["deliverables_dir"], "sub_agent_results/agent_1");
    assert_eq!(
        report["status"]["structured"]["agents"][0]["status"],
        "terminated"
    );
    assert_eq!(
        std::fs::read_to_string(sandbox.agent_dir(1).join("part.txt")).unwrap(),
        "half done"
    );
    assert_eq!(sandbox.transcript(1)["status"], "terminated");
}

#[test]
fn terminate_stops_a_long_agent_and_keeps_its_partial_files_over_stdio() {
    terminate(Transport::Stdio);
}

#[test]
fn terminate_stops_a_long_agent_and_keeps_its_partial_files_over_http() {
    terminate(Transport::Http);
}

/// Terminate and a cancel of the blocking call, at once: one SIGTERM
/// between them (a second kills the agent with its records unwritten).
#[test]
fn terminate_and_a_cancel_of_the_same_blocking_agent_stop_it_once() {
    let Some(python) = host("terminate_blocking", Sdk::Python) else {
        return;
    };
    let sandbox = Sandbox::new();
    let model = agents_script(&sandbox, &[], &[1]);
    let report = play(
        python,
        "terminate_blocking",
        Transport::Stdio,
        &serve_command(&sandbox, &model, &["--kill-grace", "2"]),
    );
    assert_eq!(
        report["stopped"]["structured"]["status"], "terminated",
        "{report}"
    );
    assert_eq!(super::ended(&sandbox, 1)["status"], "terminated");
    assert_eq!(sandbox.transcript(1)["status"], "terminated");
    let log =
        std::fs::read_to_string(sandbox.agent_dir(1).join(".subagent/supervisor.log")).unwrap();
    assert!(!log.contains("SIGTERM again"), "{log}");
}

#[test]
fn a_cancelled_blocking_create_terminates_its_agent_and_keeps_its_transcript() {
    let Some(python) = host("cancel", Sdk::Python) else {
        return;
    };
    let sandbox = Sandbox::new();
    let model = agents_script(&sandbox, &[], &[1]);
    let report = play(
        python,
        "cancel",
        Transport::Stdio,
        &serve_command(&sandbox, &model, &["--kill-grace", "2"]),
    );
    assert_eq!(report["final"]["status"], "terminated", "{report}");
    assert_eq!(report["still_answers"], true);
    assert_eq!(
        std::fs::read_to_string(sandbox.agent_dir(1).join("part.txt")).unwrap(),
        "half done"
    );
    let transcript = sandbox.transcript(1);
    assert_eq!(transcript["status"], "terminated");
    assert!(transcript["completed_at"].is_string());
}

fn team_script(sandbox: &Sandbox) -> String {
    let plan = json!({"summary": "two greetings", "steps": [
        {"id": "hello", "description": "write hello.txt", "dependencies": []},
        {"id": "world", "description": "write world.txt", "dependencies": ["hello"]}
    ]});
    let worker = |step: &str| {
        json!({"role": "worker", "step": step, "reply": [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": format!("{step}.txt"), "content": step}}]},
            {"tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": format!("wrote {step}.txt")}}]}
        ]})
    };
    sandbox.script(json!({"rules": [
        {"role": "planner", "reply": [{"content": plan.to_string()}]},
        worker("hello"),
        worker("world"),
        {"role": "reviewer", "reply": [{"content": "{\"approved\": true, \"summary\": \"ok\", \"issues\": [], \"suggestions\": []}"}]}
    ]}))
}

#[test]
fn run_team_runs_a_plan_and_a_goal_and_reports_their_steps() {
    let Some(python) = host("team", Sdk::Python) else {
        return;
    };
    let sandbox = Sandbox::new();
    let model = team_script(&sandbox);
    let report = play(
        python,
        "team",
        Transport::Stdio,
        &serve_command(&sandbox, &model, &["--isolation", "shared"]),
    );
    for key in ["planned", "goal"] {
        let run = &report[key]["structured"];
        assert_eq!(run["status"], "completed", "{key}: {run}");
        assert_eq!(run["exit_code"], 0);
        let steps: Vec<(&str, &str)> = run["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["id"].as_str().unwrap(), s["status"].as_str().unwrap()))
            .collect();
        assert_eq!(steps, [("hello", "completed"), ("world", "completed")]);
        assert!(
            run["steps"][0]["attempts"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
        );
        assert!(
            report[key]["text"]
                .as_str()
                .unwrap()
                .contains("2 of 2 steps completed")
        );
    }
    assert_eq!(
        report["status"]["structured"]["run_id"],
        report["goal"]["structured"]["run_id"]
    );
    assert_ne!(
        report["planned"]["structured"]["run_id"],
        report["goal"]["structured"]["run_id"]
    );
    assert_eq!(
        std::fs::read_to_string(sandbox.ws().join("world.txt")).unwrap(),
        "world"
    );
}

#[test]
fn transcripts_are_resources_and_a_subscription_hears_of_the_agents_end() {
    let Some(python) = host("resources", Sdk::Python) else {
        return;
    };
    let sandbox = Sandbox::new();
    let model = agents_script(&sandbox, &[1, 2], &[]);
    let report = play(
        python,
        "resources",
        Transport::Stdio,
        &serve_command(&sandbox, &model, &[]),
    );
    let listed: Vec<&str> = report["listed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u.as_str().unwrap())
        .collect();
    assert!(
        listed.contains(&"troupe://agents/1/conversation"),
        "{listed:?}"
    );
    assert!(listed.contains(&"troupe://agents/1/result"), "{listed:?}");
    assert!(
        report["templates"]
            .as_array()
            .unwrap()
            .contains(&json!("troupe://runs/{run_id}/run"))
    );
    assert_eq!(report["conversation_agent"], 1);
    assert_eq!(
        report["messages"].as_u64().unwrap() as usize,
        sandbox.transcript(1)["messages"].as_array().unwrap().len()
    );
    assert_eq!(report["updated"], json!(["troupe://agents/2/conversation"]));
    let escape = report["escape"].as_str().unwrap();
    assert!(escape.contains("not a plain name"), "{escape}");
    assert_eq!(status_of(&sandbox, 2)["status"], "completed");
}

fn crowd(extra: &[&str]) -> (Sandbox, Value) {
    let sandbox = Sandbox::new();
    let ids: Vec<u32> = (1..=20).collect();
    let rules: Vec<Value> = ids
        .iter()
        .map(|id| json!({"role": "worker", "step": id.to_string(), "reply": [
            {"delay_ms": 1500, "tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "thought"}}]}
        ]}))
        .collect();
    let model = sandbox.script(json!({"rules": rules}));
    let mut flags = vec!["--max-concurrent", "5"];
    flags.extend(extra);
    let python = host("crowd", Sdk::Python).unwrap();
    let report = play(
        python,
        "crowd",
        Transport::Stdio,
        &serve_command(&sandbox, &model, &flags),
    );
    (sandbox, report)
}

#[test]
fn twenty_creates_past_max_concurrent_five_are_refused_with_the_reason() {
    if host("crowd", Sdk::Python).is_none() {
        return;
    }
    let (sandbox, report) = crowd(&[]);
    let answers = report["answers"].as_array().unwrap();
    assert_eq!(answers.len(), 20);
    let started: Vec<&Value> = answers.iter().filter(|a| a["is_error"] == false).collect();
    let refused: Vec<&Value> = answers.iter().filter(|a| a["is_error"] == true).collect();
    assert_eq!(started.len(), 5, "{answers:?}");
    for answer in &refused {
        assert_eq!(answer["structured"]["kind"], "busy");
        let error = answer["structured"]["error"].as_str().unwrap();
        assert!(
            error.contains("--max-concurrent 5") && error.contains("--queue"),
            "{error}"
        );
    }
    for answer in started {
        ended(
            &sandbox,
            answer["structured"]["agent_id"].as_u64().unwrap() as u32,
        );
    }
}

#[test]
fn twenty_creates_with_queue_all_run_five_at_a_time() {
    if host("crowd", Sdk::Python).is_none() {
        return;
    }
    let (sandbox, report) = crowd(&["--queue"]);
    let answers = report["answers"].as_array().unwrap();
    assert!(
        answers.iter().all(|a| a["is_error"] == false),
        "{answers:?}"
    );
    let mut ids: Vec<u64> = answers
        .iter()
        .map(|a| a["structured"]["agent_id"].as_u64().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, (1..=20).collect::<Vec<u64>>());
    for id in 1..=20 {
        assert_eq!(ended(&sandbox, id)["status"], "completed");
    }
}

#[test]
fn bad_input_gets_an_error_that_names_the_field_and_the_server_goes_on() {
    let Some(python) = host("bad_input", Sdk::Python) else {
        return;
    };
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.ws()).unwrap();
    let elsewhere = sandbox.root().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, sandbox.ws().join("outside")).unwrap();
    let model = agents_script(&sandbox, &[], &[5]);
    let report = play(
        python,
        "bad_input",
        Transport::Stdio,
        &serve_command(
            &sandbox,
            &model,
            &["--no-apply", "--isolation", "worktree", "--kill-grace", "1"],
        ),
    );
    let unknown = report["unknown_tool"].as_str().unwrap();
    assert!(
        unknown.contains("no_such_tool") && unknown.contains("create_sub_agent"),
        "{unknown}"
    );
    let expect = [
        ("missing_task", "task"),
        ("mistyped_id", "agent_id"),
        ("unknown_field", "colour"),
        ("timeout_low", "60..=3600"),
        ("timeout_above_ceiling", "--timeout 600"),
        ("dotdot", "`..`"),
        ("absolute", "absolute"),
        ("link", "symbolic link"),
        ("git", "troupe keeps"),
        ("empty_summary", "summary"),
        ("unknown_agent", "no agent 77"),
        ("unknown_wait", "no agent 78"),
        ("unknown_run", "run_nope"),
        ("escaping_run", "run_id"),
        ("goal_and_plan", "not both"),
        ("invalid_plan", "plan is invalid"),
        ("apply_above_ceiling", "--no-apply"),
        ("isolation_below_ceiling", "--isolation worktree"),
        ("in_use", "already running"),
    ];
    for (case, words) in expect {
        let answer = &report[case];
        assert_eq!(answer["is_error"], true, "{case}: {answer}");
        let error = answer["structured"]["error"].as_str().unwrap();
        assert!(
            error.contains(words),
            "{case}: the error does not say {words:?}: {error}"
        );
    }
    assert_eq!(report["first"]["is_error"], false);
    assert_eq!(report["still_answers"]["is_error"], false);
    assert!(
        !elsewhere.join(".subagent").exists(),
        "nothing was made through the link"
    );
    assert!(!sandbox.root().join("out").exists());
}

#[test]
fn an_ordinary_users_server_runs_background_agents_and_stops_a_long_one() {
    let test = "mcp serve as an ordinary user";
    let Some(python) = host(test, Sdk::Python) else {
        return;
    };
    let sandbox = Sandbox::new();
    let model = agents_script(&sandbox, &[1, 2, 3], &[]);
    let Some(server) =
        super::as_ordinary_user(test, &sandbox, serve_command(&sandbox, &model, &[]))
    else {
        return;
    };
    let report = play(python, "background", Transport::Stdio, &server);
    let statuses: Vec<&Value> = report["status"]["structured"]["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["status"])
        .collect();
    assert_eq!(
        statuses,
        ["completed", "completed", "completed"],
        "{report}"
    );

    let sandbox = Sandbox::new();
    let model = agents_script(&sandbox, &[], &[1]);
    let server = serve_command(&sandbox, &model, &["--kill-grace", "2"]);
    let server = super::as_ordinary_user(test, &sandbox, server).unwrap();
    let python = host(test, Sdk::Python).unwrap();
    let report = play(python, "terminate", Transport::Stdio, &server);
    assert_eq!(
        report["stopped"]["structured"]["status"], "terminated",
        "{report}"
    );
    assert_eq!(
        std::fs::read_to_string(sandbox.agent_dir(1).join("part.txt")).unwrap(),
        "half done"
    );
}
