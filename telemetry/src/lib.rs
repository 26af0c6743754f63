//! Telemetry for mvproxy: the Prometheus metric families of the telemetry contract and their
//! exposition. This is the one crate that knows how signals are encoded and exported; the
//! proxy records through the handles it gets from here.

pub mod metrics;
