//! W3C trace context and baggage over `http::HeaderMap`, with an explicit propagator.
//!
//! The global propagator getter silently does nothing when none was installed, which is how a
//! trace breaks at a hop without anyone noticing; so the propagator here is a value, always
//! TraceContext + Baggage. When no exporter is configured request spans carry no context
//! ([`crate::trace`]), nothing is extracted or injected, and the client's `traceparent` passes
//! through untouched.

use std::sync::LazyLock;

use http::HeaderMap;
use http::header::{HeaderName, HeaderValue};
use opentelemetry::Context;
use opentelemetry::propagation::{
    Extractor, Injector, TextMapCompositePropagator, TextMapPropagator,
};
use opentelemetry::trace::{SpanContext, TraceContextExt, TraceState};
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};

static PROPAGATOR: LazyLock<TextMapCompositePropagator> = LazyLock::new(|| {
    TextMapCompositePropagator::new(vec![
        Box::new(TraceContextPropagator::new()),
        Box::new(BaggagePropagator::new()),
    ])
});

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

/// The parent context in `headers`: the remote span (and baggage) if its `traceparent` is
/// valid per W3C, else an empty context, so that the span started from it is the root of a
/// new trace and an invalid context's `tracestate` goes nowhere.
pub fn extract(headers: &HeaderMap) -> Context {
    if !headers.contains_key("traceparent") {
        return Context::new();
    }
    let cx = PROPAGATOR.extract(&HeaderExtractor(headers));
    if cx.span().span_context().is_valid() {
        cx
    } else {
        Context::new()
    }
}

/// Writes the context's span as `traceparent`/`tracestate` (and its `baggage`) into
/// `headers`, replacing what the client sent. A context without a valid span leaves the
/// headers as they are, so the client's context passes through.
pub fn inject(cx: &Context, headers: &mut HeaderMap) {
    inject_span(cx.span().span_context(), cx, headers);
}

static BAGGAGE: LazyLock<BaggagePropagator> = LazyLock::new(BaggagePropagator::new);

/// [`inject`] of span `sc` with the baggage of `cx`: what `TraceContextPropagator` writes
/// (version `00`, only the sampled flag), without its formatting machinery, on every
/// request that carries a context.
pub(crate) fn inject_span(sc: &SpanContext, cx: &Context, headers: &mut HeaderMap) {
    if !sc.is_valid() {
        return;
    }
    headers.remove(TRACEPARENT);
    if let Some(tp) = traceparent(sc) {
        headers.insert(TRACEPARENT, tp);
    }
    headers.remove(TRACESTATE);
    if sc.trace_state() != &TraceState::NONE {
        HeaderInjector(headers).set("tracestate", sc.trace_state().header());
    }
    BAGGAGE.inject_context(cx, &mut HeaderInjector(headers));
}

const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// `00-{trace id}-{span id}-{flags}` in lowercase hex (W3C Trace Context, version 00).
fn traceparent(sc: &SpanContext) -> Option<HeaderValue> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [b'-'; 55];
    out[0] = b'0';
    out[1] = b'0';
    for (i, b) in sc.trace_id().to_bytes().into_iter().enumerate() {
        out[3 + 2 * i] = HEX[usize::from(b >> 4)];
        out[4 + 2 * i] = HEX[usize::from(b & 0xf)];
    }
    for (i, b) in sc.span_id().to_bytes().into_iter().enumerate() {
        out[36 + 2 * i] = HEX[usize::from(b >> 4)];
        out[37 + 2 * i] = HEX[usize::from(b & 0xf)];
    }
    out[53] = b'0';
    out[54] = if sc.is_sampled() { b'1' } else { b'0' };
    HeaderValue::from_bytes(&out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{Tracer as _, TracerProvider as _};
    use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn tracer() -> SdkTracer {
        SdkTracerProvider::builder().build().tracer("test")
    }

    fn child(t: &SdkTracer, parent: &Context) -> Context {
        parent.with_span(t.start_with_context("span", parent))
    }

    fn span_id(cx: &Context) -> String {
        cx.span().span_context().span_id().to_string()
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
    fn headers_are_written_as_the_sdk_propagator_writes_them() {
        use opentelemetry::trace::{SpanId, TraceFlags, TraceId};
        let state: TraceState = "vendor=a,other=b".parse().unwrap();
        for (flags, state) in [
            (TraceFlags::SAMPLED, TraceState::NONE),
            (TraceFlags::default(), TraceState::NONE),
            (TraceFlags::SAMPLED, state.clone()),
            (TraceFlags::default(), state),
        ] {
            let sc = SpanContext::new(
                TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").unwrap(),
                SpanId::from_hex("b7ad6b7169203331").unwrap(),
                flags,
                true,
                state,
            );
            let cx = extract(&headers(&[("traceparent", PARENT), ("baggage", "k=v")]))
                .with_remote_span_context(sc.clone());
            let mut sdk = headers(&[("tracestate", "client=1")]);
            sdk.remove("tracestate");
            PROPAGATOR.inject_context(&cx, &mut HeaderInjector(&mut sdk));
            let mut ours = headers(&[("traceparent", PARENT), ("tracestate", "client=1")]);
            inject_span(&sc, &cx, &mut ours);
            assert_eq!(ours, sdk, "{sc:?}");
        }
    }

    #[test]
    fn a_child_of_the_incoming_traceparent_is_injected() {
        let t = tracer();
        let server = child(
            &t,
            &extract(&headers(&[("traceparent", PARENT), ("baggage", "k=v")])),
        );
        let client = child(&t, &server);
        let mut out = headers(&[("traceparent", PARENT)]);
        inject(&client, &mut out);
        let tp = out["traceparent"].to_str().unwrap();
        assert_eq!(
            tp,
            format!(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-{}-01",
                span_id(&client)
            )
        );
        assert_ne!(span_id(&client), "00f067aa0ba902b7");
        assert_eq!(out["baggage"], "k=v");
    }

    #[test]
    fn unsampled_stays_unsampled_and_invalid_starts_a_new_trace() {
        let t = tracer();
        let unsampled = PARENT.replace("-01", "-00");
        let span = child(&t, &extract(&headers(&[("traceparent", &unsampled)])));
        let mut out = HeaderMap::new();
        inject(&span, &mut out);
        assert!(out["traceparent"].to_str().unwrap().ends_with("-00"));
        assert!(!span.span().span_context().is_sampled());

        let invalid = headers(&[("traceparent", "00-zzzz-invalid-01"), ("tracestate", "a=1")]);
        let fresh = child(&t, &extract(&invalid));
        let trace_id = fresh.span().span_context().trace_id().to_string();
        assert_ne!(trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        let mut out = invalid.clone();
        inject(&fresh, &mut out);
        assert!(out["traceparent"].to_str().unwrap().contains(&trace_id));
        assert!(
            !out.contains_key("tracestate"),
            "the invalid context's tracestate is dropped"
        );
    }

    #[test]
    fn without_a_span_headers_pass_through() {
        let cx = extract(&headers(&[("traceparent", PARENT)]));
        // the remote parent itself is never injected: only a span started from it is
        let mut out = headers(&[("traceparent", PARENT)]);
        inject(&Context::new(), &mut out);
        assert_eq!(out["traceparent"], PARENT);
        assert!(cx.span().span_context().is_remote());
    }
}
