//! Property tests of the wire: any line decodes to a message or a
//! protocol error, never a panic, and every message survives encoding.

use proptest::prelude::*;
use serde_json::json;

use super::{AgentStats, FromChild, ToChild, decode_line, encode_line};
use crate::chat::{Message, Usage};

fn from_child() -> impl Strategy<Value = FromChild> {
    prop_oneof![
        (".{0,60}", ".{0,60}", ".{0,60}").prop_map(|(call_id, name, arg)| FromChild::ToolCall {
            call_id,
            name,
            arguments: json!({"path": arg}),
        }),
        (
            ".{0,40}",
            any::<bool>(),
            ".{0,80}",
            any::<bool>(),
            any::<u64>()
        )
            .prop_map(|(call_id, success, summary, changed, bytes)| {
                FromChild::ToolResult {
                    call_id,
                    success,
                    summary,
                    changed,
                    bytes,
                }
            }),
        (0.0f64..1e6, any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(secs, a, b, c)| {
            FromChild::Stats(AgentStats {
                runtime_seconds: secs,
                files_read: a.into(),
                searches: b.into(),
                commands: c.into(),
                token_usage: Usage::new(a.into(), b.into()),
                ..AgentStats::default()
            })
        }),
        ".{0,200}".prop_map(FromChild::error),
    ]
}

proptest! {
    #[test]
    fn arbitrary_lines_never_panic(line in ".{0,300}") {
        let _ = decode_line::<FromChild>(&line);
        let _ = decode_line::<ToChild>(&line);
    }

    #[test]
    fn arbitrary_json_objects_never_panic(kind in "[a-z_]{0,12}", body in ".{0,100}") {
        let line = json!({"type": kind, "message": body, "id": 1, "success": true}).to_string();
        let _ = decode_line::<FromChild>(&line);
        let _ = decode_line::<ToChild>(&line);
    }

    #[test]
    fn messages_from_a_child_round_trip(message in from_child()) {
        let line = encode_line(&message);
        prop_assert!(line.ends_with('\n') && !line[..line.len() - 1].contains('\n'));
        prop_assert_eq!(decode_line::<FromChild>(line.trim_end()).unwrap(), message);
    }

    #[test]
    fn answers_to_a_child_round_trip(id in any::<u64>(), content in ".{0,200}", prompt in any::<u32>()) {
        let message = ToChild::LlmResponse {
            id,
            message: Message::assistant(content),
            usage: Usage::new(prompt.into(), 1),
            truncated: prompt % 2 == 0,
        };
        let line = encode_line(&message);
        prop_assert_eq!(decode_line::<ToChild>(line.trim_end()).unwrap(), message);
    }
}
