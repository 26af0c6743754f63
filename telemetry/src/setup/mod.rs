//! Setting up logs and traces from the standard `OTEL_*` variables.
//!
//! No endpoint means no exporter (unless `OTEL_TRACES_EXPORTER=otlp` asks for the
//! specification's default one): request spans are empty and the request path pays nothing
//! for them (the client's trace headers pass along untouched). With an endpoint, the request
//! spans ([`crate::trace`]) go to a bounded queue that one thread of their own exports
//! ([`crate::export`]): a slow or dead collector fills (and then drops from) the queue, it
//! never blocks a request. Log lines go through `tracing`, which carries no spans.
//!
//! The variables are read in `env`, the only module that names them; `tls` reads the
//! certificate files they name. This module turns the [`Settings`] into the running pieces:
//! the log subscriber, the export thread, and the [`Tracer`] that carries them to the
//! request path.

use std::sync::Arc;

use http::Uri;
use tracing_subscriber::filter::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry};

use crate::export::{Exporter, Target};
use crate::trace::Tracer;

mod env;
pub(crate) mod tls;

pub use env::{Export, Settings, Tls};

/// A setting that cannot be used: the variable and why.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid configuration: {var}: {why}")]
pub struct TelemetryError {
    /// The variable.
    pub var: &'static str,
    /// What is wrong with its value.
    pub why: String,
}

fn err(var: &'static str, why: impl Into<String>) -> TelemetryError {
    TelemetryError {
        var,
        why: why.into(),
    }
}

/// Keeps the trace pipeline alive; dropping it flushes and shuts the exporter down.
#[must_use = "dropping the guard stops trace export"]
pub struct TelemetryGuard {
    exporter: Option<Arc<Exporter>>,
    tracer: Tracer,
}

impl TelemetryGuard {
    /// The handle the request path starts its spans from (and `/metrics` reads the export
    /// queue through): a clone of it is all a server needs to keep.
    pub fn tracer(&self) -> Tracer {
        self.tracer.clone()
    }

    /// Exports what is queued and stops the exporter (also done on drop), waiting up to
    /// `OTEL_BSP_EXPORT_TIMEOUT`.
    pub fn shutdown(&mut self) {
        if let Some(e) = self.exporter.take() {
            e.shutdown();
        }
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Installs the process-wide `tracing` subscriber (log lines to stderr) and, when an exporter
/// is configured, starts the export thread; the guard's [`tracer`](TelemetryGuard::tracer)
/// samples the request spans and hands them to it.
pub fn init(settings: &Settings) -> Result<TelemetryGuard, TelemetryError> {
    let log_filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(&settings.default_log_filter));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs: Box<dyn Layer<Registry> + Send + Sync> = if settings.json_logs {
        fmt.json().with_filter(log_filter).boxed()
    } else {
        fmt.with_filter(log_filter).boxed()
    };
    tracing_subscriber::registry()
        .with(logs)
        .try_init()
        .map_err(|e| err(env::RUST_LOG, format!("logging already set up: {e}")))?;
    let exporter = match &settings.export {
        None => None,
        Some(export) => Some(Arc::new(exporter(export, settings)?)),
    };
    let tracer = match &exporter {
        None => Tracer::none(),
        Some(e) => Tracer::new(settings.sampler.clone(), e.clone()),
    };
    Ok(TelemetryGuard { exporter, tracer })
}

fn exporter(export: &Export, settings: &Settings) -> Result<Exporter, TelemetryError> {
    let var = export.endpoint_var;
    let endpoint = export
        .endpoint
        .parse::<Uri>()
        .map_err(|e| err(var, e.to_string()))?;
    let target = Target {
        endpoint,
        grpc: export.grpc,
        headers: export.headers.clone(),
        timeout: export.timeout,
        gzip: export.gzip,
        tls: export.tls.as_ref().map(|t| t.0.clone()),
    };
    Exporter::start(target, &settings.batching, &settings.resource)
        .map_err(|e| err(var, e.to_string()))
}
