//! W3C trace context as both binaries speak it: `TRACEPARENT` in a
//! process's environment names the span it runs under.
//!
//! troupe makes every span of a run; an agent makes none and links no
//! exporter. It only passes a span on: each of its tool calls gets the
//! span id `tool_call` derives from the agent's own span and the call's
//! place in the order the agent reported them, which troupe, counting
//! the same `tool_call` lines, derives too. So a command's `TRACEPARENT`
//! names the span troupe records for that call without any id crossing
//! the pipe.

use std::fmt;

/// The variable a process's trace context is in.
pub const TRACEPARENT_ENV: &str = "TRACEPARENT";
/// Vendor data that travels with it, passed on as it came.
pub const TRACESTATE_ENV: &str = "TRACESTATE";

/// One span of one trace, as `traceparent` writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: u128,
    pub span_id: u64,
    pub sampled: bool,
}

impl TraceParent {
    /// Reads `00-<32 hex>-<16 hex>-<2 hex>`; `None` for anything else, and
    /// for the all-zero ids the spec calls invalid.
    pub fn parse(text: &str) -> Option<TraceParent> {
        let mut parts = text.trim().split('-');
        let (version, trace, span, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let hex = |s: &str, len: usize| {
            s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        // Version ff is forbidden; a later version may add fields.
        if !hex(version, 2) || version == "ff" || (version == "00" && parts.next().is_some()) {
            return None;
        }
        if !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
            return None;
        }
        let trace_id = u128::from_str_radix(trace, 16).ok()?;
        let span_id = u64::from_str_radix(span, 16).ok()?;
        let flags = u8::from_str_radix(flags, 16).ok()?;
        (trace_id != 0 && span_id != 0).then_some(TraceParent {
            trace_id,
            span_id,
            sampled: flags & 1 == 1,
        })
    }

    /// This process's own, from its environment.
    pub fn from_env() -> Option<TraceParent> {
        TraceParent::parse(&std::env::var(TRACEPARENT_ENV).ok()?)
    }

    /// The span of the `seq`-th tool call (from 1) an agent whose span this
    /// is reported: a child of it, with an id both sides derive alike.
    pub fn tool_call(&self, seq: u64) -> TraceParent {
        TraceParent {
            span_id: derived_span_id(self.span_id, seq),
            ..*self
        }
    }

    pub fn trace_hex(&self) -> String {
        format!("{:032x}", self.trace_id)
    }

    pub fn span_hex(&self) -> String {
        format!("{:016x}", self.span_id)
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{:032x}-{:016x}-{:02x}",
            self.trace_id,
            self.span_id,
            u8::from(self.sampled)
        )
    }
}

/// splitmix64 of the parent's id and the call's place: distinct for
/// distinct places, spread over the whole range, never zero.
fn derived_span_id(parent: u64, seq: u64) -> u64 {
    let mut z = parent ^ seq.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    match z ^ (z >> 31) {
        0 => 1,
        id => id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_reads_back_as_written() {
        let tp = TraceParent {
            trace_id: 0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736,
            span_id: 0x00f0_67aa_0ba9_02b7,
            sampled: true,
        };
        let text = tp.to_string();
        assert_eq!(
            text,
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        assert_eq!(TraceParent::parse(&text), Some(tp));
    }

    #[test]
    fn malformed_and_invalid_contexts_are_refused() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn tool_call_spans_differ_from_each_other_and_from_their_agent() {
        let agent = TraceParent {
            trace_id: 7,
            span_id: 42,
            sampled: true,
        };
        let ids: std::collections::HashSet<u64> =
            (1..=1000).map(|seq| agent.tool_call(seq).span_id).collect();
        assert_eq!(ids.len(), 1000);
        assert!(!ids.contains(&42));
        assert_eq!(agent.tool_call(3).trace_id, 7);
    }
}
