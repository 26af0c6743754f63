//! The span queue, and the thread that exports it over OTLP (HTTP/protobuf or gRPC, plain or
//! TLS, optionally gzip-compressed).
//!
//! The request thread hands an ended span over with one short lock (`Exporter::push`) and
//! never waits: when the queue holds `OTEL_BSP_MAX_QUEUE_SIZE` spans (the batch being sent
//! counts), the span is dropped and counted (`mvproxy_spans_dropped_total{reason="queue_full"}`).
//! The export thread wakes when a batch is full or the schedule delay has passed, encodes the
//! batch (`otlp.rs`) and posts it on one kept-alive connection, driven by its own
//! single-threaded Tokio runtime (so export works whichever runtime the proxy runs, and never
//! competes with it for a worker). This follows the SDK's batch span processor (`OTEL_BSP_*`,
//! <https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/>), and
//! linkerd2-proxy's exporter, which also sends its own span records rather than the SDK's
//! (<https://github.com/linkerd/linkerd2-proxy>, `linkerd/opentelemetry/src/lib.rs`).
//!
//! Failures follow the OTLP specification
//! (<https://opentelemetry.io/docs/specs/otlp/#failures> and `#failures-1`): only the
//! retryable answers are retried (HTTP 429, 502, 503, 504; gRPC `CANCELLED`,
//! `DEADLINE_EXCEEDED`, `ABORTED`, `OUT_OF_RANGE`, `UNAVAILABLE`, `DATA_LOSS`, and
//! `RESOURCE_EXHAUSTED` when it carries a `RetryInfo`), and an unreachable collector, after the
//! delay the collector asks for (`Retry-After`, `RetryInfo`) or else an exponential backoff
//! with jitter, all within `OTEL_EXPORTER_OTLP_TIMEOUT`. When that runs out the batch goes back
//! to the front of the queue and is tried again after the schedule delay: a collector that
//! restarts or is away for a while loses nothing that fits the queue, and what does not fit is
//! counted as dropped. A non-retryable answer (a 400) drops the batch, counted. While exports
//! fail, one warning per `WARN_INTERVAL` (30 s) says how many did.
//!
//! Shutdown stops taking spans, sends what is queued, and returns within
//! `OTEL_BSP_EXPORT_TIMEOUT` whatever the collector does (even one that accepts and never
//! answers); what is still unsent then is counted as dropped (`export_failed`).
//!
//! The parts, each using only those listed before it: `stats` (the counters),
//! `retry` (which failures are retried, and the backoff), `wire` (the request as HTTP or
//! gRPC, and the collector's answer), `transport` (the kept-alive connection, and one
//! batch's export with its retries), `queue` (the spans waiting), `worker` (the export
//! thread), and `metrics` (the counters on `/metrics`). `Exporter` here is the handle the
//! rest of the crate holds.
//!
//! The encoding and the transport are mvproxy's own rather than `opentelemetry-otlp`'s: with
//! every request sampled, the crate's exporter costs a third more instructions per request,
//! measured side by side (`bench/PERF_NOTES.md`, thirteenth round). The `otlp-crate` feature
//! builds its path in place of `transport` (`otlp_crate`) so that the count can be repeated.

use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant};

use http::{HeaderMap, Uri};
use opentelemetry::KeyValue;

use crate::otlp::SpanRecord;

mod metrics;
#[cfg(feature = "otlp-crate")]
mod otlp_crate;
mod queue;
// The comparison build leaves the hand-written transport compiled but unused.
#[cfg_attr(feature = "otlp-crate", allow(dead_code))]
mod retry;
mod stats;
#[cfg_attr(feature = "otlp-crate", allow(dead_code))]
mod transport;
#[cfg_attr(feature = "otlp-crate", allow(dead_code))]
mod wire;
mod worker;

#[cfg(test)]
mod tests;

pub(crate) use metrics::register as register_metrics;
pub(crate) use retry::ExportError;

/// How a batch reaches the collector: mvproxy's own encoder and connection, or, in the
/// comparison build, `opentelemetry-otlp`'s exporter (`otlp_crate`).
#[cfg(not(feature = "otlp-crate"))]
type Transport = transport::Client;
#[cfg(feature = "otlp-crate")]
type Transport = otlp_crate::Client;

/// When and how much to export (the `OTEL_BSP_*` variables).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batching {
    /// `OTEL_BSP_SCHEDULE_DELAY`: the longest a span waits in the queue (and the wait before a
    /// batch whose retries ran out is tried again).
    pub schedule_delay: Duration,
    /// `OTEL_BSP_MAX_QUEUE_SIZE`: spans queued at most; more are dropped.
    pub max_queue: usize,
    /// `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`: spans per export request at most.
    pub max_batch: usize,
    /// `OTEL_BSP_EXPORT_TIMEOUT`: how long shutdown waits for the queue to be sent.
    pub export_timeout: Duration,
}

impl Default for Batching {
    /// The SDK's defaults.
    fn default() -> Self {
        Self {
            schedule_delay: Duration::from_millis(5_000),
            max_queue: 2_048,
            max_batch: 512,
            export_timeout: Duration::from_millis(30_000),
        }
    }
}

/// Where and how the export thread posts.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// The traces URL (HTTP) or the collector's address (gRPC).
    pub(crate) endpoint: Uri,
    pub(crate) grpc: bool,
    /// `OTEL_EXPORTER_OTLP_HEADERS`.
    pub(crate) headers: HeaderMap,
    /// `OTEL_EXPORTER_OTLP_TIMEOUT`: one export, its retries included, at most.
    pub(crate) timeout: Duration,
    /// `OTEL_EXPORTER_OTLP_COMPRESSION=gzip`.
    pub(crate) gzip: bool,
    /// For an `https://` endpoint.
    pub(crate) tls: Option<Arc<rustls::ClientConfig>>,
}

/// The queue of ended spans and its export thread.
pub(crate) struct Exporter {
    shared: Arc<queue::Shared>,
    done: Mutex<Option<mpsc::Receiver<()>>>,
    export_timeout: Duration,
}

impl Exporter {
    /// Starts the export thread.
    pub(crate) fn start(
        target: Target,
        batching: &Batching,
        resource: &[KeyValue],
    ) -> Result<Self, ExportError> {
        let client = Transport::new(target, resource)?;
        let shared = Arc::new(queue::Shared::new(batching.max_queue, batching.max_batch));
        let (done_tx, done) = mpsc::channel();
        let mut worker = worker::Worker::new(shared.clone(), client, batching);
        std::thread::Builder::new()
            .name("mvproxy-span-export".into())
            .spawn(move || {
                worker.run();
                let _ = done_tx.send(());
            })
            .map_err(ExportError::Runtime)?;
        Ok(Self {
            shared,
            done: Mutex::new(Some(done)),
            export_timeout: batching.export_timeout,
        })
    }

    /// Queues an ended span; drops it (counted) when the queue is full or export has stopped.
    pub(crate) fn push(&self, span: SpanRecord) {
        self.shared.push(span);
    }

    /// The export counters.
    fn stats(&self) -> &stats::ExportStats {
        &self.shared.stats
    }

    /// Spans waiting, the batch being sent included.
    fn queue_len(&self) -> usize {
        self.shared.len()
    }

    /// `OTEL_BSP_MAX_QUEUE_SIZE`.
    fn capacity(&self) -> usize {
        self.shared.max_queue
    }

    /// Exports what is queued and stops the thread, waiting for it up to
    /// `OTEL_BSP_EXPORT_TIMEOUT`. Later calls return at once.
    pub(crate) fn shutdown(&self) {
        self.shared.lock().stop.get_or_insert_with(Instant::now);
        self.shared.wake.notify_one();
        let done = self
            .done
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(done) = done
            && done.recv_timeout(self.export_timeout).is_err()
        {
            eprintln!(
                "mvproxy: spans still exporting after {:?} (OTEL_BSP_EXPORT_TIMEOUT): not waiting",
                self.export_timeout
            );
        }
    }
}
