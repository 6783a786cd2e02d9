//! OpenTelemetry traces (issue 25): one trace from a run's plan to each
//! tool command, exported over OTLP/HTTP to a real receiver that decodes
//! it with the official opentelemetry-proto package, the context handed
//! to agents, commands and a launcher's job step, and an export that
//! never holds a run up.

use serde_json::{Value, json};

use crate::common::otlp::{Collector, children, named};
use crate::common::{Sandbox, cli, read_json, run, spawn_command, tool_results};
use crate::faults::{has_event, signal, start_run, wait_exit, wait_for};
use crate::isolation::repository;
use crate::team::{approving_reviewer, planner, step, team_command, worker_rule, worker_writes};

/// A worker that runs `command`, then finishes; each answer costs tokens.
fn runs(command: &str) -> Vec<Value> {
    vec![
        json!({"usage": {"prompt": 120, "completion": 30}, "tool_calls": [{"name": "run_command", "arguments": {"command": command}}]}),
        json!({"usage": {"prompt": 200, "completion": 10}, "tool_calls": [{"name": "finish_task", "arguments": {"success": true, "summary": "ran it"}}]}),
    ]
}

/// The command that prints the context it was started in, and keeps it.
const PRINTS_TRACEPARENT: &str = "printf '[%s]\\n' \"${TRACEPARENT-unset}\" | tee traceparent.txt";

/// One step, `probe`, whose command prints its TRACEPARENT.
fn one_probe_step() -> Vec<Value> {
    vec![
        planner(json!([step("probe", &[])])),
        worker_rule("probe", runs(PRINTS_TRACEPARENT)),
        approving_reviewer(),
    ]
}

/// The scripted model of a `troupe spawn` agent whose command prints its
/// TRACEPARENT.
fn probing_agent(sandbox: &Sandbox) -> String {
    sandbox.script(json!({"rules": [{"role": "worker", "reply": runs(PRINTS_TRACEPARENT)}]}))
}

/// Two steps at once in a repository (so `auto` isolates them and each
/// lands): `probe` prints its command's TRACEPARENT, `b` writes a file.
fn two_isolated_steps() -> Vec<Value> {
    vec![
        planner(json!([step("probe", &[]), step("b", &[])])),
        worker_rule("probe", runs(PRINTS_TRACEPARENT)),
        worker_rule("b", worker_writes("b", 0)),
        approving_reviewer(),
    ]
}

/// The one span named `name` among `spans`.
fn only<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one {name}: {found:#?}");
    found[0]
}

/// The child of `parent` named `name`, which must be the only one.
fn child<'a>(spans: &'a [Value], parent: &Value, name: &str) -> &'a Value {
    let found: Vec<&Value> = children(spans, parent)
        .into_iter()
        .filter(|s| s["name"] == name)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {name} under {}: {found:#?}",
        parent["name"]
    );
    found[0]
}

fn int(span: &Value, key: &str) -> i64 {
    span["attributes"][key]
        .as_i64()
        .unwrap_or_else(|| panic!("{} has no integer {key}: {span:#}", span["name"]))
}

#[test]
fn a_run_is_one_trace_from_its_plan_to_each_command() {
    let Some(collector) = Collector::start("a_run_is_one_trace_from_its_plan_to_each_command")
    else {
        return;
    };
    let sandbox = Sandbox::new();
    repository(&sandbox);
    let mut command = team_command(&sandbox, two_isolated_steps(), &["--max-replans", "0"]);
    command.args(["--otlp-endpoint", &collector.url()]);
    let team = crate::team::finish_team_run(&sandbox, command);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let spans = collector.spans_when(|spans| !named(spans, "troupe.run").is_empty());

    // One trace, the one run.json names and `troupe show` prints.
    let record = team.record();
    let trace = record["trace_id"].as_str().expect("run.json has trace_id");
    assert_eq!(trace.len(), 32, "{trace}");
    assert!(
        spans.iter().all(|s| s["trace_id"] == trace),
        "every span is in the run's trace"
    );
    let run_id = record["run_id"].as_str().unwrap();
    let show = cli(&sandbox, &["show", run_id]);
    assert!(
        show.stdout.contains(&format!("trace {trace}")),
        "{}",
        show.stdout
    );
    assert!(spans.iter().all(|s| {
        s["resource"]["service.name"] == "troupe"
            && s["content_type"] == "application/x-protobuf"
            && s["scope"] == "troupe"
    }));

    // run > planning > its model request.
    let root = only(&spans, "troupe.run");
    assert_eq!(root["parent_span_id"], "", "the run is the trace's root");
    assert_eq!(root["attributes"]["troupe.run.id"], run_id);
    assert_eq!(root["attributes"]["troupe.run.outcome"], "completed");
    assert_eq!(root["attributes"]["troupe.isolation"], "worktree");
    assert_eq!(
        root["attributes"]["troupe.goal.sha256"]
            .as_str()
            .map(str::len),
        Some(64)
    );
    let planning = child(&spans, root, "troupe.planning");
    assert_eq!(int(planning, "troupe.plan.steps"), 2);
    let asked = children(&spans, planning);
    assert_eq!(asked.len(), 1, "{asked:#?}");
    assert_eq!(asked[0]["attributes"]["gen_ai.operation.name"], "chat");
    assert_eq!(asked[0]["kind"], 3, "a model request is a client span");

    // run > step > attempt > worker and reviewer > model requests and
    // tool calls; the attempt's landing; the apply at the end.
    let steps = children(&spans, root)
        .into_iter()
        .filter(|s| s["name"] == "troupe.step")
        .collect::<Vec<_>>();
    let mut ids: Vec<&str> = steps
        .iter()
        .map(|s| s["attributes"]["troupe.step.id"].as_str().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, ["b", "probe"]);
    let probe = steps
        .iter()
        .find(|s| s["attributes"]["troupe.step.id"] == "probe")
        .unwrap();
    assert_eq!(probe["attributes"]["troupe.step.outcome"], "completed");
    let attempt = child(&spans, probe, "troupe.attempt");
    assert_eq!(int(attempt, "troupe.attempt"), 1);
    assert_eq!(attempt["attributes"]["troupe.attempt.outcome"], "completed");
    assert_eq!(
        attempt["status"]["code"], 1,
        "an attempt that made it is ok"
    );
    let worker = child(&spans, attempt, "invoke_agent worker");
    assert_eq!(worker["attributes"]["agent_id"], "probe/worker-1");
    assert_eq!(
        worker["attributes"]["gen_ai.operation.name"],
        "invoke_agent"
    );
    let reviewer = child(&spans, attempt, "invoke_agent reviewer");
    assert_eq!(reviewer["attributes"]["agent_id"], "probe/review-1");
    let landing = child(&spans, attempt, "troupe.landing");
    assert_eq!(landing["attributes"]["troupe.landing.outcome"], "landed");
    child(&spans, root, "troupe.apply");

    let requests: Vec<&Value> = children(&spans, worker)
        .into_iter()
        .filter(|s| s["attributes"]["gen_ai.operation.name"] == "chat")
        .collect();
    assert_eq!(requests.len(), 2, "the worker's two turns");
    for request in &requests {
        assert!(int(request, "gen_ai.usage.input_tokens") > 0);
        assert!(int(request, "gen_ai.usage.output_tokens") > 0);
        assert!(
            request["attributes"]["gen_ai.request.model"]
                .as_str()
                .is_some_and(|m| m.starts_with("scripted:"))
        );
    }
    let reasons: Vec<&Value> = requests
        .iter()
        .map(|r| &r["attributes"]["gen_ai.response.finish_reasons"])
        .collect();
    assert_eq!(reasons, [&json!(["tool_calls"]), &json!(["tool_calls"])]);
    let mut tokens: Vec<i64> = requests
        .iter()
        .map(|r| int(r, "gen_ai.usage.input_tokens"))
        .collect();
    tokens.sort();
    assert_eq!(tokens, [120, 200], "each answer's own count");
    assert_eq!(int(worker, "gen_ai.usage.input_tokens"), 320);
    assert_eq!(int(worker, "gen_ai.usage.output_tokens"), 40);
    // The scripted model costs nothing, and says so.
    assert_eq!(worker["attributes"]["troupe.usage.cost_usd"], 0.0);

    // The command ran in its call's span, and said so.
    let call = child(&spans, worker, "execute_tool run_command");
    assert_eq!(call["attributes"]["gen_ai.tool.name"], "run_command");
    assert_eq!(call["status"]["code"], 1, "the call succeeded");
    assert!(int(call, "troupe.tool.output_bytes") > 0);
    let expected = format!("[00-{trace}-{}-01]", call["span_id"].as_str().unwrap());
    let transcript = read_json(&team.dir.join("probe/worker-1/.subagent/conversations.json"));
    let printed = tool_results(&transcript)[0].to_string();
    assert!(printed.contains(&expected), "{expected} in {printed}");
    let kept = std::fs::read_to_string(sandbox.ws().join("traceparent.txt")).unwrap();
    assert_eq!(kept.trim(), expected, "what the command saw, applied");
}

#[test]
fn a_spawned_agent_is_a_trace_of_its_own_named_by_the_standard_variables() {
    let test = "a_spawned_agent_is_a_trace_of_its_own_named_by_the_standard_variables";
    let Some(collector) = Collector::start(test) else {
        return;
    };
    let sandbox = Sandbox::new();
    let model = probing_agent(&sandbox);
    let mut command = spawn_command(&sandbox, 1, "print the trace context", &model);
    command
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url())
        .env("OTEL_EXPORTER_OTLP_HEADERS", "x-collector-token=s3cret")
        .env("OTEL_SERVICE_NAME", "nightly-agents");
    let spawned = run(command);
    assert_eq!(spawned.code, 0, "{}", spawned.stderr);
    let spans = collector.spans_when(|spans| !named(spans, "invoke_agent worker").is_empty());
    let agent = only(&spans, "invoke_agent worker");
    assert_eq!(agent["parent_span_id"], "", "its own trace's root");
    assert_eq!(agent["resource"]["service.name"], "nightly-agents");
    assert_eq!(agent["headers"]["x-collector-token"], "s3cret");
    let call = child(&spans, agent, "execute_tool run_command");
    let trace = agent["trace_id"].as_str().unwrap();
    let kept = std::fs::read_to_string(sandbox.ws().join("traceparent.txt")).unwrap();
    assert_eq!(
        kept.trim(),
        format!("[00-{trace}-{}-01]", call["span_id"].as_str().unwrap())
    );
    assert!(
        children(&spans, agent)
            .iter()
            .any(|s| s["name"].as_str().unwrap().starts_with("chat "))
    );
}

#[test]
fn a_troupe_started_in_a_trace_joins_it_and_a_resume_goes_on_in_the_runs() {
    let test = "a_troupe_started_in_a_trace_joins_it_and_a_resume_goes_on_in_the_runs";
    let Some(collector) = Collector::start(test) else {
        return;
    };
    let sandbox = Sandbox::new();
    let outer_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let outer_span = "00f067aa0ba902b7";
    // The step's worker fails the first time, so the run can be resumed.
    let rules = vec![
        planner(json!([step("only", &[])])),
        json!({"role": "worker", "step": "only", "attempt": 1, "reply": [{"tool_calls": [{"name": "finish_task", "arguments": {"success": false, "summary": "could not"}}]}]}),
        worker_rule("only", worker_writes("only", 0)),
        approving_reviewer(),
    ];
    let mut command = team_command(&sandbox, rules, &["--max-replans", "0"]);
    command
        .args(["--otlp-endpoint", &collector.url()])
        .env("TRACEPARENT", format!("00-{outer_trace}-{outer_span}-01"));
    let first = crate::team::finish_team_run(&sandbox, command);
    assert_eq!(first.run.code, 1, "{}", first.run.stderr);
    assert_eq!(first.record()["trace_id"], outer_trace);
    let spans = collector.spans_when(|spans| !named(spans, "troupe.run").is_empty());
    let root = only(&spans, "troupe.run");
    assert_eq!(root["trace_id"], outer_trace);
    assert_eq!(
        root["parent_span_id"], outer_span,
        "under the span troupe ran in"
    );

    let run_dir = first.dir.display().to_string();
    let mut resume = crate::common::troupe();
    resume.args([
        "run",
        "--resume",
        &run_dir,
        "--otlp-endpoint",
        &collector.url(),
    ]);
    let resumed = run(resume);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    let spans = collector.spans_when(|spans| named(spans, "troupe.run").len() == 2);
    let runs = named(&spans, "troupe.run");
    assert_eq!(runs.len(), 2, "{runs:#?}");
    let again = runs
        .iter()
        .find(|s| s["span_id"] != root["span_id"])
        .unwrap();
    assert_eq!(
        again["trace_id"], outer_trace,
        "the resume is in the run's trace"
    );
    assert_eq!(again["attributes"]["troupe.resumed"], true);
    assert_eq!(again["attributes"]["troupe.run.outcome"], "completed");
    assert_eq!(
        read_json(&first.dir.join("run.json"))["trace_id"],
        outer_trace
    );
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[test]
fn an_unreachable_collector_is_said_once_and_the_run_goes_on() {
    let sandbox = Sandbox::new();
    let rules = one_probe_step();
    let endpoint = format!("http://127.0.0.1:{}", closed_port());
    let mut command = team_command(&sandbox, rules, &[]);
    command.args(["--otlp-endpoint", &endpoint]);
    let team = crate::team::finish_team_run(&sandbox, command);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let warnings: Vec<&str> = team
        .run
        .stderr
        .lines()
        .filter(|l| l.contains("traces are not reaching"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", team.run.stderr);
    assert!(
        warnings[0].contains(&format!("{endpoint}/v1/traces")),
        "{}",
        warnings[0]
    );
    assert!(
        !team.run.stderr.contains("last spans did not reach"),
        "a collector said to be unreachable is not waited for again: {}",
        team.run.stderr
    );
    // The trace is still the run's, and its context still handed on.
    let trace = team.record()["trace_id"].as_str().unwrap().to_string();
    let kept = std::fs::read_to_string(sandbox.ws().join("traceparent.txt")).unwrap();
    assert!(kept.starts_with(&format!("[00-{trace}-")), "{kept}");
}

#[test]
fn without_an_endpoint_nothing_is_traced_and_no_context_is_handed_on() {
    let sandbox = Sandbox::new();
    let rules = one_probe_step();
    let mut command = team_command(&sandbox, rules, &[]);
    // troupe's own context does not leak to its agents untraced.
    command
        .env(
            "TRACEPARENT",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    let team = crate::team::finish_team_run(&sandbox, command);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    assert!(team.record().get("trace_id").is_none());
    let kept = std::fs::read_to_string(sandbox.ws().join("traceparent.txt")).unwrap();
    assert_eq!(kept.trim(), "[unset]");
    let show = cli(&sandbox, &["show", "last"]);
    assert!(!show.stdout.contains("trace "), "{}", show.stdout);
}

#[test]
fn a_bad_endpoint_is_refused_before_anything_runs() {
    let sandbox = Sandbox::new();
    let mut command = team_command(&sandbox, vec![], &[]);
    command.env("OTEL_EXPORTER_OTLP_ENDPOINT", "127.0.0.1:4318");
    let refused = run(command);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused
            .stderr
            .contains("OTEL_EXPORTER_OTLP_ENDPOINT is `127.0.0.1:4318`")
            && refused.stderr.contains("http://"),
        "{}",
        refused.stderr
    );
    assert!(!sandbox.ws().join("sub_agent_results").exists());
}

#[test]
fn a_launchers_job_step_is_started_in_the_agents_span() {
    let sandbox = Sandbox::new();
    let seen = sandbox.root().join("launcher-traceparent.txt");
    let launcher = sandbox.executable(
        "launch",
        &format!(
            "printf '%s %s\\n' \"${{TRACEPARENT-unset}}\" \"${{TRACESTATE-unset}}\" >> {}\nexec \"$@\"",
            seen.display()
        ),
    );
    let rules = vec![
        planner(json!([step("s", &[])])),
        worker_rule("s", worker_writes("s", 0)),
        approving_reviewer(),
    ];
    let endpoint = format!("http://127.0.0.1:{}", closed_port());
    let mut command = team_command(
        &sandbox,
        rules,
        &["--launcher", &launcher.display().to_string()],
    );
    command
        .args(["--otlp-endpoint", &endpoint])
        .env("TRACESTATE", "ci=nightly");
    let team = crate::team::finish_team_run(&sandbox, command);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let trace = team.record()["trace_id"].as_str().unwrap().to_string();
    let lines: Vec<String> = std::fs::read_to_string(&seen)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(lines.len(), 2, "the worker and the reviewer: {lines:?}");
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with(&format!("00-{trace}-")) && l.ends_with("-01 ci=nightly")),
        "the agent's span, and troupe's own TRACESTATE passed on: {lines:?}"
    );
    assert_ne!(lines[0], lines[1], "each agent its own span");
}

#[test]
fn a_run_cut_short_by_ctrl_c_or_its_deadline_still_sends_its_spans() {
    let test = "a_run_cut_short_by_ctrl_c_or_its_deadline_still_sends_its_spans";
    let Some(collector) = Collector::start(test) else {
        return;
    };
    let slow = || {
        vec![
            planner(json!([step("slow", &[])])),
            worker_rule("slow", worker_writes("slow", 30_000)),
            approving_reviewer(),
        ]
    };
    let endpoint = collector.url();

    let interrupted = Sandbox::new();
    let mut run = start_run(&interrupted, slow(), &["--otlp-endpoint", &endpoint]);
    wait_for("the slow step to start", || {
        has_event(&interrupted, "step_started", "slow")
    });
    signal(&run, "-INT");
    assert_eq!(wait_exit(&mut run), 130);

    let deadline = Sandbox::new();
    let mut command = team_command(&deadline, slow(), &["--deadline", "2"]);
    command.args(["--otlp-endpoint", &endpoint]);
    let ran_out = crate::team::finish_team_run(&deadline, command);
    assert_eq!(ran_out.run.code, 124, "{}", ran_out.run.stderr);

    let spans = collector.spans_when(|spans| named(spans, "troupe.run").len() == 2);
    let mut outcomes: Vec<&str> = named(&spans, "troupe.run")
        .iter()
        .map(|s| s["attributes"]["troupe.run.outcome"].as_str().unwrap())
        .collect();
    outcomes.sort();
    assert_eq!(outcomes, ["deadline_exceeded", "interrupted"], "{spans:#?}");
    let workers = named(&spans, "invoke_agent worker");
    assert_eq!(workers.len(), 2, "{workers:#?}");
    assert!(
        workers
            .iter()
            .all(|w| w["attributes"]["troupe.agent.status"] == "terminated"
                && w["status"]["code"] == 2),
        "{workers:#?}"
    );
}

#[test]
fn a_background_agent_is_traced_by_its_supervisor() {
    let test = "a_background_agent_is_traced_by_its_supervisor";
    let Some(collector) = Collector::start(test) else {
        return;
    };
    let sandbox = Sandbox::new();
    let model = probing_agent(&sandbox);
    let mut command = spawn_command(&sandbox, 4, "print the trace context", &model);
    command.arg("--background").env(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        format!("{}/v1/traces", collector.url()),
    );
    let started = run(command);
    assert_eq!(started.code, 0, "{}", started.stderr);
    assert_eq!(cli(&sandbox, &["wait", "4", "--timeout", "60"]).code, 0);
    let spans = collector.spans_when(|spans| !named(spans, "invoke_agent worker").is_empty());
    let agent = only(&spans, "invoke_agent worker");
    assert_eq!(agent["parent_span_id"], "");
    assert_eq!(agent["attributes"]["troupe.agent.status"], "completed");
    let call = child(&spans, agent, "execute_tool run_command");
    let kept = std::fs::read_to_string(sandbox.ws().join("traceparent.txt")).unwrap();
    assert_eq!(
        kept.trim(),
        format!(
            "[00-{}-{}-01]",
            agent["trace_id"].as_str().unwrap(),
            call["span_id"].as_str().unwrap()
        )
    );
}

#[test]
fn a_child_that_reports_calls_without_results_gets_no_more_than_64_open_spans() {
    let test = "a_child_that_reports_calls_without_results_gets_no_more_than_64_open_spans";
    let Some(collector) = Collector::start(test) else {
        return;
    };
    let sandbox = Sandbox::new();
    // A stand-in agent: 500 calls it never ends, then a whole one, then
    // its report.
    let body = r#"echo '{"type":"hello","protocol":1,"agent_id":1,"role":"worker","pid":'$$'}'
i=0
while [ $i -lt 500 ]; do
  echo '{"type":"tool_call","call_id":"c'$i'","name":"read_file","arguments":{}}'
  i=$((i+1))
done
echo '{"type":"tool_call","call_id":"last","name":"write_file","arguments":{}}'
echo '{"type":"tool_result","call_id":"last","success":true,"summary":"ok","changed":false,"bytes":3}'
echo '{"type":"finished","success":true,"summary":"done"}'"#;
    let child = sandbox.executable("fake-agent", body);
    let model = sandbox.script(json!({"rules": [{"reply": [{"content": "unused"}]}]}));
    let mut command = spawn_command(&sandbox, 1, "flood", &model);
    command
        .args(["--agent-bin", child.to_str().unwrap()])
        .args(["--otlp-endpoint", &collector.url()]);
    let spawned = run(command);
    assert_eq!(spawned.code, 0, "{}", spawned.stderr);
    let spans = collector.spans_when(|spans| !named(spans, "invoke_agent worker").is_empty());
    let calls: Vec<&Value> = spans
        .iter()
        .filter(|s| s["name"].as_str().unwrap().starts_with("execute_tool"))
        .collect();
    assert_eq!(calls.len(), 64, "the open ones, ended with their agent");
    assert!(
        named(&spans, "execute_tool write_file").is_empty(),
        "past the cap no span is made, not even for a call that ends"
    );
}

#[test]
fn a_collector_that_never_answers_costs_one_export_timeout_and_one_warning() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    // Takes every connection and never answers.
    std::thread::spawn(move || {
        let held: Vec<_> = listener.incoming().collect();
        drop(held);
    });
    let sandbox = Sandbox::new();
    let rules = vec![
        planner(json!([step("s", &[])])),
        worker_rule("s", worker_writes("s", 0)),
        approving_reviewer(),
    ];
    let mut command = team_command(&sandbox, rules, &[]);
    command
        .args(["--otlp-endpoint", &endpoint])
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "300");
    let team = crate::team::finish_team_run(&sandbox, command);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let warnings: Vec<&str> = team
        .run
        .stderr
        .lines()
        .filter(|l| l.contains("traces are not reaching") || l.contains("last spans did not reach"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", team.run.stderr);
    assert!(warnings[0].contains(&endpoint), "{}", warnings[0]);
}

#[test]
fn a_run_as_an_ordinary_user_hands_its_commands_their_spans() {
    let test = "a_run_as_an_ordinary_user_hands_its_commands_their_spans";
    let Some(collector) = Collector::start(test) else {
        return;
    };
    let sandbox = Sandbox::new();
    let rules = one_probe_step();
    let mut command = team_command(&sandbox, rules, &[]);
    command.args(["--otlp-endpoint", &collector.url()]);
    let mut command = crate::hostile::unprivileged(&sandbox, command);
    command.env("HOME", sandbox.root());
    let team = crate::team::finish_team_run(&sandbox, command);
    assert_eq!(team.run.code, 0, "{}", team.run.stderr);
    let spans = collector.spans_when(|spans| !named(spans, "troupe.run").is_empty());
    let worker = only(&spans, "invoke_agent worker");
    let call = child(&spans, worker, "execute_tool run_command");
    let kept = std::fs::read_to_string(sandbox.ws().join("traceparent.txt")).unwrap();
    assert_eq!(
        kept.trim(),
        format!(
            "[00-{}-{}-01]",
            call["trace_id"].as_str().unwrap(),
            call["span_id"].as_str().unwrap()
        )
    );
}
