//! The export of one batch through `opentelemetry-otlp`'s `SpanExporter` (HTTP/protobuf over
//! its hyper client), in place of [`super::transport`]: built only with the `otlp-crate`
//! feature, for the same-run instruction count that decides between the two
//! (`bench/PERF_NOTES.md`, "Export on the maintained crate, counted").
//!
//! It converts mvproxy's span records into the SDK's `SpanData` on the export thread, as the
//! SDK's own batch processor hands them over, and lets the crate encode and post them. It
//! covers only what that count needs (an `http://` endpoint, HTTP/protobuf, headers and the
//! timeout): gRPC, TLS and gzip are refused at start, and a failed batch is dropped and
//! counted rather than retried, because the crate's `export` neither gives the batch back nor
//! says which failures are retryable, and reports a partial success only in its own log.

use std::collections::HashMap;
use std::time::Instant;

use opentelemetry::KeyValue;
use opentelemetry::trace::SpanId;
use opentelemetry::trace::Status;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};

use super::Target;
use super::retry::ExportError;
use super::stats::ExportStats;
use super::wire::Accepted;
use crate::otlp::{SCOPE, SpanRecord};

pub(super) use super::transport::Sent;

/// The crate's exporter and the runtime that drives it.
pub(crate) struct Client {
    rt: tokio::runtime::Runtime,
    pub(super) target: Target,
    exporter: opentelemetry_otlp::SpanExporter,
    scope: opentelemetry::InstrumentationScope,
}

impl Client {
    pub(super) fn new(target: Target, resource: &[KeyValue]) -> Result<Self, ExportError> {
        if target.grpc || target.tls.is_some() || target.gzip {
            return Err(ExportError::Crate(
                "the otlp-crate build exports over plain HTTP/protobuf only".into(),
            ));
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ExportError::Runtime)?;
        let headers: HashMap<String, String> = target
            .headers
            .iter()
            .filter_map(|(k, v)| Some((k.to_string(), v.to_str().ok()?.to_owned())))
            .collect();
        let mut exporter = {
            let _entered = rt.enter();
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(target.endpoint.to_string())
                .with_timeout(target.timeout)
                .with_headers(headers)
                .build()
                .map_err(|e| ExportError::Crate(e.to_string()))?
        };
        exporter.set_resource(
            &Resource::builder_empty()
                .with_attributes(resource.iter().cloned())
                .build(),
        );
        let scope = opentelemetry::InstrumentationScope::builder(SCOPE)
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        Ok(Self {
            rt,
            target,
            exporter,
            scope,
        })
    }

    /// Converts and exports `batch`, leaving it empty: a failure drops it.
    pub(super) fn send(
        &mut self,
        batch: &mut Vec<SpanRecord>,
        until: Instant,
        _stats: &ExportStats,
    ) -> Sent {
        let spans: Vec<SpanData> = batch.drain(..).map(|r| self.span_data(r)).collect();
        let left = until.saturating_duration_since(Instant::now());
        let result = self
            .rt
            .block_on(async { tokio::time::timeout(left, self.exporter.export(spans)).await });
        match result {
            Ok(Ok(())) => Sent::Accepted(Accepted::default()),
            Ok(Err(e)) => Sent::Refused(ExportError::Crate(e.to_string())),
            Err(_) => Sent::Refused(ExportError::Timeout(left)),
        }
    }

    fn span_data(&self, r: SpanRecord) -> SpanData {
        let mut events = SpanEvents::default();
        events.events = r
            .events
            .into_iter()
            .map(|e| opentelemetry::trace::Event::new(e.name, e.time, e.attributes, 0))
            .collect();
        SpanData {
            span_context: r.context,
            parent_span_id: r
                .parent
                .map_or(SpanId::INVALID, |(id, _)| SpanId::from_bytes(id)),
            parent_span_is_remote: r.parent.is_some_and(|(_, remote)| remote),
            span_kind: r.kind,
            name: r.name,
            start_time: r.start,
            end_time: r.end,
            attributes: r.attributes,
            dropped_attributes_count: 0,
            events,
            links: SpanLinks::default(),
            status: if r.error {
                Status::error("")
            } else {
                Status::Unset
            },
            instrumentation_scope: self.scope.clone(),
        }
    }
}
