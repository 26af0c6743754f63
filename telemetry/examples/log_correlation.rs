//! What log correlation through `tracing-opentelemetry` would cost per request, beside the
//! hand copy mvproxy does (`proxy/core/src/server.rs`: the trace and span ids formatted into
//! the few lines a request writes, and only when one is written). `bench/log-correlation.sh`
//! counts both under callgrind; the result and the decision are in ARCHITECTURE.md.
//!
//! Each iteration stands for one request that has a sampled span context (mvproxy's own
//! record, as on the request path) and writes `LINES` JSON log lines (0: most requests;
//! 1: a request proxied to a peer, or a failed one), to a sink:
//!
//! - `hand`: the ids formatted by hand into each line written;
//! - `layer`: a `tracing` span per request, parented on that context with
//!   `OpenTelemetrySpanExt::set_parent`, under `tracing_opentelemetry`'s layer on an SDK
//!   tracer with no span processor (the least the layer can cost: nothing is exported). The
//!   line then gets its ids from the span, as a formatter reading the layer's data would.
//!
//! usage: log_correlation hand|layer REQUESTS LINES

use opentelemetry::Context;
use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(mode), Some(Ok(n)), Some(Ok(lines))) = (
        args.get(1),
        args.get(2).map(|a| a.parse::<u64>()),
        args.get(3).map(|a| a.parse::<u32>()),
    ) else {
        eprintln!("usage: log_correlation hand|layer REQUESTS LINES");
        std::process::exit(2);
    };
    let fmt = tracing_subscriber::fmt::layer()
        .json()
        .with_writer(std::io::sink);
    match mode.as_str() {
        "hand" => {
            let subscriber = tracing_subscriber::registry().with(fmt);
            tracing::subscriber::with_default(subscriber, || {
                for i in 0..n {
                    let sc = context(i);
                    for _ in 0..lines {
                        let trace_id = sc.trace_id().to_string();
                        let span_id = sc.span_id().to_string();
                        tracing::info!(%trace_id, %span_id, status = 200, "proxied to peer");
                    }
                }
            });
        }
        "layer" => {
            let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
            let tracer = provider.tracer("mvproxy");
            let subscriber = tracing_subscriber::registry()
                .with(fmt)
                .with(tracing_opentelemetry::layer().with_tracer(tracer));
            tracing::subscriber::with_default(subscriber, || {
                for i in 0..n {
                    let span = tracing::info_span!("request");
                    let _ = span.set_parent(Context::new().with_remote_span_context(context(i)));
                    let _entered = span.enter();
                    for _ in 0..lines {
                        let cx = span.context();
                        let sc = cx.span().span_context().clone();
                        let trace_id = sc.trace_id().to_string();
                        let span_id = sc.span_id().to_string();
                        tracing::info!(%trace_id, %span_id, status = 200, "proxied to peer");
                    }
                }
            });
        }
        other => {
            eprintln!("log_correlation: unknown mode {other:?} (hand or layer)");
            std::process::exit(2);
        }
    }
}

/// The sampled span context of request `i`.
fn context(i: u64) -> SpanContext {
    SpanContext::new(
        TraceId::from(u128::from(i) + 1),
        SpanId::from(i + 1),
        TraceFlags::SAMPLED,
        true,
        TraceState::NONE,
    )
}
