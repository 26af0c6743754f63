//! Telemetry for mvproxy: logs and traces set up from the standard `OTEL_*` variables
//! ([`setup`]), W3C trace-context propagation over `http::HeaderMap` ([`propagation`]), and
//! the Prometheus metric families of the telemetry contract ([`metrics`]).
//!
//! This is the only crate that depends on the OpenTelemetry SDK and exporter. The proxy
//! records with `tracing` spans and events and with the metric handles it gets from here, so
//! the request path cannot reach into exporter internals.

pub mod metrics;
pub mod propagation;
pub mod setup;

pub use setup::{Settings, TelemetryError, TelemetryGuard, init};
