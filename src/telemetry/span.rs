//! A span being made: its ids, times, attributes and events, handed to
//! the exporter when it ends.
//!
//! troupe builds the span's record itself rather than through an SDK
//! tracer, because it must choose ids a tracer would not let it: a tool
//! call's span has the id its agent derived (`TraceParent::tool_call`),
//! and a resumed run goes on in the trace it began in. Without an
//! exporter every span is nothing, and costs nothing.

use std::borrow::Cow;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use opentelemetry::trace::{
    Event, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SpanData, SpanEvents, SpanLinks};

use super::export;
use crate::protocol::TraceParent;

/// A span of the run's trace; clones are the same span, which ends when
/// `end` is called or the last clone is dropped.
#[derive(Clone, Default)]
pub struct Span(Option<Arc<Mutex<Open>>>);

struct Open {
    at: TraceParent,
    parent: Option<u64>,
    parent_is_remote: bool,
    name: Cow<'static, str>,
    kind: SpanKind,
    start: SystemTime,
    attributes: Vec<KeyValue>,
    events: Vec<Event>,
    status: Status,
    ended: bool,
}

impl Span {
    /// The span of a whole run (or of a `troupe spawn`): in `trace` when
    /// it goes on in one, else under the span troupe was started in, else
    /// a new trace's root.
    pub fn root(name: impl Into<Cow<'static, str>>, trace: Option<u128>) -> Span {
        let Some(exporter) = export::current() else {
            return Span(None);
        };
        let ids = RandomIdGenerator::default();
        let span_id = u64::from_be_bytes(ids.new_span_id().to_bytes());
        let (at, parent) = match (trace, exporter.incoming) {
            (Some(trace_id), _) => (traced(trace_id, span_id), None),
            (None, Some(outer)) => (TraceParent { span_id, ..outer }, Some(outer.span_id)),
            (None, None) => {
                let trace_id = u128::from_be_bytes(ids.new_trace_id().to_bytes());
                (traced(trace_id, span_id), None)
            }
        };
        let remote = parent.is_some();
        Span::open(name, at, parent, remote, SpanKind::Internal)
    }

    /// A child of the span `parent` names; nothing without one.
    pub fn under(parent: Option<TraceParent>, name: impl Into<Cow<'static, str>>) -> Span {
        let span_id = u64::from_be_bytes(RandomIdGenerator::default().new_span_id().to_bytes());
        Span::with_id(parent, span_id, name)
    }

    /// A child of `parent` whose id was chosen already (a tool call's).
    pub fn with_id(
        parent: Option<TraceParent>,
        span_id: u64,
        name: impl Into<Cow<'static, str>>,
    ) -> Span {
        match (parent, export::current()) {
            (Some(parent), Some(_)) => Span::open(
                name,
                TraceParent { span_id, ..parent },
                Some(parent.span_id),
                false,
                SpanKind::Internal,
            ),
            _ => Span(None),
        }
    }

    /// A child of this span.
    pub fn child(&self, name: impl Into<Cow<'static, str>>) -> Span {
        Span::under(self.context(), name)
    }

    fn open(
        name: impl Into<Cow<'static, str>>,
        at: TraceParent,
        parent: Option<u64>,
        parent_is_remote: bool,
        kind: SpanKind,
    ) -> Span {
        Span(Some(Arc::new(Mutex::new(Open {
            at,
            parent,
            parent_is_remote,
            name: name.into(),
            kind,
            start: SystemTime::now(),
            attributes: Vec::new(),
            events: Vec::new(),
            status: Status::Unset,
            ended: false,
        }))))
    }

    /// What names this span to a child process, or to a child span.
    pub fn context(&self) -> Option<TraceParent> {
        self.with(|open| open.at)
    }

    /// Marks the span as a client's call of another service (a model
    /// request).
    pub fn client(self) -> Span {
        self.with(|open| open.kind = SpanKind::Client);
        self
    }

    pub fn set(&self, key: &'static str, value: impl Into<Value>) {
        self.with(|open| open.attributes.push(KeyValue::new(key, value.into())));
    }

    pub fn event(&self, name: &'static str, attributes: Vec<KeyValue>) {
        self.with(|open| {
            open.events
                .push(Event::new(name, SystemTime::now(), attributes, 0))
        });
    }

    /// The tokens of `usage`, as the GenAI conventions name them, and
    /// troupe's count of the cached ones and of the cost, where known.
    pub fn tokens(&self, usage: crate::chat::Usage) {
        self.set("gen_ai.usage.input_tokens", usage.prompt as i64);
        self.set("gen_ai.usage.output_tokens", usage.completion as i64);
        if usage.cached > 0 {
            self.set("troupe.usage.cached_tokens", usage.cached as i64);
        }
        if let Some(dollars) = usage.cost() {
            self.set("troupe.usage.cost_usd", dollars);
        }
    }

    /// The span's work failed, for this reason.
    pub fn fail(&self, why: impl Into<String>) {
        let description: Cow<'static, str> = crate::text::excerpt(&why.into(), 500).into();
        self.with(|open| open.status = Status::Error { description });
    }

    /// The span's work succeeded.
    pub fn succeed(&self) {
        self.with(|open| open.status = Status::Ok);
    }

    /// Ends the span without exporting it: it stood for nothing.
    pub fn discard(&self) {
        self.with(|open| open.ended = true);
    }

    /// Ends the span now and hands it to the exporter; later calls do
    /// nothing.
    pub fn end(&self) {
        let Some(exporter) = export::current() else {
            return;
        };
        let Some(data) = self.with(|open| open.finish(&exporter.scope)).flatten() else {
            return;
        };
        exporter.send(data);
    }

    fn with<T>(&self, f: impl FnOnce(&mut Open) -> T) -> Option<T> {
        let open = self.0.as_ref()?;
        let mut open = open.lock().unwrap_or_else(PoisonError::into_inner);
        Some(f(&mut open))
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        if self
            .0
            .as_ref()
            .is_some_and(|open| Arc::strong_count(open) == 1)
        {
            self.end();
        }
    }
}

impl Open {
    fn finish(&mut self, scope: &opentelemetry::InstrumentationScope) -> Option<SpanData> {
        if std::mem::replace(&mut self.ended, true) {
            return None;
        }
        let flags = match self.at.sampled {
            true => TraceFlags::SAMPLED,
            false => TraceFlags::default(),
        };
        let context = SpanContext::new(
            TraceId::from_bytes(self.at.trace_id.to_be_bytes()),
            SpanId::from_bytes(self.at.span_id.to_be_bytes()),
            flags,
            false,
            TraceState::default(),
        );
        let mut events = SpanEvents::default();
        events.events = std::mem::take(&mut self.events);
        Some(SpanData {
            span_context: context,
            parent_span_id: SpanId::from_bytes(self.parent.unwrap_or(0).to_be_bytes()),
            parent_span_is_remote: self.parent_is_remote,
            span_kind: self.kind.clone(),
            name: self.name.clone(),
            start_time: self.start,
            end_time: SystemTime::now(),
            attributes: std::mem::take(&mut self.attributes),
            dropped_attributes_count: 0,
            events,
            links: SpanLinks::default(),
            status: self.status.clone(),
            instrumentation_scope: scope.clone(),
        })
    }
}

fn traced(trace_id: u128, span_id: u64) -> TraceParent {
    TraceParent {
        trace_id,
        span_id,
        sampled: true,
    }
}
