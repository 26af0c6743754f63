//! The export families on `/metrics`, from the first scrape.
//!
//! They are read from the exporter at each scrape rather than through handles: the counters
//! are the export queue's own ([`super::stats`]), and the families exist (at zero) whether or
//! not an exporter is configured.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use super::Exporter;
use super::stats::{DropReason, ExportStats, Outcome};

/// Declares the export families in `registry` (`mvproxy_spans_exported_total`,
/// `mvproxy_spans_dropped_total{reason}`, `mvproxy_span_export_requests_total{outcome}`,
/// `mvproxy_span_export_queue_length`, `mvproxy_span_export_queue_capacity`), read from the
/// exporter at each scrape; all zero without one (spans are not exported).
pub(crate) fn register(registry: &mut Registry, exporter: Option<Arc<Exporter>>) {
    registry.register_collector(Box::new(ExportCollector { exporter }));
}

struct ExportCollector {
    exporter: Option<Arc<Exporter>>,
}

impl std::fmt::Debug for ExportCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExportCollector")
            .field("exported", &self.exporter.is_some())
            .finish()
    }
}

impl Collector for ExportCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let zero = ExportStats::default();
        let (stats, queue, capacity) = match &self.exporter {
            Some(e) => (e.stats(), e.queue_len(), e.capacity()),
            None => (&zero, 0, 0),
        };
        let c = ConstCounter::new(stats.exported_total());
        c.encode(encoder.encode_descriptor(
            "mvproxy_spans_exported",
            "Spans the collector accepted.",
            None,
            c.metric_type(),
        )?)?;
        let mut family = encoder.encode_descriptor(
            "mvproxy_spans_dropped",
            "Spans not exported, by reason: queue_full (the export queue was full when the span ended), rejected (the collector rejected it in a partial success), export_failed (a non-retryable answer, or unsent when shutdown's bound ran out).",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for reason in DropReason::ALL {
            let labels = [("reason", reason.as_str())];
            ConstCounter::new(stats.dropped_total(reason))
                .encode(family.encode_family(&labels)?)?;
        }
        let mut family = encoder.encode_descriptor(
            "mvproxy_span_export_requests",
            "Export requests to the collector, by outcome: success, partial_success, retry (a retryable failure, sent again), failure (not retried, or retries exhausted).",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for outcome in Outcome::ALL {
            let labels = [("outcome", outcome.as_str())];
            ConstCounter::new(stats.requests_total(outcome))
                .encode(family.encode_family(&labels)?)?;
        }
        let g = ConstGauge::new(i64::try_from(queue).unwrap_or(i64::MAX));
        g.encode(encoder.encode_descriptor(
            "mvproxy_span_export_queue_length",
            "Spans waiting for export, the batch being sent included.",
            None,
            g.metric_type(),
        )?)?;
        let g = ConstGauge::new(i64::try_from(capacity).unwrap_or(i64::MAX));
        g.encode(encoder.encode_descriptor(
            "mvproxy_span_export_queue_capacity",
            "OTEL_BSP_MAX_QUEUE_SIZE: spans the queue holds at most (0: spans are not exported).",
            None,
            g.metric_type(),
        )?)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
