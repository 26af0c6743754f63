//! The span queue, and the thread that exports it over OTLP (HTTP/protobuf or gRPC).
//!
//! The request thread hands an ended span over with one short lock (`Exporter::push`) and
//! never waits: when the queue holds `OTEL_BSP_MAX_QUEUE_SIZE` spans, the span is dropped and
//! counted, and the export thread logs the count. The export thread wakes when a batch is full
//! or the schedule delay has passed, encodes the batch (`otlp.rs`) and posts it on one
//! kept-alive connection, driven by its own single-threaded Tokio runtime (so export works
//! whichever runtime the proxy runs, and never competes with it for a worker). This follows
//! the SDK's batch span processor (`OTEL_BSP_*`,
//! <https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/>), and
//! linkerd2-proxy's exporter, which also sends its own span records rather than the SDK's
//! (<https://github.com/linkerd/linkerd2-proxy>, `linkerd/opentelemetry/src/lib.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, mpsc};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HOST, HeaderName, HeaderValue, TE, USER_AGENT};
use http::{HeaderMap, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::otlp::{self, SpanRecord};

/// When and how much to export (the `OTEL_BSP_*` variables).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batching {
    /// `OTEL_BSP_SCHEDULE_DELAY`: the longest a span waits in the queue.
    pub schedule_delay: Duration,
    /// `OTEL_BSP_MAX_QUEUE_SIZE`: spans queued at most; more are dropped.
    pub max_queue: usize,
    /// `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`: spans per export request at most.
    pub max_batch: usize,
    /// `OTEL_BSP_EXPORT_TIMEOUT`: how long the last export at shutdown may take.
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
    /// `OTEL_EXPORTER_OTLP_TIMEOUT`: one export request at most.
    pub(crate) timeout: Duration,
}

/// What failed in one export.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExportError {
    #[error("connecting to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Http(#[from] hyper::Error),
    #[error("the collector answered {0}")]
    Status(StatusCode),
    #[error("the collector answered grpc-status {code}: {message}")]
    Grpc { code: String, message: String },
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("starting the export runtime: {0}")]
    Runtime(std::io::Error),
}

/// The queue of ended spans and its export thread.
pub(crate) struct Exporter {
    shared: Arc<Shared>,
    done: Mutex<Option<mpsc::Receiver<()>>>,
    export_timeout: Duration,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    dropped: AtomicU64,
    max_queue: usize,
    max_batch: usize,
}

struct Queue {
    spans: Vec<SpanRecord>,
    stop: bool,
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
                spans: Vec::with_capacity(max_batch),
                stop: false,
            }),
            wake: Condvar::new(),
            dropped: AtomicU64::new(0),
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
            buf: Vec::new(),
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
        if q.stop || q.spans.len() >= self.shared.max_queue {
            drop(q);
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        q.spans.push(span);
        if q.spans.len() == self.shared.max_batch {
            self.shared.wake.notify_one();
        }
    }

    /// Exports what is queued and stops the thread, waiting for it up to
    /// `OTEL_BSP_EXPORT_TIMEOUT`. Later calls return at once.
    pub(crate) fn shutdown(&self) {
        self.shared.lock().stop = true;
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

struct Worker {
    shared: Arc<Shared>,
    client: Client,
    resource: Vec<u8>,
    delay: Duration,
    buf: Vec<u8>,
}

impl Worker {
    fn run(&mut self) {
        let mut spare = Vec::with_capacity(self.shared.max_batch);
        loop {
            let deadline = Instant::now() + self.delay;
            let (mut spans, stop) = {
                let mut q = self.shared.lock();
                while !q.stop && q.spans.len() < self.shared.max_batch {
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
                (std::mem::replace(&mut q.spans, spare), q.stop)
            };
            for batch in spans.chunks(self.shared.max_batch) {
                otlp::request(&self.resource, batch, &mut self.buf);
                if let Err(e) = self.client.export(&self.buf) {
                    tracing::warn!(error = %e, spans = batch.len(), "span export failed; spans dropped");
                }
            }
            let dropped = self.shared.dropped.swap(0, Ordering::Relaxed);
            if dropped > 0 {
                tracing::warn!(
                    dropped,
                    max_queue = self.shared.max_queue,
                    "spans dropped: the export queue (OTEL_BSP_MAX_QUEUE_SIZE) was full"
                );
            }
            spans.clear();
            spare = spans;
            if stop {
                return;
            }
        }
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
    fn export(&mut self, message: &[u8]) -> Result<(), ExportError> {
        let timeout = self.target.timeout;
        let body = if self.target.grpc {
            grpc_frame(message)
        } else {
            Bytes::copy_from_slice(message)
        };
        let rt = &self.rt;
        let (target, conn) = (&self.target, &mut self.conn);
        rt.block_on(async {
            tokio::time::timeout(timeout, send(target, conn, body))
                .await
                .unwrap_or(Err(ExportError::Timeout(timeout)))
        })
    }
}

/// Posts `body`, on the kept connection if it is still open; a kept connection that turns
/// out closed before the request went out is replaced once.
async fn send(target: &Target, conn: &mut Option<Conn>, body: Bytes) -> Result<(), ExportError> {
    let mut retried = false;
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
                    && !retried
                    && (e.is_canceled() || e.is_closed() || e.is_incomplete_message()) =>
            {
                retried = true;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

async fn connect(target: &Target) -> Result<Conn, ExportError> {
    let host = target.endpoint.host().unwrap_or_default();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = target.endpoint.port_u16().unwrap_or(80);
    let tcp = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|source| ExportError::Connect {
            addr: format!("{host}:{port}"),
            source,
        })?;
    let _ = tcp.set_nodelay(true);
    let io = TokioIo::new(tcp);
    Ok(if target.grpc {
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
    h.insert(USER_AGENT, HeaderValue::from_static(AGENT));
    req
}

/// A gRPC message: behind its 5-byte prefix (not compressed, its length).
fn grpc_frame(message: &[u8]) -> Bytes {
    let mut framed = Vec::with_capacity(5 + message.len());
    framed.push(0);
    framed.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    framed.extend_from_slice(message);
    Bytes::from(framed)
}

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
    h.insert(TE, HeaderValue::from_static("trailers"));
    h.insert(USER_AGENT, HeaderValue::from_static(AGENT));
    req
}

const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");

/// Whether the collector took the spans: a 2xx over HTTP; `grpc-status: 0` over gRPC, in the
/// headers of a trailers-only answer or in the trailers.
async fn check(target: &Target, resp: Response<Incoming>) -> Result<(), ExportError> {
    let status = resp.status();
    if !status.is_success() {
        return Err(ExportError::Status(status));
    }
    if !target.grpc {
        // Read the answer to the end, so the connection can carry the next one.
        resp.into_body().collect().await?;
        return Ok(());
    }
    let (parts, body) = resp.into_parts();
    let trailers = if parts.headers.contains_key(GRPC_STATUS) {
        parts.headers
    } else {
        body.collect()
            .await?
            .trailers()
            .cloned()
            .unwrap_or_default()
    };
    let field = |name| {
        trailers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    match field(GRPC_STATUS).as_str() {
        "0" => Ok(()),
        code => Err(ExportError::Grpc {
            code: if code.is_empty() {
                "(none)".to_owned()
            } else {
                code.to_owned()
            },
            message: field(GRPC_MESSAGE),
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead as _, BufReader, Read as _, Write as _};
    use std::net::{TcpListener, TcpStream};
    use std::time::{Duration, SystemTime};

    use opentelemetry::trace::{SpanContext, SpanId, SpanKind, TraceFlags, TraceId, TraceState};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message as _;

    use super::*;

    /// One request as the collector saw it: the head's lines (lowercase), and the body.
    struct Seen {
        head: Vec<String>,
        body: Vec<u8>,
    }

    fn read_request(r: &mut BufReader<TcpStream>) -> Option<Seen> {
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
        Some(Seen { head, body })
    }

    /// A collector on loopback that answers each request on a connection with a 200 and
    /// keep-alive, and closes a connection after `per_conn` requests without saying so
    /// (as an idle timeout does).
    fn collector(per_conn: usize) -> (Uri, mpsc::Receiver<Seen>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for conn in listener.incoming().take(8) {
                let Ok(conn) = conn else { return };
                let mut w = conn.try_clone().unwrap();
                let mut r = BufReader::new(conn);
                for _ in 0..per_conn {
                    let Some(seen) = read_request(&mut r) else {
                        break;
                    };
                    let _ = w.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
                    if tx.send(seen).is_err() {
                        return;
                    }
                }
            }
        });
        (url.parse().unwrap(), rx)
    }

    fn target(endpoint: Uri, headers: HeaderMap) -> Target {
        Target {
            endpoint,
            grpc: false,
            headers,
            timeout: Duration::from_secs(5),
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

    fn trace_ids(seen: &Seen) -> Vec<u8> {
        let req = ExportTraceServiceRequest::decode(seen.body.as_slice()).unwrap();
        req.resource_spans[0].scope_spans[0]
            .spans
            .iter()
            .map(|s| s.trace_id[0])
            .collect()
    }

    const WAIT: Duration = Duration::from_secs(10);

    #[test]
    fn shutdown_exports_what_is_queued_with_the_configured_headers() {
        let (url, seen) = collector(100);
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
        exporter.push(span(4));
        exporter.shutdown();
        assert!(
            seen.recv_timeout(Duration::from_millis(300)).is_err(),
            "a span ended after shutdown goes nowhere"
        );
    }

    #[test]
    fn a_connection_the_collector_closed_while_idle_is_replaced() {
        let (url, seen) = collector(1);
        let batching = Batching {
            schedule_delay: Duration::from_millis(20),
            max_batch: 1,
            ..Batching::default()
        };
        let exporter =
            Exporter::start(target(url, HeaderMap::new()), &batching, Vec::new()).unwrap();
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
    }

    #[test]
    fn a_full_queue_drops_spans_instead_of_waiting() {
        // No collector at all: every export fails at once, and the queue is 2 long.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
        drop(listener);
        let batching = Batching {
            schedule_delay: Duration::from_secs(3600),
            max_queue: 2,
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
        assert_eq!(exporter.shared.dropped.load(Ordering::Relaxed), 3);
        assert_eq!(exporter.shared.lock().spans.len(), 2);
        exporter.shutdown();
    }
}
