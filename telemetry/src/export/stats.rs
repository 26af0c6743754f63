//! mvproxy's own account of span export: the counters the request threads (a full queue) and
//! the export thread (everything else) write, and the labels they are read under.
//!
//! A span is counted once, where its fate is decided: exported (the collector took it),
//! dropped because the queue was full, rejected by the collector (a partial success), or
//! dropped because its export failed for good (a non-retryable answer, or still unsent when
//! shutdown's bound ran out). So spans ended = exported + dropped (every reason) + the queue's
//! length, exactly; the conformance pack checks that against what reached Jaeger.

use std::sync::atomic::{AtomicU64, Ordering};

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
    pub(super) const ALL: [Self; 3] = [Self::QueueFull, Self::Rejected, Self::ExportFailed];

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
    pub(super) const ALL: [Self; 4] = [
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
