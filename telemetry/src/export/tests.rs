use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use std::sync::mpsc;

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry::trace::{SpanContext, SpanId, SpanKind, TraceFlags, TraceId, TraceState};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message as _;

use super::stats::{DropReason, Outcome};
use super::*;
use crate::setup::tls::{Ca, FileVar, client_config};

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
    let exporter = Exporter::start(target(url, headers), &batching, &[]).unwrap();
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
    let exporter = Exporter::start(target(url, HeaderMap::new()), &quick(), &[]).unwrap();
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

/// A loopback address nothing listens on, for a collector that is away (and, in one test, comes
/// back on it). From below the kernel's ephemeral range (`net.ipv4.ip_local_port_range`): a port
/// `bind(0)` returns lies inside it, where the exporter's own outgoing connections could be
/// given it (or connect to themselves on it) while the test waits for them to fail.
fn free_addr() -> SocketAddr {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let first = low.saturating_sub(4096).max(1024);
    let span = usize::from(low.saturating_sub(first));
    assert!(
        span > 0,
        "no loopback port below the ephemeral range ({low}-)"
    );
    // Tests run in parallel, and other test binaries beside them: each call starts elsewhere.
    let start = std::process::id() as usize + 97 * NEXT.fetch_add(1, Ordering::Relaxed);
    (0..span)
        .map(|k| first + u16::try_from((start + k) % span).unwrap())
        .find(|&port| TcpListener::bind(("127.0.0.1", port)).is_ok())
        .map(|port| SocketAddr::from(([127, 0, 0, 1], port)))
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
        &[],
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
    let exporter = Exporter::start(t, &batching, &[]).unwrap();
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
    let exporter = Exporter::start(target(url, HeaderMap::new()), &quick(), &[]).unwrap();
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
    let exporter = Exporter::start(target(url, HeaderMap::new()), &batching, &[]).unwrap();
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
    let exporter = Exporter::start(t, &quick(), &[]).unwrap();
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
    let exporter = Exporter::start(t, &batching, &[]).unwrap();
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
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider.clone())
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
            Ca::File(file("CA", &ca)),
            Some((file("CERT", &cert), file("KEY", &key))),
            false,
        )
        .unwrap(),
    );
    let exporter = Exporter::start(t, &quick(), &[]).unwrap();
    exporter.push(span(3));
    assert_eq!(trace_ids(&seen.recv_timeout(WAIT).unwrap()), [3]);
    exporter.shutdown();
    assert_eq!(counts(&exporter), [1, 0, 0, 0]);

    // The same collector refuses a client without a certificate: nothing arrives.
    let mut t = target(url, HeaderMap::new());
    t.tls = Some(client_config(Ca::File(file("CA", &ca)), None, false).unwrap());
    t.timeout = Duration::from_millis(200);
    let exporter = Exporter::start(t, &quick(), &[]).unwrap();
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
            Ca::File(file("CA", &ca)),
            Some((file("CERT", &cert), file("KEY", &key))),
            true,
        )
        .unwrap(),
    );
    let exporter = Exporter::start(t, &quick(), &[]).unwrap();
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
        Ca::File(file("CA", &ca)),
        Some((file("CERT", &cert), file("KEY", &ca))),
        false,
    )
    .unwrap_err();
    assert_eq!(e.var, "KEY", "{e}");
    let e = client_config(Ca::File(file("CA", &path("missing.crt"))), None, false).unwrap_err();
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
                                let _ = http2.serve_connection(TokioIo::new(stream), service).await;
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
    let exporter = Exporter::start(t, &quick(), &[]).unwrap();
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
