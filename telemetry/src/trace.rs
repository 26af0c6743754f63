//! The spans of a request: sampled through the SDK's sampler, recorded by mvproxy itself.
//!
//! A request has two spans (a `SERVER` span and a `CLIENT` span per upstream attempt), and
//! they sit on every request, so they cost what the sampler costs and little more:
//!
//! - no exporter configured: a [`RequestSpan`] is empty, and every operation on it returns at
//!   once (the client's trace headers pass through untouched);
//! - an exporter, and the sampler drops the span: the span keeps only its ids (they travel to
//!   the upstream with the sampled flag off) and the parent's baggage. The `CLIENT` span gets
//!   a new span id without asking the sampler again (every sampler `OTEL_TRACES_SAMPLER` can
//!   name drops the child of a dropped span, and keeps the child of a kept one: the
//!   parent-based ones by the parent's flag, the ratio by the same trace id), its name is
//!   never formatted, and `traceparent` is written without the formatting machinery;
//! - the sampler keeps the span: it records into one plain struct (attributes, events, the
//!   error flag, the start time), and callers build attributes and events only when
//!   [`RequestSpan::is_recording`].
//!
//! An ended span is handed to the export queue ([`crate::export`]) as it is. With every
//! request sampled, the SDK's span objects, its processor pipeline and its conversion to the
//! generated protobuf types cost about 11 µs of CPU per request over no export; this record, a
//! lock, and an encoding straight from it on the export thread cost about 5 µs
//! (`bench/PERF_NOTES.md`, sixth round).

use std::borrow::Cow;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use http::HeaderMap;
use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, SpanKind, TraceContextExt, TraceFlags};
use opentelemetry_sdk::trace::{
    IdGenerator, RandomIdGenerator, Sampler, SamplingDecision, ShouldSample,
};

/// An attribute of a span or event, and its value.
pub use opentelemetry::{KeyValue, StringValue, Value};

use crate::export::Exporter;
use crate::otlp::{Event, SpanRecord};
use crate::propagation;

/// Where the request spans start: the sampler and the export queue when an exporter is
/// configured ([`crate::init`] gives one, through [`TelemetryGuard::tracer`]), nothing
/// otherwise ([`Tracer::none`], what tests and tools that export nothing pass).
///
/// A server keeps a clone with the rest of its state and starts each request's span from it;
/// a clone is a reference count. Its spans reach the export queue through it even after the
/// guard is dropped (then they are dropped and counted, as spans ended after shutdown).
///
/// [`TelemetryGuard::tracer`]: crate::TelemetryGuard::tracer
#[derive(Clone, Default)]
pub struct Tracer {
    pipeline: Option<Arc<Pipeline>>,
}

/// The sampler and the export queue.
struct Pipeline {
    sampler: Sampler,
    exporter: Arc<Exporter>,
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer")
            .field("enabled", &self.enabled())
            .finish()
    }
}

impl Tracer {
    /// A tracer that records nothing: its spans are empty, and trace headers pass through.
    pub fn none() -> Self {
        Self { pipeline: None }
    }

    /// `sampler` decides, `exporter` receives the ended spans.
    pub(crate) fn new(sampler: Sampler, exporter: Arc<Exporter>) -> Self {
        Self {
            pipeline: Some(Arc::new(Pipeline { sampler, exporter })),
        }
    }

    /// Whether spans are exported at all (an exporter is configured).
    pub fn enabled(&self) -> bool {
        self.pipeline.is_some()
    }

    /// Declares the span export families in `registry` (`mvproxy_spans_exported_total`,
    /// `mvproxy_spans_dropped_total{reason}`, `mvproxy_span_export_requests_total{outcome}`,
    /// `mvproxy_span_export_queue_length`, `mvproxy_span_export_queue_capacity`), read from
    /// this tracer's export queue at each scrape; all zero when spans are not exported.
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        crate::export::register_metrics(
            registry,
            self.pipeline.as_ref().map(|p| p.exporter.clone()),
        );
    }
}

/// One span of a request, or nothing when traces are not exported. Ends on [`end`](Self::end)
/// (or when dropped).
#[derive(Debug, Default)]
pub struct RequestSpan {
    state: State,
}

#[derive(Debug, Default)]
enum State {
    /// No exporter: no span, no context.
    #[default]
    Off,
    /// Dropped by the sampler: its ids, and the parent context (for its baggage).
    Unsampled { sc: SpanContext, parent: Context },
    /// Sampled: its ids, the parent context, and the record (until the span ends).
    Recording(Box<Recording>),
}

struct Recording {
    sc: SpanContext,
    parent: Context,
    record: Mutex<Option<SpanRecord>>,
    /// Where the span goes when it ends.
    exporter: Arc<Exporter>,
}

impl std::fmt::Debug for Recording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recording")
            .field("sc", &self.sc)
            .field("parent", &self.parent)
            .field("record", &self.record)
            .finish_non_exhaustive()
    }
}

/// The ids of a span, for log lines and exemplars.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceIds {
    /// 32 lowercase hex digits.
    pub trace_id: String,
    /// 16 lowercase hex digits.
    pub span_id: String,
    /// Whether the span is sampled (exported).
    pub sampled: bool,
}

impl RequestSpan {
    /// A span that records nothing and carries no context.
    pub fn none() -> Self {
        Self { state: State::Off }
    }

    /// The `SERVER` span of a request, child of the trace context in its `headers` (W3C
    /// `traceparent`, `tracestate`, `baggage`); an invalid or absent `traceparent` starts a new
    /// trace. `name` is called only when the span is sampled; without an exporter in `tracer`
    /// the span is empty.
    pub fn server(
        tracer: &Tracer,
        headers: &HeaderMap,
        name: impl FnOnce() -> Cow<'static, str>,
    ) -> Self {
        let Some(pipeline) = &tracer.pipeline else {
            return Self::none();
        };
        let parent = propagation::extract(headers);
        // The trace, flags and span id the parent gives (a new trace without a valid one).
        let (trace_id, flags, from) = {
            let span = parent.span();
            let psc = span.span_context();
            if psc.is_valid() {
                let from = (psc.span_id().to_bytes(), psc.is_remote());
                (psc.trace_id(), psc.trace_flags(), Some(from))
            } else {
                let id = RandomIdGenerator::default().new_trace_id();
                (id, TraceFlags::default(), None)
            }
        };
        // No sampler that `OTEL_TRACES_SAMPLER` names reads the span's name: it is formatted
        // only for a span that records.
        let result = pipeline.sampler.should_sample(
            Some(&parent),
            trace_id,
            "",
            &SpanKind::Server,
            &[],
            &[],
        );
        let sampled = result.decision == SamplingDecision::RecordAndSample;
        let sc = SpanContext::new(
            trace_id,
            RandomIdGenerator::default().new_span_id(),
            flags.with_sampled(sampled),
            false,
            result.trace_state,
        );
        let state = if sampled {
            let exporter = pipeline.exporter.clone();
            Self::recording(sc, parent, from, name(), SpanKind::Server, exporter)
        } else {
            State::Unsampled { sc, parent }
        };
        Self { state }
    }

    /// A `CLIENT` span, child of this one (empty when this one is, unsampled when this one
    /// is).
    pub fn client(&self, name: impl FnOnce() -> Cow<'static, str>) -> Self {
        self.child(name, SpanKind::Client)
    }

    /// An `INTERNAL` span, child of this one (empty when this one is, unsampled when this one
    /// is): work of the request that outlives its response headers, such as a watch.
    pub fn internal(&self, name: impl FnOnce() -> Cow<'static, str>) -> Self {
        self.child(name, SpanKind::Internal)
    }

    fn child(&self, name: impl FnOnce() -> Cow<'static, str>, kind: SpanKind) -> Self {
        let child = |sc: &SpanContext| {
            SpanContext::new(
                sc.trace_id(),
                RandomIdGenerator::default().new_span_id(),
                sc.trace_flags(),
                false,
                sc.trace_state().clone(),
            )
        };
        let state = match &self.state {
            State::Recording(r) => Self::recording(
                child(&r.sc),
                r.parent.clone(),
                Some((r.sc.span_id().to_bytes(), false)),
                name(),
                kind,
                r.exporter.clone(),
            ),
            State::Unsampled { sc, parent } => State::Unsampled {
                sc: child(sc),
                parent: parent.clone(),
            },
            State::Off => State::Off,
        };
        Self { state }
    }

    fn recording(
        sc: SpanContext,
        parent: Context,
        from: Option<([u8; 8], bool)>,
        name: Cow<'static, str>,
        kind: SpanKind,
        exporter: Arc<Exporter>,
    ) -> State {
        let start = SystemTime::now();
        let record = SpanRecord {
            context: sc.clone(),
            parent: from,
            name,
            kind,
            start,
            end: start,
            // Room for the attributes and events of a request's span, allocated once.
            attributes: Vec::with_capacity(16),
            events: Vec::with_capacity(2),
            error: false,
        };
        State::Recording(Box::new(Recording {
            sc,
            parent,
            record: Mutex::new(Some(record)),
            exporter,
        }))
    }

    /// Whether the span records (is sampled): only then are attributes and events worth
    /// building.
    pub fn is_recording(&self) -> bool {
        matches!(self.state, State::Recording(_))
    }

    /// Changes the span's record, if it records and has not ended.
    fn with_record(&self, f: impl FnOnce(&mut SpanRecord)) {
        if let State::Recording(r) = &self.state
            && let Some(record) = r
                .record
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_mut()
        {
            f(record);
        }
    }

    /// Sets attributes (dropped unless recording).
    pub fn set_attributes(&self, attributes: impl IntoIterator<Item = KeyValue>) {
        self.with_record(|r| r.attributes.extend(attributes));
    }

    /// Adds an event with its attributes (dropped unless recording).
    pub fn add_event(&self, name: &'static str, attributes: Vec<KeyValue>) {
        self.with_record(|r| {
            r.events.push(Event {
                name,
                time: SystemTime::now(),
                attributes,
            });
        });
    }

    /// Marks the span failed (status `Error`).
    pub fn set_error(&self) {
        self.with_record(|r| r.error = true);
    }

    /// Ends the span now and queues it for export (later calls do nothing).
    pub fn end(&self) {
        let State::Recording(r) = &self.state else {
            return;
        };
        let ended = r
            .record
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(mut record) = ended {
            record.end = SystemTime::now();
            r.exporter.push(record);
        }
    }

    /// Writes this span's context into `headers` as `traceparent`/`tracestate` (and the
    /// parent's `baggage`), replacing what the client sent. Without a context the headers are
    /// left as they are, so the client's context passes through.
    pub fn inject(&self, headers: &mut HeaderMap) {
        match &self.state {
            State::Off => {}
            State::Unsampled { sc, parent } => propagation::inject_span(sc, parent, headers),
            State::Recording(r) => propagation::inject_span(&r.sc, &r.parent, headers),
        }
    }

    fn span_context(&self) -> Option<&SpanContext> {
        match &self.state {
            State::Off => None,
            State::Unsampled { sc, .. } => Some(sc),
            State::Recording(r) => Some(&r.sc),
        }
    }

    /// The span's trace and span ids, if it has a context.
    pub fn ids(&self) -> Option<TraceIds> {
        let sc = self.span_context()?;
        sc.is_valid().then(|| TraceIds {
            trace_id: sc.trace_id().to_string(),
            span_id: sc.span_id().to_string(),
            sampled: sc.is_sampled(),
        })
    }

    /// The trace id if the span is sampled (an exemplar points only at exported traces).
    pub fn sampled_trace_id(&self) -> Option<String> {
        let sc = self.span_context()?;
        (sc.is_valid() && sc.is_sampled()).then(|| sc.trace_id().to_string())
    }
}

impl Drop for RequestSpan {
    fn drop(&mut self) {
        self.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_tracer_a_span_is_empty_and_headers_pass_through() {
        let mut h = HeaderMap::new();
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        h.insert("traceparent", tp.parse().unwrap());
        let server = RequestSpan::server(&Tracer::none(), &h, || {
            unreachable!("no name without a tracer")
        });
        let client = server.client(|| unreachable!("no name without a tracer"));
        assert!(!client.is_recording());
        client.inject(&mut h);
        assert_eq!(h["traceparent"], tp);
        assert_eq!(client.ids(), None);
        assert_eq!(server.sampled_trace_id(), None);
    }
}
