//! mvproxy's own account of span export, on `/metrics` from the first scrape.
//!
//! A span is counted once, where its fate is decided: exported (the collector took it),
//! dropped because the queue was full, rejected by the collector (a partial success), or
//! dropped because its export failed for good (a non-retryable answer, or still unsent when
//! shutdown's bound ran out). So spans ended = exported + dropped (every reason) + the queue's
//! length, exactly; the conformance pack checks that against what reached Jaeger.
//!
//! The families are read from the export queue at each scrape rather than through handles:
//! the counters are the queue's own, and the families exist (at zero) whether or not an
//! exporter is configured.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::export::Exporter;

/// Why a span was dropped (label `reason` of `mvproxy_spans_dropped_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DropReason {
    /// The queue held `OTEL_BSP_MAX_QUEUE_SIZE` spans when it ended.
    QueueFull,
    /// The collector took the request but rejected the span (a partial success).
    Rejected,
    /// Its export failed for good: a non-retryable answer, or unsent at shutdown's bound.
    ExportFailed,
}

impl DropReason {
    const ALL: [Self; 3] = [Self::QueueFull, Self::Rejected, Self::ExportFailed];

    /// The label value.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::QueueFull => "queue_full",
            Self::Rejected => "rejected",
            Self::ExportFailed => "export_failed",
        }
    }
}

/// What became of one export request (label `outcome` of
/// `mvproxy_span_export_requests_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Every span taken.
    Success,
    /// Taken, some spans rejected.
    PartialSuccess,
    /// A retryable failure: the same spans are sent again.
    Retry,
    /// A failure that is not retried (the spans are dropped), or the last retryable one
    /// before the batch goes back to the queue.
    Failure,
}

impl Outcome {
    const ALL: [Self; 4] = [
        Self::Success,
        Self::PartialSuccess,
        Self::Retry,
        Self::Failure,
    ];

    /// The label value.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::PartialSuccess => "partial_success",
            Self::Retry => "retry",
            Self::Failure => "failure",
        }
    }
}

/// The counters, written by the request threads (queue full) and the export thread.
#[derive(Debug, Default)]
pub(crate) struct ExportStats {
    exported: AtomicU64,
    dropped: [AtomicU64; 3],
    requests: [AtomicU64; 4],
}

impl ExportStats {
    pub(crate) fn exported(&self, n: u64) {
        self.exported.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn dropped(&self, reason: DropReason, n: u64) {
        self.dropped[reason as usize].fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn request(&self, outcome: Outcome) {
        self.requests[outcome as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn exported_total(&self) -> u64 {
        self.exported.load(Ordering::Relaxed)
    }

    pub(crate) fn dropped_total(&self, reason: DropReason) -> u64 {
        self.dropped[reason as usize].load(Ordering::Relaxed)
    }

    pub(crate) fn requests_total(&self, outcome: Outcome) -> u64 {
        self.requests[outcome as usize].load(Ordering::Relaxed)
    }
}

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
mod tests {
    use super::*;

    #[test]
    fn every_family_is_declared_before_any_export() {
        let mut registry = Registry::default();
        register(&mut registry, None);
        let (text, _) = crate::metrics::encode(&registry, false).unwrap();
        for line in [
            "mvproxy_spans_exported_total 0",
            "mvproxy_spans_dropped_total{reason=\"queue_full\"} 0",
            "mvproxy_spans_dropped_total{reason=\"rejected\"} 0",
            "mvproxy_spans_dropped_total{reason=\"export_failed\"} 0",
            "mvproxy_span_export_requests_total{outcome=\"success\"} 0",
            "mvproxy_span_export_requests_total{outcome=\"partial_success\"} 0",
            "mvproxy_span_export_requests_total{outcome=\"retry\"} 0",
            "mvproxy_span_export_requests_total{outcome=\"failure\"} 0",
            "mvproxy_span_export_queue_length 0",
            "mvproxy_span_export_queue_capacity 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }
}
