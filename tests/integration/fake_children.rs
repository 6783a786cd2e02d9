//! Children that misbehave, written as shell scripts standing in for
//! troupe-agent: the parent depends on the wire format and nothing else,
//! and no misbehaviour hangs or crashes it.

use std::time::Duration;

use serde_json::json;

use crate::common::{Run, Sandbox, alive, read_pid, spawn};

const HELLO: &str =
    r#"echo '{"type":"hello","protocol":1,"agent_id":1,"role":"worker","pid":'$$'}'"#;

fn with_child(sandbox: &Sandbox, body: &str, extra: &[&str]) -> Run {
    let child = sandbox.executable("fake-agent", body);
    let model = sandbox.script(json!({"rules": [{"reply": [{"content": "unused"}]}]}));
    let mut args = vec!["--agent-bin", child.to_str().unwrap()];
    args.extend_from_slice(extra);
    spawn(sandbox, 1, "misbehave", &model, &args)
}

#[test]
fn a_silent_child_hits_the_idle_watchdog() {
    let sandbox = Sandbox::new();
    let pid_file = sandbox.root().join("child.pid");
    let body = format!("{HELLO}\necho $$ > {}\nexec sleep 300", pid_file.display());
    let run = with_child(
        &sandbox,
        &body,
        &["--idle-timeout", "1", "--kill-grace", "1"],
    );
    assert_eq!(run.code, 1);
    assert!(run.elapsed < Duration::from_secs(30), "{:?}", run.elapsed);
    let result = run.json();
    assert_eq!(result["status"], "idle_timeout");
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .contains("sent nothing for 1 s")
    );
    assert!(!alive(read_pid(&pid_file)), "the hung child was killed");
    let transcript = sandbox.transcript(1);
    assert_eq!(
        transcript["status"], "idle_timeout",
        "a transcript exists even when the child wrote none"
    );
}

#[test]
fn garbage_on_stdout_is_a_protocol_error() {
    let sandbox = Sandbox::new();
    let run = with_child(
        &sandbox,
        &format!("{HELLO}\necho 'this is not json'\nsleep 300"),
        &["--kill-grace", "1"],
    );
    assert_eq!(run.code, 1);
    let result = run.json();
    assert_eq!(result["status"], "error");
    let error = result["error"].as_str().unwrap();
    assert!(
        error.contains("protocol error") && error.contains("this is not json"),
        "{error}"
    );
}

#[test]
fn a_child_that_exits_without_a_result_is_an_error_quoting_its_stderr() {
    let sandbox = Sandbox::new();
    let run = with_child(
        &sandbox,
        &format!("{HELLO}\necho 'disk on fire' >&2\nexit 3"),
        &[],
    );
    assert_eq!(run.code, 1);
    let error = run.json()["error"].as_str().unwrap().to_string();
    assert!(error.contains("exited with code 3"), "{error}");
    assert!(error.contains("disk on fire"), "quotes stderr.log: {error}");
}

#[test]
fn a_missing_hello_is_a_protocol_error() {
    let sandbox = Sandbox::new();
    let line = r#"echo '{"type":"stats","files_read":1}'"#;
    let run = with_child(
        &sandbox,
        &format!("{line}\nsleep 300"),
        &["--kill-grace", "1"],
    );
    let error = run.json()["error"].as_str().unwrap().to_string();
    assert!(error.contains("first line must be `hello`"), "{error}");
}

#[test]
fn unknown_messages_are_skipped_and_a_report_is_taken() {
    let sandbox = Sandbox::new();
    let body = format!(
        "{HELLO}\necho '{{\"type\":\"future_thing\",\"x\":1}}'\n\
         echo '{{\"type\":\"finished\",\"success\":true,\"summary\":\"fake done\",\"deliverables_files\":[\"x.txt\"],\"extra\":1}}'\n\
         sleep 300"
    );
    let run = with_child(&sandbox, &body, &["--kill-grace", "1"]);
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    let result = run.json();
    assert_eq!(result["status"], "completed");
    assert_eq!(result["result_summary"], "fake done");
    assert_eq!(result["deliverables_files"], json!(["x.txt"]));
    assert!(
        run.stderr.contains("unknown type `future_thing`"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_line_over_the_cap_is_a_protocol_error_not_a_crash() {
    let sandbox = Sandbox::new();
    // 17 MiB without a newline: over the 16 MiB cap.
    let body = format!("{HELLO}\nhead -c 17825792 /dev/zero | tr '\\0' 'a'\nsleep 300");
    let run = with_child(&sandbox, &body, &["--kill-grace", "1"]);
    assert_eq!(run.code, 1);
    let error = run.json()["error"].as_str().unwrap().to_string();
    assert!(error.contains("16777216-byte limit"), "{error}");
}

#[test]
fn the_model_is_served_to_any_child_that_speaks_the_protocol() {
    let sandbox = Sandbox::new();
    let script = sandbox.script(json!({"rules": [{"role": "worker", "step": "1", "reply": [{"content": "from the parent"}]}]}));
    let body = format!(
        "{HELLO}\necho '{{\"type\":\"llm_request\",\"id\":5,\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}'\n\
         read answer\n\
         case \"$answer\" in *'\"id\":5'*'from the parent'*) ok=true;; *) ok=false;; esac\n\
         echo '{{\"type\":\"finished\",\"success\":'$ok',\"summary\":\"checked the answer\"}}'"
    );
    let child = sandbox.executable("fake-agent", &body);
    let run = spawn(
        &sandbox,
        1,
        "ask",
        &script,
        &["--agent-bin", child.to_str().unwrap()],
    );
    assert_eq!(
        run.code, 0,
        "stderr:\n{}\nstdout:\n{}",
        run.stderr, run.stdout
    );
}

#[test]
fn a_child_flooding_model_requests_is_stopped() {
    let sandbox = Sandbox::new();
    let request = r#"{"type":"llm_request","id":'$i',"messages":[]}"#;
    let body =
        format!("{HELLO}\nfor i in 1 2 3 4 5 6 7 8 9 10; do echo '{request}'; done\nsleep 300");
    let script =
        sandbox.script(json!({"latency_ms": 5000, "rules": [{"reply": [{"content": "slow"}]}]}));
    let child = sandbox.executable("fake-agent", &body);
    let run = spawn(
        &sandbox,
        1,
        "flood",
        &script,
        &["--agent-bin", child.to_str().unwrap(), "--kill-grace", "1"],
    );
    assert_eq!(run.code, 1);
    let error = run.json()["error"].as_str().unwrap().to_string();
    assert!(
        error.contains("more than 8 model requests at once"),
        "{error}"
    );
    assert!(
        run.elapsed < std::time::Duration::from_secs(30),
        "pending requests were abandoned"
    );
}
