use super::*;
use crate::plumbing::full;
use http::header::HeaderName;
use hyper_util::rt::TokioExecutor;
use hyper_util::rt::TokioIo;

/// An error with a source, as hyper-util's client and connector errors wrap their causes.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Wrapped(&'static str, #[source] Box<dyn StdError + Send + Sync>);

#[test]
fn a_failed_lookup_is_recognised_by_its_type_anywhere_in_the_chain() {
    let lookup = ResolveError {
        host: "apiserver-b".to_owned(),
        source: std::io::Error::other("failed to lookup address information"),
    };
    let e = Wrapped(
        "client error (Connect)",
        Box::new(Wrapped("dns error", Box::new(lookup))),
    );
    assert_eq!(transport_failure(&e), TransportFailure::NameResolution);
    assert_eq!(
        causes(&e),
        "client error (Connect): dns error: failed to lookup address information"
    );
    // the same words without the type are some other failure
    let words = Wrapped(
        "client error (Connect)",
        Box::new(std::io::Error::other(
            "dns error: failed to lookup address information",
        )),
    );
    assert_eq!(transport_failure(&words), TransportFailure::Other);
}

#[test]
fn hop_by_hop_headers_are_dropped_and_end_to_end_ones_kept() {
    let mut h = HeaderMap::new();
    h.insert(
        header::CONNECTION,
        HeaderValue::from_static("keep-alive, x-secret-hop"),
    );
    h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
    h.insert("x-secret-hop", HeaderValue::from_static("1"));
    h.insert(header::TE, HeaderValue::from_static("trailers"));
    h.insert(
        header::TRANSFER_ENCODING,
        HeaderValue::from_static("chunked"),
    );
    h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer t"));
    h.insert("impersonate-user", HeaderValue::from_static("alice"));
    h.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
    strip_hop_by_hop(&mut h, false);
    let mut left: Vec<_> = h.keys().map(|k| k.as_str()).collect();
    left.sort();
    assert_eq!(left, ["accept", "authorization", "impersonate-user"]);
}

#[test]
fn each_hop_by_hop_header_is_dropped_even_alone() {
    for name in [
        "connection",
        "upgrade",
        "te",
        "trailer",
        "transfer-encoding",
        "keep-alive",
        "proxy-connection",
    ] {
        let mut h = HeaderMap::new();
        h.insert(HeaderName::from_static(name), HeaderValue::from_static("x"));
        h.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        strip_hop_by_hop(&mut h, false);
        assert_eq!(h.len(), 1, "{name}");
        assert!(h.contains_key(header::ACCEPT));
    }
}

#[test]
fn upgrade_keeps_connection_upgrade() {
    let mut h = HeaderMap::new();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
    assert!(is_upgrade(&h));
    strip_hop_by_hop(&mut h, true);
    assert_eq!(h[header::CONNECTION], "upgrade");
    assert_eq!(h[header::UPGRADE], "SPDY/3.1");
    let mut plain = HeaderMap::new();
    plain.insert(header::UPGRADE, HeaderValue::from_static("h2c"));
    assert!(
        !is_upgrade(&plain),
        "Upgrade without Connection: upgrade is not an upgrade"
    );
}

/// A TLS server on loopback offering `alpn`, counting its connections and recording each
/// request's HTTP version: `/watch` answers headers and then holds the body open, `/echo`
/// reads the request body whole and answers with it, `/early` answers without reading it, an
/// upgrade request gets `101`.
struct TlsServer {
    url: Uri,
    ca: rustls::pki_types::CertificateDer<'static>,
    connections: Arc<std::sync::atomic::AtomicUsize>,
    versions: Arc<std::sync::Mutex<Vec<http::Version>>>,
    task: tokio::task::JoinHandle<()>,
}

async fn tls_server(alpn: &[&[u8]]) -> TlsServer {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (acceptor, ca) = crate::testkit::tls_acceptor(alpn);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let versions = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (c, v) = (connections.clone(), versions.clone());
    // the senders of the watch bodies: kept, so those bodies never end
    let held = Arc::new(std::sync::Mutex::new(Vec::new()));
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            let (acceptor, v, held) = (acceptor.clone(), v.clone(), held.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service =
                    hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                        v.lock().unwrap().push(req.version());
                        let held = held.clone();
                        async move {
                            let mut resp = if is_upgrade(req.headers()) {
                                let mut r = Response::new(empty());
                                *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
                                r.headers_mut().insert(
                                    header::CONNECTION,
                                    HeaderValue::from_static("upgrade"),
                                );
                                r.headers_mut()
                                    .insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
                                r
                            } else if req.uri().path() == "/echo" {
                                match req.into_body().collect().await {
                                    Ok(body) => Response::new(full(body.to_bytes())),
                                    Err(_) => return Err("the request body failed"),
                                }
                            } else if req.uri().path() == "/early" {
                                Response::new(full("early"))
                            } else if req.uri().path() == "/watch" {
                                // a body that never ends, as a watch's
                                let (sender, body) =
                                    http_body_util::channel::Channel::<Bytes, BoxError>::new(1);
                                held.lock().unwrap().push(sender);
                                Response::new(body.boxed())
                            } else {
                                Response::new(full("ok"))
                            };
                            resp.headers_mut()
                                .insert("x-test", HeaderValue::from_static("1"));
                            Ok::<_, &str>(resp)
                        }
                    });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection_with_upgrades(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    TlsServer {
        url: format!("https://localhost:{port}").parse().unwrap(),
        ca,
        connections,
        versions,
        task,
    }
}

fn upstream_for(server: &TlsServer) -> Upstream {
    crate::testkit::tls_upstream(&server.url, server.ca.clone())
}

/// `n` watches, one after the other, all left open.
async fn open_watches(up: &Upstream, n: usize) -> Vec<Response<UpstreamBody>> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(
            up.open("/watch", HeaderMap::new())
                .await
                .expect("watch opened"),
        );
    }
    out
}

#[tokio::test]
async fn watches_share_http2_connections_and_upgrades_stay_on_http1() {
    use std::sync::atomic::Ordering;
    let server = tls_server(&[b"h2", b"http/1.1"]).await;
    let up = upstream_for(&server);
    let n = crate::upstream::h2pool::MAX_STREAMS + 50;
    let watches = tokio::time::timeout(Duration::from_secs(30), async {
        let mut handles = Vec::new();
        for _ in 0..n {
            let up = up.clone();
            handles.push(tokio::spawn(async move {
                up.open("/watch", HeaderMap::new()).await
            }));
        }
        let mut out = Vec::new();
        for h in handles {
            out.push(h.await.unwrap().expect("watch opened"));
        }
        out
    })
    .await
    .expect("every watch got its headers: none waits behind a full connection");
    assert!(watches.iter().all(|r| r.status() == StatusCode::OK));
    assert_eq!(
        server.connections.load(Ordering::SeqCst),
        2,
        "{n} watches on {} streams per connection",
        crate::upstream::h2pool::MAX_STREAMS
    );
    assert_eq!(up.http2_connections().await, 2);
    assert!(
        server
            .versions
            .lock()
            .unwrap()
            .iter()
            .all(|v| *v == http::Version::HTTP_2)
    );

    // a watch that ends frees its place: the next request needs no new connection
    drop(watches);
    let r = up.get("/", "application/json", 1024).await.unwrap();
    assert_eq!(r.2, "ok");
    assert_eq!(server.connections.load(Ordering::SeqCst), 2);

    // an upgrade (exec, port-forward) goes over HTTP/1.1 on a connection of its own
    let mut req = Request::new(empty());
    *req.uri_mut() = "/api/v1/namespaces/default/pods/p/exec".parse().unwrap();
    req.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    req.headers_mut()
        .insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
    let resp = up.forward(req, false).await.unwrap();
    assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS);
    assert_eq!(server.connections.load(Ordering::SeqCst), 3);
    assert_eq!(
        server.versions.lock().unwrap().last(),
        Some(&http::Version::HTTP_11)
    );
    server.task.abort();
}

#[tokio::test]
async fn an_upstream_without_http2_gets_http1() {
    use std::sync::atomic::Ordering;
    let server = tls_server(&[b"http/1.1"]).await;
    let up = upstream_for(&server);
    let first = up.get("/", "application/json", 1024).await.unwrap();
    assert_eq!(first.2, "ok");
    let watches = open_watches(&up, 3).await;
    assert!(watches.iter().all(|r| r.status() == StatusCode::OK));
    assert!(
        server
            .versions
            .lock()
            .unwrap()
            .iter()
            .all(|v| *v == http::Version::HTTP_11)
    );
    assert_eq!(up.http2_connections().await, 0);
    // one connection found out the upstream has no h2, then one per watch in flight
    assert!(server.connections.load(Ordering::SeqCst) >= 4);
    server.task.abort();
}

/// A request body sent as `chunks` and never ended while `hold` is set: a client still
/// uploading.
fn streamed(chunks: Vec<Bytes>, hold: bool) -> Request<Body> {
    let (mut tx, body) = http_body_util::channel::Channel::<Bytes, BoxError>::new(1);
    tokio::spawn(async move {
        for chunk in chunks {
            if tx.send_data(chunk).await.is_err() {
                return;
            }
        }
        if hold {
            std::future::pending::<()>().await;
        }
    });
    let mut req = Request::new(body.boxed());
    *req.method_mut() = http::Method::PUT;
    req
}

#[tokio::test]
async fn a_body_larger_than_every_flow_control_window_crosses_http2_both_ways() {
    let server = tls_server(&[b"h2"]).await;
    let up = upstream_for(&server);
    // 3 MiB: over the server's windows for the request and the client's 2 MiB stream window
    // for the response, so neither crosses unless each side gives its window back as it reads.
    let sent: Vec<u8> = (0..3 * 1024 * 1024_u32).map(|i| (i % 251) as u8).collect();
    let mut req = streamed(
        sent.chunks(100_000).map(Bytes::copy_from_slice).collect(),
        false,
    );
    *req.uri_mut() = "/echo".parse().unwrap();
    let echoed = tokio::time::timeout(Duration::from_secs(30), async {
        let resp = up.forward(req, false).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        resp.into_body().collect().await.unwrap().to_bytes()
    })
    .await
    .expect("the body crossed within 30 s");
    assert_eq!(echoed.len(), sent.len());
    assert!(echoed == sent, "the echoed body differs");
    assert_eq!(*server.versions.lock().unwrap(), [http::Version::HTTP_2]);
    server.task.abort();
}

#[tokio::test]
async fn an_answer_that_comes_before_the_request_body_ends_is_not_held_for_it() {
    let server = tls_server(&[b"h2"]).await;
    let up = upstream_for(&server);
    let mut req = streamed(vec![Bytes::from_static(b"partial")], true);
    *req.uri_mut() = "/early".parse().unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(10), up.forward(req, false))
        .await
        .expect("answered while the body was still open")
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"early");
    assert_eq!(*server.versions.lock().unwrap(), [http::Version::HTTP_2]);
    server.task.abort();
}
