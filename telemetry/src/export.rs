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

use std::collections::VecDeque;
use std::io::Write as _;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, mpsc};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use bytes::{Buf as _, Bytes};
use http::header::{
    CONTENT_ENCODING, CONTENT_TYPE, HOST, HeaderName, HeaderValue, RETRY_AFTER, TE, USER_AGENT,
};
use http::{HeaderMap, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message as _;

use crate::export_metrics::{DropReason, ExportStats, Outcome};
use crate::otlp::{self, SpanRecord};

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

/// What failed in one export request.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExportError {
    #[error("connecting to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("TLS with {addr}: {source}")]
    Tls {
        addr: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Http(#[from] hyper::Error),
    #[error("the collector answered {status}")]
    Status {
        status: StatusCode,
        retry_after: Option<Duration>,
    },
    #[error("the collector answered grpc-status {code}: {message}")]
    Grpc {
        code: u32,
        message: String,
        retry_after: Option<Duration>,
    },
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("starting the export runtime: {0}")]
    Runtime(std::io::Error),
}

/// Whether and when a failed request may be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    No,
    /// Yes, after the delay the collector asked for, if it did.
    Yes(Option<Duration>),
}

impl ExportError {
    /// The OTLP specification's retryable failures
    /// (<https://opentelemetry.io/docs/specs/otlp/#retryable-response-codes>, and
    /// `#otlpgrpc-response` for gRPC).
    fn retry(&self) -> Retry {
        match self {
            Self::Connect { .. } | Self::Tls { .. } | Self::Http(_) | Self::Timeout(_) => {
                Retry::Yes(None)
            }
            Self::Status {
                status,
                retry_after,
            } => match status.as_u16() {
                429 | 502 | 503 | 504 => Retry::Yes(*retry_after),
                _ => Retry::No,
            },
            Self::Grpc {
                code, retry_after, ..
            } => match code {
                // CANCELLED, DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE, UNAVAILABLE, DATA_LOSS
                1 | 4 | 10 | 11 | 14 | 15 => Retry::Yes(*retry_after),
                // RESOURCE_EXHAUSTED: only when the server says when to come back.
                8 if retry_after.is_some() => Retry::Yes(*retry_after),
                _ => Retry::No,
            },
            Self::Runtime(_) => Retry::No,
        }
    }
}

/// What the collector said of a batch it took.
#[derive(Debug, Default, PartialEq, Eq)]
struct Accepted {
    /// `partial_success.rejected_spans`.
    rejected: u64,
    /// `partial_success.error_message`.
    message: String,
}

/// How an export of one batch ended.
#[derive(Debug)]
enum Sent {
    Accepted(Accepted),
    /// Not retryable: the batch is dropped.
    Refused(ExportError),
    /// Retryable, but the time ran out.
    GaveUp(ExportError),
}

/// At most one warning per this interval while exports fail or spans are dropped.
pub(crate) const WARN_INTERVAL: Duration = Duration::from_secs(30);

/// The queue of ended spans and its export thread.
pub(crate) struct Exporter {
    shared: Arc<Shared>,
    done: Mutex<Option<mpsc::Receiver<()>>>,
    export_timeout: Duration,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    stats: ExportStats,
    max_queue: usize,
    max_batch: usize,
}

struct Queue {
    spans: VecDeque<SpanRecord>,
    /// Spans taken for the request being sent: they count against `max_queue`.
    in_flight: usize,
    /// When shutdown began.
    stop: Option<Instant>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Exporter {
    /// Starts the export thread.
    pub(crate) fn start(
        target: Target,
        batching: &Batching,
        resource: Vec<u8>,
    ) -> Result<Self, ExportError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ExportError::Runtime)?;
        let max_batch = batching.max_batch.min(batching.max_queue);
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                spans: VecDeque::with_capacity(max_batch),
                in_flight: 0,
                stop: None,
            }),
            wake: Condvar::new(),
            stats: ExportStats::default(),
            max_queue: batching.max_queue,
            max_batch,
        });
        let (done_tx, done) = mpsc::channel();
        let mut worker = Worker {
            shared: shared.clone(),
            client: Client {
                rt,
                target,
                conn: None,
            },
            resource,
            delay: batching.schedule_delay,
            export_timeout: batching.export_timeout,
            buf: Vec::new(),
            warn: Throttle::new(WARN_INTERVAL),
        };
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
        let mut q = self.shared.lock();
        if q.stop.is_some() || q.spans.len() + q.in_flight >= self.shared.max_queue {
            drop(q);
            self.shared.stats.dropped(DropReason::QueueFull, 1);
            return;
        }
        q.spans.push_back(span);
        if q.spans.len() == self.shared.max_batch {
            self.shared.wake.notify_one();
        }
    }

    /// The export counters.
    pub(crate) fn stats(&self) -> &ExportStats {
        &self.shared.stats
    }

    /// Spans waiting, the batch being sent included.
    pub(crate) fn queue_len(&self) -> usize {
        let q = self.shared.lock();
        q.spans.len() + q.in_flight
    }

    /// `OTEL_BSP_MAX_QUEUE_SIZE`.
    pub(crate) fn capacity(&self) -> usize {
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

/// Lets one warning through per interval, and counts the ones it held back.
#[derive(Debug)]
pub(crate) struct Throttle {
    interval: Duration,
    last: Option<Instant>,
    held: u64,
}

impl Throttle {
    pub(crate) fn new(interval: Duration) -> Self {
        Self {
            interval,
            last: None,
            held: 0,
        }
    }

    /// `Some(n)` when a warning may be logged at `now`, `n` being how many were held back
    /// since the last one; `None` (and one more held back) otherwise.
    pub(crate) fn permit(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.duration_since(last) < self.interval => {
                self.held += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.held))
            }
        }
    }
}

struct Worker {
    shared: Arc<Shared>,
    client: Client,
    resource: Vec<u8>,
    delay: Duration,
    export_timeout: Duration,
    buf: Vec<u8>,
    warn: Throttle,
}

impl Worker {
    fn run(&mut self) {
        let mut batch = Vec::with_capacity(self.shared.max_batch);
        // After a batch whose retries ran out: wait the schedule delay, not for a full batch.
        let mut pause = false;
        let mut dropped_seen = 0;
        loop {
            let deadline = Instant::now() + self.delay;
            let stop = {
                let mut q = self.shared.lock();
                while q.stop.is_none() && (pause || q.spans.len() < self.shared.max_batch) {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    q = self
                        .shared
                        .wake
                        .wait_timeout(q, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                let n = q.spans.len().min(self.shared.max_batch);
                batch.extend(q.spans.drain(..n));
                q.in_flight = n;
                q.stop
            };
            pause = false;
            let queue_full = self.shared.stats.dropped_total(DropReason::QueueFull);
            if queue_full > dropped_seen
                && let Some(held) = self.warn.permit(Instant::now())
            {
                tracing::warn!(
                    dropped = queue_full - dropped_seen,
                    max_queue = self.shared.max_queue,
                    held_back_warnings = held,
                    "spans dropped: the export queue (OTEL_BSP_MAX_QUEUE_SIZE) was full"
                );
                dropped_seen = queue_full;
            }
            if batch.is_empty() {
                if stop.is_some() {
                    return;
                }
                continue;
            }
            let n = batch.len() as u64;
            // At shutdown, every batch within nine tenths of shutdown's bound (the rest leaves
            // time to count and report what is left before `shutdown` stops waiting); else one
            // export's timeout.
            let until = stop.map_or_else(
                || Instant::now() + self.client.target.timeout,
                |at| at + self.export_timeout.mul_f64(0.9),
            );
            otlp::request(&self.resource, &batch, &mut self.buf);
            let stats = &self.shared.stats;
            match self.client.export(&self.buf, until, stats) {
                Sent::Accepted(a) => {
                    let rejected = a.rejected.min(n);
                    stats.exported(n - rejected);
                    if a.rejected > 0 || !a.message.is_empty() {
                        stats.request(Outcome::PartialSuccess);
                        stats.dropped(DropReason::Rejected, rejected);
                        if let Some(held) = self.warn.permit(Instant::now()) {
                            tracing::warn!(
                                rejected,
                                message = %a.message,
                                held_back_warnings = held,
                                "the collector rejected spans (partial success)"
                            );
                        }
                    } else {
                        stats.request(Outcome::Success);
                    }
                    batch.clear();
                }
                Sent::Refused(e) => {
                    stats.request(Outcome::Failure);
                    stats.dropped(DropReason::ExportFailed, n);
                    if let Some(held) = self.warn.permit(Instant::now()) {
                        tracing::warn!(error = %e, spans = n, held_back_warnings = held, "span export refused; spans dropped");
                    }
                    batch.clear();
                }
                Sent::GaveUp(e) => {
                    stats.request(Outcome::Failure);
                    if stop.is_some() {
                        let mut q = self.shared.lock();
                        let left = n + q.spans.len() as u64;
                        q.spans.clear();
                        q.in_flight = 0;
                        drop(q);
                        stats.dropped(DropReason::ExportFailed, left);
                        eprintln!(
                            "mvproxy: {left} span(s) not exported before OTEL_BSP_EXPORT_TIMEOUT: {e}"
                        );
                        return;
                    }
                    if let Some(held) = self.warn.permit(Instant::now()) {
                        tracing::warn!(error = %e, spans = n, held_back_warnings = held, "span export failing; spans kept in the queue and tried again");
                    }
                    let mut q = self.shared.lock();
                    for span in batch.drain(..).rev() {
                        q.spans.push_front(span);
                    }
                    q.in_flight = 0;
                    pause = true;
                    continue;
                }
            }
            self.shared.lock().in_flight = 0;
        }
    }
}

/// Exponential backoff with full jitter: the n-th wait is uniform in `[0, min(cap, base ×
/// 2^n)]` (<https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/>; the
/// OTLP specification asks for "exponential backoff with jitter" without fixing the numbers).
#[derive(Debug)]
struct Backoff {
    next: Duration,
}

const BACKOFF_BASE: Duration = Duration::from_millis(100);
const BACKOFF_CAP: Duration = Duration::from_secs(5);

impl Backoff {
    fn new() -> Self {
        Self { next: BACKOFF_BASE }
    }

    fn wait(&mut self) -> Duration {
        let ceiling = self.next;
        self.next = (self.next * 2).min(BACKOFF_CAP);
        ceiling.mul_f64(fastrand::f64())
    }
}

/// One kept-alive connection to the collector.
struct Client {
    rt: tokio::runtime::Runtime,
    target: Target,
    conn: Option<Conn>,
}

enum Conn {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

/// gRPC's path of `TraceService.Export` (`opentelemetry/proto/collector/trace/v1/
/// trace_service.proto`).
const GRPC_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

impl Client {
    /// Sends `message` (an encoded `ExportTraceServiceRequest`), retrying what the
    /// specification calls retryable until `until`.
    fn export(&mut self, message: &[u8], until: Instant, stats: &ExportStats) -> Sent {
        let payload = if self.target.gzip {
            gzip(message)
        } else {
            Bytes::copy_from_slice(message)
        };
        let body = if self.target.grpc {
            grpc_frame(&payload, self.target.gzip)
        } else {
            payload
        };
        let mut backoff = Backoff::new();
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let timeout = self.target.timeout.min(left);
            let (rt, target, conn) = (&self.rt, &self.target, &mut self.conn);
            let result = rt.block_on(async {
                tokio::time::timeout(timeout, send(target, conn, body.clone()))
                    .await
                    .unwrap_or(Err(ExportError::Timeout(timeout)))
            });
            let e = match result {
                Ok(accepted) => return Sent::Accepted(accepted),
                Err(e) => e,
            };
            if matches!(e, ExportError::Timeout(_)) {
                // A request may still be in flight on it: start the next one afresh.
                self.conn = None;
            }
            let Retry::Yes(asked) = e.retry() else {
                return Sent::Refused(e);
            };
            let wait = asked.unwrap_or_else(|| backoff.wait());
            if Instant::now() + wait >= until {
                return Sent::GaveUp(e);
            }
            stats.request(Outcome::Retry);
            self.rt.block_on(async { tokio::time::sleep(wait).await });
        }
    }
}

/// `message` gzip-compressed.
fn gzip(message: &[u8]) -> Bytes {
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(message.len() / 4),
        flate2::Compression::fast(),
    );
    // Writing into a Vec cannot fail.
    let _ = enc.write_all(message);
    Bytes::from(enc.finish().unwrap_or_default())
}

/// Posts `body`, on the kept connection if it is still open; a kept connection that turns
/// out closed before the request went out is replaced once.
async fn send(
    target: &Target,
    conn: &mut Option<Conn>,
    body: Bytes,
) -> Result<Accepted, ExportError> {
    let mut replaced = false;
    loop {
        let (mut c, reused) = match conn.take() {
            Some(c) if !c.is_closed() => (c, true),
            _ => (connect(target).await?, false),
        };
        match c.send(target, body.clone()).await {
            Ok(resp) => {
                let checked = check(target, resp).await;
                *conn = Some(c);
                return checked;
            }
            Err(e)
                if reused
                    && !replaced
                    && (e.is_canceled() || e.is_closed() || e.is_incomplete_message()) =>
            {
                replaced = true;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

async fn connect(target: &Target) -> Result<Conn, ExportError> {
    let host = target.endpoint.host().unwrap_or_default();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let default_port = if target.tls.is_some() { 443 } else { 80 };
    let port = target.endpoint.port_u16().unwrap_or(default_port);
    let addr = || format!("{host}:{port}");
    let tcp = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|source| ExportError::Connect {
            addr: addr(),
            source,
        })?;
    let _ = tcp.set_nodelay(true);
    let Some(tls) = &target.tls else {
        return handshake(target.grpc, TokioIo::new(tcp)).await;
    };
    let name =
        rustls_pki_types::ServerName::try_from(host.to_owned()).map_err(|e| ExportError::Tls {
            addr: addr(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
        })?;
    let stream = tokio_rustls::TlsConnector::from(tls.clone())
        .connect(name, tcp)
        .await
        .map_err(|source| ExportError::Tls {
            addr: addr(),
            source,
        })?;
    handshake(target.grpc, TokioIo::new(stream)).await
}

async fn handshake<I>(grpc: bool, io: I) -> Result<Conn, ExportError>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    Ok(if grpc {
        let (send, conn) = http2::handshake(TokioExecutor::new(), io).await?;
        tokio::spawn(conn);
        Conn::H2(send)
    } else {
        let (send, conn) = http1::handshake(io).await?;
        tokio::spawn(conn);
        Conn::H1(send)
    })
}

impl Conn {
    fn is_closed(&self) -> bool {
        match self {
            Self::H1(s) => s.is_closed(),
            Self::H2(s) => s.is_closed(),
        }
    }

    async fn send(
        &mut self,
        target: &Target,
        body: Bytes,
    ) -> Result<Response<Incoming>, hyper::Error> {
        match self {
            Self::H1(s) => {
                s.ready().await?;
                s.send_request(http_request(target, body)).await
            }
            Self::H2(s) => {
                s.ready().await?;
                s.send_request(grpc_request(target, body)).await
            }
        }
    }
}

const PROTOBUF: HeaderValue = HeaderValue::from_static("application/x-protobuf");
const GRPC: HeaderValue = HeaderValue::from_static("application/grpc");
const GZIP: HeaderValue = HeaderValue::from_static("gzip");
const AGENT: &str = concat!("mvproxy/", env!("CARGO_PKG_VERSION"));

fn http_request(target: &Target, message: Bytes) -> Request<Full<Bytes>> {
    let mut req = Request::new(Full::new(message));
    *req.method_mut() = http::Method::POST;
    *req.uri_mut() = target
        .endpoint
        .path_and_query()
        .map_or_else(|| Uri::from_static("/"), |p| Uri::from(p.clone()));
    let h = req.headers_mut();
    h.extend(target.headers.clone());
    if let Some(a) = target.endpoint.authority()
        && let Ok(v) = HeaderValue::from_str(a.as_str())
    {
        h.insert(HOST, v);
    }
    h.insert(CONTENT_TYPE, PROTOBUF);
    if target.gzip {
        h.insert(CONTENT_ENCODING, GZIP);
    }
    h.insert(USER_AGENT, HeaderValue::from_static(AGENT));
    req
}

/// A gRPC message behind its 5-byte prefix: the compressed flag, then its length
/// (<https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md>, "Length-Prefixed-Message").
fn grpc_frame(message: &[u8], compressed: bool) -> Bytes {
    let mut framed = Vec::with_capacity(5 + message.len());
    framed.push(u8::from(compressed));
    framed.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    framed.extend_from_slice(message);
    Bytes::from(framed)
}

const GRPC_ENCODING: HeaderName = HeaderName::from_static("grpc-encoding");

/// A gRPC unary call of `TraceService.Export` carrying `framed` (from [`grpc_frame`]).
fn grpc_request(target: &Target, framed: Bytes) -> Request<Full<Bytes>> {
    let mut req = Request::new(Full::new(framed));
    *req.method_mut() = http::Method::POST;
    let base = target.endpoint.path().trim_end_matches('/');
    let mut parts = target.endpoint.clone().into_parts();
    parts.path_and_query = format!("{base}{GRPC_PATH}").parse().ok();
    if let Ok(uri) = Uri::from_parts(parts) {
        *req.uri_mut() = uri;
    }
    *req.version_mut() = http::Version::HTTP_2;
    let h = req.headers_mut();
    h.extend(target.headers.clone());
    h.insert(CONTENT_TYPE, GRPC);
    if target.gzip {
        h.insert(GRPC_ENCODING, GZIP);
    }
    h.insert(TE, HeaderValue::from_static("trailers"));
    h.insert(USER_AGENT, HeaderValue::from_static(AGENT));
    req
}

const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
const GRPC_STATUS_DETAILS: HeaderName = HeaderName::from_static("grpc-status-details-bin");

/// `Retry-After` as seconds or an HTTP date (RFC 9110, section 10.2.3).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(SystemTime::now()).unwrap_or_default())
}

/// Whether the collector took the spans, and what it said of them: a 2xx over HTTP;
/// `grpc-status: 0` over gRPC, in the headers of a trailers-only answer or in the trailers.
/// The body of an accepted request is an `ExportTraceServiceResponse`, whose
/// `partial_success` says how many spans were rejected.
async fn check(target: &Target, resp: Response<Incoming>) -> Result<Accepted, ExportError> {
    let status = resp.status();
    if !status.is_success() {
        let retry_after = retry_after(resp.headers());
        // Read the answer to the end, so the connection can carry the next one.
        let _ = resp.into_body().collect().await;
        return Err(ExportError::Status {
            status,
            retry_after,
        });
    }
    let (parts, body) = resp.into_parts();
    let collected = body.collect().await?;
    let trailers = if parts.headers.contains_key(GRPC_STATUS) {
        parts.headers.clone()
    } else {
        collected.trailers().cloned().unwrap_or_default()
    };
    let body = collected.to_bytes();
    if !target.grpc {
        return Ok(response(
            &body,
            parts.headers.get(CONTENT_ENCODING) == Some(&GZIP),
        ));
    }
    let field = |name| {
        trailers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
            .unwrap_or_default()
    };
    match field(GRPC_STATUS) {
        "0" => {
            // Length-Prefixed-Message: the compressed flag, the length, the message.
            let mut b = body;
            if b.len() < 5 {
                return Ok(Accepted::default());
            }
            let compressed = b.get_u8() == 1;
            let len = b.get_u32() as usize;
            Ok(response(&b[..len.min(b.len())], compressed))
        }
        code => Err(ExportError::Grpc {
            // A missing or unreadable status is UNKNOWN (2), not retried.
            code: code.parse().unwrap_or(2),
            message: field(GRPC_MESSAGE).to_owned(),
            retry_after: trailers
                .get(GRPC_STATUS_DETAILS)
                .and_then(|v| grpc_retry_delay(v.as_bytes())),
        }),
    }
}

/// The partial success of an `ExportTraceServiceResponse`; an empty or unreadable body is a
/// full success (the specification's answer to a collector that sends none).
fn response(body: &[u8], gzipped: bool) -> Accepted {
    let decoded;
    let body = if gzipped {
        let mut out = Vec::new();
        if std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(body), &mut out).is_err() {
            return Accepted::default();
        }
        decoded = out;
        &decoded[..]
    } else {
        body
    };
    ExportTraceServiceResponse::decode(body)
        .ok()
        .and_then(|r| r.partial_success)
        .map(|p| Accepted {
            rejected: u64::try_from(p.rejected_spans).unwrap_or(0),
            message: p.error_message,
        })
        .unwrap_or_default()
}

/// `google.rpc.Status` (<https://github.com/googleapis/googleapis>,
/// `google/rpc/status.proto`), as `grpc-status-details-bin` carries it.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<ProtoAny>,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoAny {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// `google.rpc.RetryInfo` (`google/rpc/error_details.proto`).
#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<ProtoDuration>,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

const RETRY_INFO: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// The `RetryInfo.retry_delay` in a `grpc-status-details-bin` value (base64, padded or not).
fn grpc_retry_delay(value: &[u8]) -> Option<Duration> {
    let raw = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(
            value
                .strip_suffix(b"==")
                .or(value.strip_suffix(b"="))
                .unwrap_or(value),
        )
        .ok()?;
    let status = RpcStatus::decode(raw.as_slice()).ok()?;
    let info = status.details.iter().find(|d| d.type_url == RETRY_INFO)?;
    let delay = RetryInfo::decode(info.value.as_slice()).ok()?.retry_delay?;
    Some(Duration::new(
        u64::try_from(delay.seconds).ok()?,
        u32::try_from(delay.nanos).ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::{SocketAddr, TcpListener};
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, SystemTime};

    use opentelemetry::trace::{SpanContext, SpanId, SpanKind, TraceFlags, TraceId, TraceState};
    use opentelemetry_proto::tonic::collector::trace::v1::{
        ExportTracePartialSuccess, ExportTraceServiceRequest,
    };

    use super::*;
    use crate::export_tls::{FileVar, client_config};

    /// One request as the collector saw it: the head's lines (lowercase), and the body.
    struct Seen {
        head: Vec<String>,
        body: Vec<u8>,
        at: Instant,
    }

    fn read_request(r: &mut impl BufRead) -> Option<Seen> {
        let mut head = Vec::new();
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).ok()? == 0 {
                return None;
            }
            let line = line.trim_end().to_ascii_lowercase();
            if line.is_empty() {
                break;
            }
            head.push(line);
        }
        let len = head
            .iter()
            .find_map(|l| l.strip_prefix("content-length: "))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        r.read_exact(&mut body).ok()?;
        Some(Seen {
            head,
            body,
            at: Instant::now(),
        })
    }

    const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";

    /// How the stand-in collector behaves.
    struct Script {
        /// Requests answered per connection before it is closed without a word (as an idle
        /// timeout does).
        per_conn: usize,
        /// The answers to the first requests, in order; a 200 after them.
        answers: Vec<Vec<u8>>,
        /// Serve TLS, requiring a client certificate the CA signed when `client_ca`.
        tls: Option<Arc<rustls::ServerConfig>>,
    }

    impl Default for Script {
        fn default() -> Self {
            Self {
                per_conn: 100,
                answers: Vec::new(),
                tls: None,
            }
        }
    }

    fn serve_conn<S: Read + Write>(
        stream: S,
        script: &Script,
        answered: &AtomicUsize,
        tx: &mpsc::Sender<Seen>,
    ) -> bool {
        let mut r = BufReader::new(stream);
        for _ in 0..script.per_conn {
            let Some(seen) = read_request(&mut r) else {
                return true;
            };
            let n = answered.fetch_add(1, Ordering::Relaxed);
            let answer = script.answers.get(n).map_or(OK, Vec::as_slice);
            let _ = r.get_mut().write_all(answer);
            let _ = r.get_mut().flush();
            if tx.send(seen).is_err() {
                return false;
            }
        }
        true
    }

    /// A collector on `listener` (loopback), serving up to 8 connections one after the other.
    fn collector_on(listener: TcpListener, script: Script) -> mpsc::Receiver<Seen> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let answered = AtomicUsize::new(0);
            for conn in listener.incoming().take(8) {
                let Ok(conn) = conn else { return };
                let more = match &script.tls {
                    None => serve_conn(conn, &script, &answered, &tx),
                    Some(config) => {
                        let Ok(tls) = rustls::ServerConnection::new(config.clone()) else {
                            return;
                        };
                        serve_conn(rustls::StreamOwned::new(tls, conn), &script, &answered, &tx)
                    }
                };
                if !more {
                    return;
                }
            }
        });
        rx
    }

    fn collector(script: Script) -> (Uri, mpsc::Receiver<Seen>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let scheme = if script.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let url = format!("{scheme}://{}/v1/traces", listener.local_addr().unwrap());
        (url.parse().unwrap(), collector_on(listener, script))
    }

    fn target(endpoint: Uri, headers: HeaderMap) -> Target {
        Target {
            endpoint,
            grpc: false,
            headers,
            timeout: Duration::from_secs(5),
            gzip: false,
            tls: None,
        }
    }

    fn span(n: u8) -> SpanRecord {
        let now = SystemTime::now();
        SpanRecord {
            context: SpanContext::new(
                TraceId::from_bytes([n; 16]),
                SpanId::from_bytes([n; 8]),
                TraceFlags::SAMPLED,
                false,
                TraceState::NONE,
            ),
            parent: None,
            name: "GET".into(),
            kind: SpanKind::Server,
            start: now,
            end: now,
            attributes: Vec::new(),
            events: Vec::new(),
            error: false,
        }
    }

    fn decode(body: &[u8]) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest::decode(body).unwrap()
    }

    fn trace_ids(seen: &Seen) -> Vec<u8> {
        decode(&seen.body).resource_spans[0].scope_spans[0]
            .spans
            .iter()
            .map(|s| s.trace_id[0])
            .collect()
    }

    const WAIT: Duration = Duration::from_secs(10);

    /// Quick batches, a short shutdown bound.
    fn quick() -> Batching {
        Batching {
            schedule_delay: Duration::from_millis(20),
            max_batch: 1,
            export_timeout: Duration::from_millis(500),
            ..Batching::default()
        }
    }

    fn counts(e: &Exporter) -> [u64; 4] {
        let s = e.stats();
        [
            s.exported_total(),
            s.dropped_total(DropReason::QueueFull),
            s.dropped_total(DropReason::Rejected),
            s.dropped_total(DropReason::ExportFailed),
        ]
    }

    /// The export thread counts what it could not send as it gives up, within shutdown's
    /// bound; on a loaded machine that can land just after `shutdown` stopped waiting.
    fn wait_for_export_failed(exporter: &Exporter) {
        let give_up = Instant::now() + WAIT;
        while counts(exporter)[3] == 0 {
            assert!(Instant::now() < give_up, "never counted");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn shutdown_exports_what_is_queued_with_the_configured_headers() {
        let (url, seen) = collector(Script::default());
        let mut headers = HeaderMap::new();
        headers.insert("authorization", HeaderValue::from_static("Bearer t0ken"));
        let batching = Batching {
            schedule_delay: Duration::from_secs(3600),
            ..Batching::default()
        };
        let exporter = Exporter::start(target(url, headers), &batching, Vec::new()).unwrap();
        for n in 1..=3 {
            exporter.push(span(n));
        }
        assert_eq!(exporter.queue_len(), 3);
        exporter.shutdown();
        let got = seen.recv_timeout(WAIT).unwrap();
        assert_eq!(
            trace_ids(&got),
            [1, 2, 3],
            "one request, every span, in order"
        );
        assert_eq!(got.head[0], "post /v1/traces http/1.1");
        for line in [
            "content-type: application/x-protobuf",
            "authorization: bearer t0ken",
        ] {
            assert!(got.head.iter().any(|l| l == line), "{line}: {:?}", got.head);
        }
        let scope = decode(&got.body).resource_spans[0].scope_spans[0]
            .scope
            .clone()
            .unwrap();
        assert_eq!(
            (scope.name.as_str(), scope.version.as_str()),
            ("mvproxy", env!("CARGO_PKG_VERSION"))
        );
        exporter.push(span(4));
        exporter.shutdown();
        assert!(
            seen.recv_timeout(Duration::from_millis(300)).is_err(),
            "a span ended after shutdown goes nowhere"
        );
        assert_eq!(counts(&exporter), [3, 1, 0, 0], "the late span counted");
        assert_eq!(exporter.stats().requests_total(Outcome::Success), 1);
        assert_eq!(exporter.queue_len(), 0);
    }

    #[test]
    fn a_connection_the_collector_closed_while_idle_is_replaced() {
        let (url, seen) = collector(Script {
            per_conn: 1,
            ..Script::default()
        });
        let exporter =
            Exporter::start(target(url, HeaderMap::new()), &quick(), Vec::new()).unwrap();
        exporter.push(span(1));
        assert_eq!(trace_ids(&seen.recv_timeout(WAIT).unwrap()), [1]);
        // The collector has closed that connection; the exporter does not know yet.
        std::thread::sleep(Duration::from_millis(100));
        exporter.push(span(2));
        assert_eq!(
            trace_ids(&seen.recv_timeout(WAIT).unwrap()),
            [2],
            "the batch is sent again on a new connection, not lost"
        );
        exporter.shutdown();
        assert_eq!(counts(&exporter), [2, 0, 0, 0]);
    }

    /// An address on loopback nothing listens on (yet).
    fn free_addr() -> SocketAddr {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    }

    #[test]
    fn a_full_queue_drops_spans_and_shutdown_counts_what_it_could_not_send() {
        // No collector at all: every export fails at once, and the queue is 2 long.
        let url = format!("http://{}/v1/traces", free_addr());
        let batching = Batching {
            schedule_delay: Duration::from_secs(3600),
            max_queue: 2,
            export_timeout: Duration::from_millis(300),
            ..Batching::default()
        };
        let exporter = Exporter::start(
            target(url.parse().unwrap(), HeaderMap::new()),
            &batching,
            Vec::new(),
        )
        .unwrap();
        for n in 0..5 {
            exporter.push(span(n));
        }
        assert_eq!(counts(&exporter), [0, 3, 0, 0]);
        assert_eq!(exporter.queue_len(), 2);
        exporter.shutdown();
        wait_for_export_failed(&exporter);
        assert_eq!(
            counts(&exporter),
            [0, 3, 0, 2],
            "unsent at shutdown's bound: export_failed"
        );
    }

    #[test]
    fn a_collector_that_goes_away_and_comes_back_loses_nothing_that_fit_the_queue() {
        let addr = free_addr();
        let url = format!("http://{addr}/v1/traces");
        let batching = Batching {
            schedule_delay: Duration::from_millis(20),
            max_queue: 10,
            max_batch: 4,
            export_timeout: Duration::from_secs(5),
        };
        let mut t = target(url.parse().unwrap(), HeaderMap::new());
        t.timeout = Duration::from_millis(200);
        let exporter = Exporter::start(t, &batching, Vec::new()).unwrap();
        for n in 0..12 {
            exporter.push(span(n));
        }
        // Wait until at least one export has failed for good while the collector was away.
        let give_up = Instant::now() + WAIT;
        while exporter.stats().requests_total(Outcome::Failure) == 0 {
            assert!(Instant::now() < give_up, "no export failed");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(counts(&exporter), [0, 2, 0, 0], "kept in the queue");
        let seen = collector_on(TcpListener::bind(addr).unwrap(), Script::default());
        let mut got = Vec::new();
        while got.len() < 10 {
            got.extend(trace_ids(&seen.recv_timeout(WAIT).unwrap()));
        }
        got.sort_unstable();
        assert_eq!(got, (0..10).collect::<Vec<u8>>(), "each once, none lost");
        exporter.shutdown();
        assert_eq!(counts(&exporter), [10, 2, 0, 0]);
        assert_eq!(exporter.queue_len(), 0);
    }

    #[test]
    fn a_503_is_retried_after_its_retry_after_and_a_400_is_not_retried() {
        let (url, seen) = collector(Script {
            answers: vec![
                b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\ncontent-length: 0\r\n\r\n"
                    .to_vec(),
                OK.to_vec(),
                b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n".to_vec(),
            ],
            ..Script::default()
        });
        let exporter =
            Exporter::start(target(url, HeaderMap::new()), &quick(), Vec::new()).unwrap();
        exporter.push(span(1));
        let first = seen.recv_timeout(WAIT).unwrap();
        let again = seen.recv_timeout(WAIT).unwrap();
        assert_eq!(trace_ids(&again), [1], "the same span sent again");
        assert!(
            again.at.duration_since(first.at) >= Duration::from_secs(1),
            "not before the Retry-After"
        );
        exporter.push(span(2));
        assert_eq!(trace_ids(&seen.recv_timeout(WAIT).unwrap()), [2]);
        exporter.push(span(3));
        assert_eq!(
            trace_ids(&seen.recv_timeout(WAIT).unwrap()),
            [3],
            "the span after the refused one comes next: the 400 was not retried"
        );
        exporter.shutdown();
        assert_eq!(counts(&exporter), [2, 0, 0, 1]);
        let s = exporter.stats();
        assert_eq!(
            [
                s.requests_total(Outcome::Success),
                s.requests_total(Outcome::Retry),
                s.requests_total(Outcome::Failure)
            ],
            [2, 1, 1]
        );
    }

    #[test]
    fn a_partial_success_is_counted() {
        let answer = ExportTraceServiceResponse {
            partial_success: Some(ExportTracePartialSuccess {
                rejected_spans: 1,
                error_message: "span too large".into(),
            }),
        }
        .encode_to_vec();
        let mut http = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\n\r\n",
            answer.len()
        )
        .into_bytes();
        http.extend_from_slice(&answer);
        let (url, seen) = collector(Script {
            answers: vec![http],
            ..Script::default()
        });
        let batching = Batching {
            schedule_delay: Duration::from_secs(3600),
            ..Batching::default()
        };
        let exporter =
            Exporter::start(target(url, HeaderMap::new()), &batching, Vec::new()).unwrap();
        exporter.push(span(1));
        exporter.push(span(2));
        exporter.shutdown();
        assert_eq!(trace_ids(&seen.recv_timeout(WAIT).unwrap()), [1, 2]);
        assert_eq!(counts(&exporter), [1, 0, 1, 0]);
        assert_eq!(exporter.stats().requests_total(Outcome::PartialSuccess), 1);
    }

    #[test]
    fn gzip_compresses_the_body() {
        let (url, seen) = collector(Script::default());
        let mut t = target(url, HeaderMap::new());
        t.gzip = true;
        let exporter = Exporter::start(t, &quick(), Vec::new()).unwrap();
        exporter.push(span(7));
        let got = seen.recv_timeout(WAIT).unwrap();
        assert!(
            got.head.iter().any(|l| l == "content-encoding: gzip"),
            "{:?}",
            got.head
        );
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(got.body.as_slice())
            .read_to_end(&mut plain)
            .unwrap();
        let req = decode(&plain);
        assert_eq!(
            req.resource_spans[0].scope_spans[0].spans[0].trace_id,
            [7; 16]
        );
        exporter.shutdown();
    }

    #[test]
    fn shutdown_returns_against_a_collector_that_never_answers() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
        let (hold_tx, hold_rx) = mpsc::channel();
        std::thread::spawn(move || {
            // Accept and keep the connections open, reading nothing, answering nothing.
            for conn in listener.incoming().take(4) {
                if hold_tx.send(conn).is_err() {
                    return;
                }
            }
        });
        let batching = Batching {
            schedule_delay: Duration::from_secs(3600),
            export_timeout: Duration::from_millis(300),
            ..Batching::default()
        };
        let mut t = target(url.parse().unwrap(), HeaderMap::new());
        t.timeout = Duration::from_secs(3600);
        let exporter = Exporter::start(t, &batching, Vec::new()).unwrap();
        exporter.push(span(1));
        exporter.push(span(2));
        exporter.shutdown();
        wait_for_export_failed(&exporter);
        assert_eq!(counts(&exporter), [0, 0, 0, 2]);
        drop(hold_rx);
    }

    /// A CA, a serving certificate for 127.0.0.1 and a client certificate, as PEM files.
    struct Pki {
        dir: PathBuf,
        server: rustls::ServerConfig,
    }

    fn pki() -> Pki {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "mvproxy-export-tls-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        std::fs::write(dir.join("ca.crt"), ca_cert.pem()).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let leaf = |name: &str, sans: Vec<String>| {
            let key = KeyPair::generate().unwrap();
            let cert = CertificateParams::new(sans)
                .unwrap()
                .signed_by(&key, &issuer)
                .unwrap();
            std::fs::write(dir.join(format!("{name}.crt")), cert.pem()).unwrap();
            std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
            (cert.der().clone(), key.serialize_der())
        };
        let (server_cert, server_key) = leaf("server", vec!["127.0.0.1".into()]);
        leaf("client", Vec::new());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca_cert.der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            roots.into(),
            provider.clone(),
        )
        .build()
        .unwrap();
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(
                vec![server_cert],
                rustls_pki_types::PrivatePkcs8KeyDer::from(server_key).into(),
            )
            .unwrap();
        Pki { dir, server }
    }

    impl Drop for Pki {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn file<'a>(var: &'static str, path: &'a str) -> FileVar<'a> {
        FileVar { var, path }
    }

    #[test]
    fn https_with_a_client_certificate_and_without_one() {
        let pki = pki();
        let path = |f: &str| pki.dir.join(f).to_str().unwrap().to_owned();
        let (ca, cert, key) = (path("ca.crt"), path("client.crt"), path("client.key"));
        let (url, seen) = collector(Script {
            tls: Some(Arc::new(pki.server.clone())),
            ..Script::default()
        });
        let mut t = target(url.clone(), HeaderMap::new());
        t.tls = Some(
            client_config(
                Some(file("CA", &ca)),
                Some((file("CERT", &cert), file("KEY", &key))),
                false,
            )
            .unwrap(),
        );
        let exporter = Exporter::start(t, &quick(), Vec::new()).unwrap();
        exporter.push(span(3));
        assert_eq!(trace_ids(&seen.recv_timeout(WAIT).unwrap()), [3]);
        exporter.shutdown();
        assert_eq!(counts(&exporter), [1, 0, 0, 0]);

        // The same collector refuses a client without a certificate: nothing arrives.
        let mut t = target(url, HeaderMap::new());
        t.tls = Some(client_config(Some(file("CA", &ca)), None, false).unwrap());
        t.timeout = Duration::from_millis(200);
        let exporter = Exporter::start(t, &quick(), Vec::new()).unwrap();
        exporter.push(span(4));
        exporter.shutdown();
        wait_for_export_failed(&exporter);
        assert!(seen.recv_timeout(Duration::from_millis(300)).is_err());
        assert_eq!(counts(&exporter), [0, 0, 0, 1]);
    }

    #[test]
    fn grpc_over_mutual_tls() {
        let pki = pki();
        let path = |f: &str| pki.dir.join(f).to_str().unwrap().to_owned();
        let (ca, cert, key) = (path("ca.crt"), path("client.crt"), path("client.key"));
        let mut server = pki.server.clone();
        server.alpn_protocols = vec![b"h2".to_vec()];
        let (url, seen) = grpc_collector(Vec::new(), Some(Arc::new(server)));
        let mut t = target(url, HeaderMap::new());
        t.grpc = true;
        t.tls = Some(
            client_config(
                Some(file("CA", &ca)),
                Some((file("CERT", &cert), file("KEY", &key))),
                true,
            )
            .unwrap(),
        );
        let exporter = Exporter::start(t, &quick(), Vec::new()).unwrap();
        exporter.push(span(8));
        let (encoding, frame) = seen.recv_timeout(WAIT).unwrap();
        assert_eq!(encoding, None, "not compressed unless asked");
        assert_eq!(frame[0], 0);
        assert_eq!(
            decode(&frame[5..]).resource_spans[0].scope_spans[0].spans[0].trace_id,
            [8; 16]
        );
        exporter.shutdown();
        assert_eq!(counts(&exporter), [1, 0, 0, 0]);
    }

    #[test]
    fn a_bad_client_key_names_its_variable() {
        let pki = pki();
        let path = |f: &str| pki.dir.join(f).to_str().unwrap().to_owned();
        let (ca, cert) = (path("ca.crt"), path("client.crt"));
        let e = client_config(
            Some(file("CA", &ca)),
            Some((file("CERT", &cert), file("KEY", &ca))),
            false,
        )
        .unwrap_err();
        assert_eq!(e.var, "KEY", "{e}");
        let e = client_config(Some(file("CA", &path("missing.crt"))), None, false).unwrap_err();
        assert_eq!(e.var, "CA", "{e}");
    }

    /// A call as the gRPC collector saw it: its `grpc-encoding`, and its framed message.
    type GrpcCall = (Option<String>, Vec<u8>);

    /// A gRPC collector on loopback (HTTP/2, over TLS when `tls`) answering the calls with
    /// these `grpc-status` codes in order (trailers-only answers), then `0`; it passes on each
    /// call's `grpc-encoding` header and message.
    fn grpc_collector(
        codes: Vec<&'static str>,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> (Uri, mpsc::Receiver<GrpcCall>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{}", listener.local_addr().unwrap());
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let calls = Arc::new(AtomicUsize::new(0));
                let codes = Arc::new(codes);
                while let Ok((tcp, _)) = listener.accept().await {
                    let (tx, calls, codes) = (tx.clone(), calls.clone(), codes.clone());
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let (tx, calls, codes) = (tx.clone(), calls.clone(), codes.clone());
                        async move {
                            let encoding = req
                                .headers()
                                .get("grpc-encoding")
                                .map(|v| v.to_str().unwrap().to_owned());
                            let body = req.into_body().collect().await?.to_bytes().to_vec();
                            let _ = tx.send((encoding, body));
                            let n = calls.fetch_add(1, Ordering::Relaxed);
                            let code = codes.get(n).copied().unwrap_or("0");
                            Ok::<_, hyper::Error>(
                                Response::builder()
                                    .header("content-type", "application/grpc")
                                    .header("grpc-status", code)
                                    .body(Full::new(Bytes::new()))
                                    .unwrap(),
                            )
                        }
                    });
                    let http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
                    match &tls {
                        None => {
                            tokio::spawn(http2.serve_connection(TokioIo::new(tcp), service));
                        }
                        Some(config) => {
                            let acceptor = tokio_rustls::TlsAcceptor::from(config.clone());
                            tokio::spawn(async move {
                                if let Ok(stream) = acceptor.accept(tcp).await {
                                    let _ =
                                        http2.serve_connection(TokioIo::new(stream), service).await;
                                }
                            });
                        }
                    }
                }
            });
        });
        (url.parse().unwrap(), rx)
    }

    #[test]
    fn grpc_unavailable_is_retried_and_the_message_is_gzip_compressed() {
        let (url, seen) = grpc_collector(vec!["14", "0", "3"], None);
        let mut t = target(url, HeaderMap::new());
        t.grpc = true;
        t.gzip = true;
        let exporter = Exporter::start(t, &quick(), Vec::new()).unwrap();
        exporter.push(span(5));
        for _ in 0..2 {
            let (encoding, frame) = seen.recv_timeout(WAIT).unwrap();
            assert_eq!(encoding.as_deref(), Some("gzip"));
            assert_eq!(frame[0], 1, "the compressed flag");
            let len = u32::from_be_bytes(frame[1..5].try_into().unwrap()) as usize;
            assert_eq!(len, frame.len() - 5);
            let mut plain = Vec::new();
            flate2::read::GzDecoder::new(&frame[5..])
                .read_to_end(&mut plain)
                .unwrap();
            assert_eq!(
                decode(&plain).resource_spans[0].scope_spans[0].spans[0].trace_id,
                [5; 16],
                "the same span, sent again after UNAVAILABLE"
            );
        }
        exporter.push(span(6));
        let (_, frame) = seen.recv_timeout(WAIT).unwrap();
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(&frame[5..])
            .read_to_end(&mut plain)
            .unwrap();
        assert_eq!(
            decode(&plain).resource_spans[0].scope_spans[0].spans[0].trace_id,
            [6; 16]
        );
        exporter.push(span(7));
        assert!(seen.recv_timeout(WAIT).is_ok());
        exporter.shutdown();
        // 5: UNAVAILABLE then sent; 6: INVALID_ARGUMENT, not retried; 7: sent.
        assert_eq!(counts(&exporter), [2, 0, 0, 1]);
        let s = exporter.stats();
        assert_eq!(
            [
                s.requests_total(Outcome::Success),
                s.requests_total(Outcome::Retry),
                s.requests_total(Outcome::Failure)
            ],
            [2, 1, 1]
        );
    }

    #[test]
    fn which_failures_are_retried() {
        let status = |code: u16, retry_after| ExportError::Status {
            status: StatusCode::from_u16(code).unwrap(),
            retry_after,
        };
        let grpc = |code, retry_after| ExportError::Grpc {
            code,
            message: String::new(),
            retry_after,
        };
        let later = Some(Duration::from_secs(2));
        for (e, want) in [
            (status(503, later), Retry::Yes(later)),
            (status(429, None), Retry::Yes(None)),
            (status(502, None), Retry::Yes(None)),
            (status(504, None), Retry::Yes(None)),
            (status(400, None), Retry::No),
            (status(401, None), Retry::No),
            (status(500, None), Retry::No),
            (grpc(14, None), Retry::Yes(None)),
            (grpc(4, None), Retry::Yes(None)),
            (grpc(8, None), Retry::No),
            (grpc(8, later), Retry::Yes(later)),
            (grpc(3, None), Retry::No),
            (ExportError::Timeout(Duration::ZERO), Retry::Yes(None)),
        ] {
            assert_eq!(e.retry(), want, "{e}");
        }
    }

    #[test]
    fn retry_info_in_grpc_status_details() {
        let info = RetryInfo {
            retry_delay: Some(ProtoDuration {
                seconds: 3,
                nanos: 500_000_000,
            }),
        };
        let status = RpcStatus {
            code: 8,
            message: "slow down".into(),
            details: vec![ProtoAny {
                type_url: RETRY_INFO.into(),
                value: info.encode_to_vec(),
            }],
        };
        let bin = base64::engine::general_purpose::STANDARD.encode(status.encode_to_vec());
        assert_eq!(
            grpc_retry_delay(bin.as_bytes()),
            Some(Duration::from_millis(3500))
        );
        assert_eq!(grpc_retry_delay(b"not base64!"), None);
    }

    #[test]
    fn one_warning_per_interval() {
        let mut t = Throttle::new(Duration::from_secs(30));
        let t0 = Instant::now();
        assert_eq!(t.permit(t0), Some(0));
        for s in 1..30 {
            assert_eq!(t.permit(t0 + Duration::from_secs(s)), None);
        }
        assert_eq!(
            t.permit(t0 + Duration::from_secs(30)),
            Some(29),
            "the next one says how many were held back"
        );
    }

    #[test]
    fn backoff_grows_to_its_cap_with_jitter() {
        let mut b = Backoff::new();
        for _ in 0..20 {
            assert!(b.wait() <= BACKOFF_CAP);
        }
        assert_eq!(b.next, BACKOFF_CAP);
    }
}
