//! W3C trace context and baggage over `http::HeaderMap`, with an explicit propagator.
//!
//! The global propagator getter silently does nothing when none was installed, which is how a
//! trace breaks at a hop without anyone noticing; so the propagator here is a value, always
//! TraceContext + Baggage. When no exporter is configured there is no OpenTelemetry layer, the
//! spans carry no context, and the client's `traceparent` passes through untouched.

use http::HeaderMap;
use http::header::{HeaderName, HeaderValue};
use opentelemetry::propagation::{
    Extractor, Injector, TextMapCompositePropagator, TextMapPropagator,
};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use tracing_opentelemetry::OpenTelemetrySpanExt;

fn propagator() -> TextMapCompositePropagator {
    TextMapCompositePropagator::new(vec![
        Box::new(TraceContextPropagator::new()),
        Box::new(BaggagePropagator::new()),
    ])
}

struct HeaderExtractor<'a>(&'a HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        // TraceContext writes an empty `tracestate` for a fresh trace; W3C says omit it.
        if value.is_empty() {
            return;
        }
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// Makes the trace context in `headers` (if valid, per W3C) the parent of `span`; an invalid
/// or absent `traceparent` leaves `span` the root of a new trace.
pub fn set_parent(span: &tracing::Span, headers: &HeaderMap) {
    let cx = propagator().extract(&HeaderExtractor(headers));
    if cx.span().span_context().is_valid() {
        // Fails only when the span is disabled (no OpenTelemetry layer): nothing to parent.
        let _ = span.set_parent(cx);
    }
}

/// Writes `span`'s context into `headers` as `traceparent`/`tracestate` (and the parent's
/// `baggage`), replacing what the client sent. Without a tracing pipeline the headers are left
/// as they are, so the client's context passes through.
pub fn inject(span: &tracing::Span, headers: &mut HeaderMap) {
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        return;
    }
    headers.remove("traceparent");
    headers.remove("tracestate");
    propagator().inject_context(&cx, &mut HeaderInjector(headers));
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

/// The span's trace and span ids, if it has an OpenTelemetry context.
pub fn ids(span: &tracing::Span) -> Option<TraceIds> {
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| TraceIds {
        trace_id: sc.trace_id().to_string(),
        span_id: sc.span_id().to_string(),
        sampled: sc.is_sampled(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use tracing_subscriber::layer::SubscriberExt;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn with_tracing<T>(f: impl FnOnce() -> T) -> T {
        let provider = SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        tracing::subscriber::with_default(subscriber, f)
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn a_child_of_the_incoming_traceparent_is_injected() {
        with_tracing(|| {
            let span = tracing::info_span!("server");
            set_parent(
                &span,
                &headers(&[("traceparent", PARENT), ("baggage", "k=v")]),
            );
            let child = tracing::info_span!(parent: &span, "client");
            let mut out = headers(&[("traceparent", PARENT)]);
            inject(&child, &mut out);
            let tp = out["traceparent"].to_str().unwrap();
            let ids = ids(&child).unwrap();
            assert_eq!(
                tp,
                format!("00-4bf92f3577b34da6a3ce929d0e0e4736-{}-01", ids.span_id)
            );
            assert_ne!(ids.span_id, "00f067aa0ba902b7");
            assert_eq!(out["baggage"], "k=v");
        });
    }

    #[test]
    fn unsampled_stays_unsampled_and_invalid_starts_a_new_trace() {
        with_tracing(|| {
            let span = tracing::info_span!("server");
            let unsampled = PARENT.replace("-01", "-00");
            set_parent(&span, &headers(&[("traceparent", &unsampled)]));
            let mut out = HeaderMap::new();
            inject(&span, &mut out);
            assert!(out["traceparent"].to_str().unwrap().ends_with("-00"));
            assert!(!ids(&span).unwrap().sampled);

            let fresh = tracing::info_span!("server");
            set_parent(
                &fresh,
                &headers(&[("traceparent", "00-zzzz-invalid-01"), ("tracestate", "a=1")]),
            );
            let ids = ids(&fresh).unwrap();
            assert_ne!(ids.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
            let mut out = headers(&[("traceparent", "00-zzzz-invalid-01"), ("tracestate", "a=1")]);
            inject(&fresh, &mut out);
            assert!(out["traceparent"].to_str().unwrap().contains(&ids.trace_id));
            assert!(
                !out.contains_key("tracestate"),
                "the invalid context's tracestate is dropped"
            );
        });
    }

    #[test]
    fn without_a_pipeline_headers_pass_through() {
        let span = tracing::info_span!("server");
        set_parent(&span, &headers(&[("traceparent", PARENT)]));
        let mut out = headers(&[("traceparent", PARENT)]);
        inject(&span, &mut out);
        assert_eq!(out["traceparent"], PARENT);
        assert_eq!(ids(&span), None);
    }
}
