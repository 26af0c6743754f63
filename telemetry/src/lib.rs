//! Telemetry for mvproxy: logs and traces set up from the standard `OTEL_*` variables
//! ([`setup`]), the request spans ([`trace`]), W3C trace-context propagation over
//! `http::HeaderMap` ([`propagation`]), and the Prometheus metric families of the telemetry
//! contract ([`metrics`]).
//!
//! This is the only crate that depends on the OpenTelemetry SDK (its sampler, id generator,
//! propagators and resource) and the only one that speaks OTLP ([`export`]). The proxy
//! records spans through [`trace::RequestSpan`] (attributes as OpenTelemetry `KeyValue`s),
//! started from the [`trace::Tracer`] that [`init`]'s guard hands out and the proxy passes
//! along with the rest of its state (nothing here is process-global but the `tracing`
//! subscriber), logs with `tracing`, and metrics with the handles it gets from here, so the
//! request path cannot reach into exporter internals.

#![warn(missing_docs, unreachable_pub)]

pub mod export;
pub mod metrics;
mod otlp;
pub mod propagation;
pub mod setup;
pub mod trace;

pub use setup::{Settings, TelemetryError, TelemetryGuard, init};
