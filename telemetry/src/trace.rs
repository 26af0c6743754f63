//! The spans of a request, started through the OpenTelemetry API directly.
//!
//! A request has two spans (a `SERVER` span and a `CLIENT` span per upstream attempt), and
//! they sit on every request, so they cost what the SDK's sampler costs and no more:
//!
//! - no exporter configured: no tracer is installed, a [`RequestSpan`] is empty, and every
//!   operation on it returns at once (the client's trace headers pass through untouched);
//! - an exporter: the sampler decides when the span starts; an unsampled span still has a
//!   context (its ids travel to the upstream with the sampled flag off) but records nothing,
//!   and callers build attributes and events only when [`RequestSpan::is_recording`].
//!
//! Ended spans go to the SDK's batch processor, whose queue is drained by its own thread:
//! the request thread only hands the span over.

use std::borrow::Cow;
use std::sync::OnceLock;

use http::HeaderMap;
use opentelemetry::Context;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry_sdk::trace::SdkTracer;

/// An attribute of a span or event.
pub use opentelemetry::KeyValue;

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
    cx: Option<Context>,
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
        Self { cx: None }
    }

    /// The `SERVER` span of a request, child of the trace context in its `headers` (W3C
    /// `traceparent`, `tracestate`, `baggage`); an invalid or absent `traceparent` starts a new
    /// trace. `name` is called only when spans are exported.
    pub fn server(headers: &HeaderMap, name: impl FnOnce() -> Cow<'static, str>) -> Self {
        let Some(tracer) = TRACER.get() else {
            return Self::none();
        };
        let parent = propagation::extract(headers);
        Self::start(tracer, &parent, name(), SpanKind::Server)
    }

    /// A `CLIENT` span, child of this one (empty when this one is).
    pub fn client(&self, name: impl FnOnce() -> Cow<'static, str>) -> Self {
        match (TRACER.get(), &self.cx) {
            (Some(tracer), Some(parent)) => Self::start(tracer, parent, name(), SpanKind::Client),
            _ => Self::none(),
        }
    }

    fn start(
        tracer: &SdkTracer,
        parent: &Context,
        name: Cow<'static, str>,
        kind: SpanKind,
    ) -> Self {
        let span = tracer
            .span_builder(name)
            .with_kind(kind)
            .start_with_context(tracer, parent);
        Self {
            cx: Some(parent.with_span(span)),
        }
    }

    /// Whether the span records (is sampled): only then are attributes and events worth
    /// building.
    pub fn is_recording(&self) -> bool {
        self.cx.as_ref().is_some_and(|cx| cx.span().is_recording())
    }

    /// Sets attributes (dropped unless recording).
    pub fn set_attributes(&self, attributes: impl IntoIterator<Item = KeyValue>) {
        if let Some(cx) = &self.cx {
            cx.span().set_attributes(attributes);
        }
    }

    /// Adds an event with its attributes (dropped unless recording).
    pub fn add_event(&self, name: &'static str, attributes: Vec<KeyValue>) {
        if let Some(cx) = &self.cx {
            cx.span().add_event(name, attributes);
        }
    }

    /// Marks the span failed (status `Error`).
    pub fn set_error(&self) {
        if let Some(cx) = &self.cx {
            cx.span().set_status(Status::error(""));
        }
    }

    /// Ends the span now (later calls do nothing).
    pub fn end(&self) {
        if let Some(cx) = &self.cx {
            cx.span().end();
        }
    }

    /// Writes this span's context into `headers` as `traceparent`/`tracestate` (and the
    /// parent's `baggage`), replacing what the client sent. Without a context the headers are
    /// left as they are, so the client's context passes through.
    pub fn inject(&self, headers: &mut HeaderMap) {
        if let Some(cx) = &self.cx {
            propagation::inject(cx, headers);
        }
    }

    /// The span's trace and span ids, if it has a context.
    pub fn ids(&self) -> Option<TraceIds> {
        let cx = self.cx.as_ref()?;
        let span = cx.span();
        let sc = span.span_context();
        sc.is_valid().then(|| TraceIds {
            trace_id: sc.trace_id().to_string(),
            span_id: sc.span_id().to_string(),
            sampled: sc.is_sampled(),
        })
    }

    /// The trace id if the span is sampled (an exemplar points only at exported traces).
    pub fn sampled_trace_id(&self) -> Option<String> {
        let cx = self.cx.as_ref()?;
        let span = cx.span();
        let sc = span.span_context();
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
