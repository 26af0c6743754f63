//! The spans of a request, started through the OpenTelemetry API directly.
//!
//! A request has two spans (a `SERVER` span and a `CLIENT` span per upstream attempt), and
//! they sit on every request, so they cost what the SDK's sampler costs and little more:
//!
//! - no exporter configured: no tracer is installed, a [`RequestSpan`] is empty, and every
//!   operation on it returns at once (the client's trace headers pass through untouched);
//! - an exporter, and the sampler drops the span: the span keeps only its ids (they travel to
//!   the upstream with the sampled flag off) and the parent's baggage. The SDK's span is
//!   dropped at once, the `CLIENT` span gets a new span id without asking the sampler again
//!   (every sampler `OTEL_TRACES_SAMPLER` can name drops the child of a dropped span: the
//!   parent-based ones by the parent's flag, the ratio by the same trace id), its name is
//!   never formatted, and `traceparent` is written without the formatting machinery;
//! - the sampler keeps the span: it records, and callers build attributes and events only
//!   when [`RequestSpan::is_recording`] (a flag, not a question to the SDK's span behind its
//!   lock).
//!
//! Ended spans go to the SDK's batch processor, whose queue is drained by its own thread:
//! the request thread only hands the span over, and when the queue is full the span is
//! dropped (and counted by the SDK), never waited for.

use std::borrow::Cow;
use std::sync::OnceLock;

use http::HeaderMap;
use opentelemetry::Context;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, Status, TraceContextExt, TraceFlags, Tracer as _,
};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SdkTracer};

/// An attribute of a span or event, and its value.
pub use opentelemetry::{KeyValue, StringValue, Value};

use crate::propagation;

static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// Makes `tracer` the one request spans start from (once per process: the first one wins, as
/// for the process-wide `tracing` subscriber).
pub(crate) fn install(tracer: SdkTracer) {
    let _ = TRACER.set(tracer);
}

/// Whether spans are exported at all (a tracer is installed).
pub fn enabled() -> bool {
    TRACER.get().is_some()
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
    /// Sampled: the SDK's span in its context.
    Recording { cx: Context, sc: SpanContext },
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
    /// trace. `name` is called only when the span is sampled.
    pub fn server(headers: &HeaderMap, name: impl FnOnce() -> Cow<'static, str>) -> Self {
        let Some(tracer) = TRACER.get() else {
            return Self::none();
        };
        let parent = propagation::extract(headers);
        Self::start(tracer, parent, name, SpanKind::Server)
    }

    /// A `CLIENT` span, child of this one (empty when this one is, unsampled when this one
    /// is).
    pub fn client(&self, name: impl FnOnce() -> Cow<'static, str>) -> Self {
        let state = match (TRACER.get(), &self.state) {
            (Some(tracer), State::Recording { cx, .. }) => {
                return Self::start(tracer, cx.clone(), name, SpanKind::Client);
            }
            (Some(_), State::Unsampled { sc, parent }) => State::Unsampled {
                sc: SpanContext::new(
                    sc.trace_id(),
                    RandomIdGenerator::default().new_span_id(),
                    TraceFlags::default(),
                    false,
                    sc.trace_state().clone(),
                ),
                parent: parent.clone(),
            },
            _ => State::Off,
        };
        Self { state }
    }

    fn start(
        tracer: &SdkTracer,
        parent: Context,
        name: impl FnOnce() -> Cow<'static, str>,
        kind: SpanKind,
    ) -> Self {
        // No sampler that `OTEL_TRACES_SAMPLER` names reads the span's name: it is formatted
        // only for a span that records.
        let mut span = tracer
            .span_builder("")
            .with_kind(kind)
            .start_with_context(tracer, &parent);
        let sc = span.span_context().clone();
        let state = if span.is_recording() {
            span.update_name(name());
            State::Recording {
                cx: parent.with_span(span),
                sc,
            }
        } else {
            State::Unsampled { sc, parent }
        };
        Self { state }
    }

    /// Whether the span records (is sampled): only then are attributes and events worth
    /// building.
    pub fn is_recording(&self) -> bool {
        matches!(self.state, State::Recording { .. })
    }

    /// Sets attributes (dropped unless recording).
    pub fn set_attributes(&self, attributes: impl IntoIterator<Item = KeyValue>) {
        if let State::Recording { cx, .. } = &self.state {
            cx.span().set_attributes(attributes);
        }
    }

    /// Adds an event with its attributes (dropped unless recording).
    pub fn add_event(&self, name: &'static str, attributes: Vec<KeyValue>) {
        if let State::Recording { cx, .. } = &self.state {
            cx.span().add_event(name, attributes);
        }
    }

    /// Marks the span failed (status `Error`).
    pub fn set_error(&self) {
        if let State::Recording { cx, .. } = &self.state {
            cx.span().set_status(Status::error(""));
        }
    }

    /// Ends the span now (later calls do nothing).
    pub fn end(&self) {
        if let State::Recording { cx, .. } = &self.state {
            cx.span().end();
        }
    }

    /// Writes this span's context into `headers` as `traceparent`/`tracestate` (and the
    /// parent's `baggage`), replacing what the client sent. Without a context the headers are
    /// left as they are, so the client's context passes through.
    pub fn inject(&self, headers: &mut HeaderMap) {
        match &self.state {
            State::Off => {}
            State::Unsampled { sc, parent } => propagation::inject_span(sc, parent, headers),
            State::Recording { cx, sc } => propagation::inject_span(sc, cx, headers),
        }
    }

    fn span_context(&self) -> Option<&SpanContext> {
        match &self.state {
            State::Off => None,
            State::Unsampled { sc, .. } | State::Recording { sc, .. } => Some(sc),
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
        // No test in this crate installs a tracer: `install` is reached only from `init`.
        let mut h = HeaderMap::new();
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        h.insert("traceparent", tp.parse().unwrap());
        let server = RequestSpan::server(&h, || unreachable!("no name without a tracer"));
        let client = server.client(|| unreachable!("no name without a tracer"));
        assert!(!client.is_recording());
        client.inject(&mut h);
        assert_eq!(h["traceparent"], tp);
        assert_eq!(client.ids(), None);
        assert_eq!(server.sampled_trace_id(), None);
    }
}
