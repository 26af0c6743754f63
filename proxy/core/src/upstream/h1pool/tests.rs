use std::sync::atomic::{AtomicUsize, Ordering};

use http::HeaderMap;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;
use crate::upstream::{ClientSettings, ReplayCounters, Upstream};

/// A plain HTTP/1.1 upstream on loopback that counts connections opened and closed by the
/// client and records each request line. `/close` is answered and then the connection
/// closed; `/partial` promises 10 bytes and sends 2; `/close-when-told` is answered, and
/// once `close_idle` is set the server closes its side of that (by then idle) connection
/// and waits for the client to close its own; `/then-drop` is answered, and the next
/// request on its connection is read and the connection closed unanswered (an idle
/// connection's keep-alive timeout at the moment a request reached it); `/drop` is read
/// and its connection closed unanswered; `/then-half` is answered, and the next request on
/// its connection gets the start of a response head before the connection closes;
/// everything else gets `ok`, keep-alive.
struct Server {
    url: Uri,
    opened: Arc<AtomicUsize>,
    /// Request lines, in the order they arrived.
    seen: Arc<Mutex<Vec<String>>>,
    closed_by_client: Arc<AtomicUsize>,
    /// One message per connection this server closed itself.
    server_closed: tokio::sync::mpsc::UnboundedReceiver<()>,
    /// One message per connection the client closed (its descriptor is gone).
    client_closed: tokio::sync::mpsc::UnboundedReceiver<()>,
    close_idle: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

async fn server() -> Server {
    server_on(None).await
}

/// [`server`] behind TLS (HTTP/1.1 only), its certificate for `localhost` and the CA to
/// trust it; a connection it closes unanswered gets a `close_notify` first.
async fn tls_server() -> (Server, rustls::pki_types::CertificateDer<'static>) {
    let (acceptor, ca) = crate::testkit::tls_acceptor(&[b"http/1.1"]);
    (server_on(Some(acceptor)).await, ca)
}

async fn server_on(tls: Option<tokio_rustls::TlsAcceptor>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{}", listener.local_addr().unwrap())
        .parse()
        .unwrap();
    let opened = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let closed_by_client = Arc::new(AtomicUsize::new(0));
    let (tx, server_closed) = tokio::sync::mpsc::unbounded_channel();
    let (gone, client_closed) = tokio::sync::mpsc::unbounded_channel();
    let (close_idle, told) = tokio::sync::watch::channel(false);
    let ends = Ends {
        closed_by_client: closed_by_client.clone(),
        server_closed: tx,
        client_closed: gone,
        told,
        seen: seen.clone(),
    };
    let o = opened.clone();
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            o.fetch_add(1, Ordering::SeqCst);
            let (ends, tls) = (ends.clone(), tls.clone());
            tokio::spawn(async move {
                match tls {
                    Some(acceptor) => {
                        if let Ok(stream) = acceptor.accept(tcp).await {
                            serve_conn(stream, ends).await;
                        }
                    }
                    None => serve_conn(tcp, ends).await,
                }
            });
        }
    });
    Server {
        url,
        opened,
        seen,
        closed_by_client,
        server_closed,
        client_closed,
        close_idle,
        task,
    }
}

/// What a connection of [`server`] reports to the test.
#[derive(Clone)]
struct Ends {
    closed_by_client: Arc<AtomicUsize>,
    server_closed: tokio::sync::mpsc::UnboundedSender<()>,
    client_closed: tokio::sync::mpsc::UnboundedSender<()>,
    told: tokio::sync::watch::Receiver<bool>,
    seen: Arc<Mutex<Vec<String>>>,
}

async fn serve_conn<S>(mut tcp: S, mut ends: Ends)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut buf = Vec::new();
    let (mut drop_next, mut half_next) = (false, false);
    loop {
        let mut chunk = [0u8; 1024];
        let n = tcp.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            ends.closed_by_client.fetch_add(1, Ordering::SeqCst);
            let _ = ends.client_closed.send(());
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end + 4);
        let line = head.lines().next().unwrap_or_default().to_owned();
        ends.seen.lock().unwrap().push(line);
        if half_next {
            let _ = tcp.write_all(b"HTTP/1.1 200 OK\r\ncontent-").await;
            return;
        }
        if drop_next || head.starts_with("GET /drop ") {
            // unanswered; over TLS, a close_notify first
            let _ = tcp.shutdown().await;
            return;
        }
        drop_next = head.starts_with("GET /then-drop ");
        half_next = head.starts_with("GET /then-half ");
        if head.starts_with("GET /partial ") {
            let _ = tcp
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nok")
                .await;
            continue;
        }
        let _ = tcp
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .await;
        if head.starts_with("GET /close ") {
            drop(tcp);
            let _ = ends.server_closed.send(());
            return;
        }
        if head.starts_with("GET /close-when-told ") {
            let _ = ends.told.wait_for(|t| *t).await;
            // FIN; the loop then reads until the client closes its end
            let _ = tcp.shutdown().await;
            let _ = ends.server_closed.send(());
        }
    }
}

fn upstream(url: &Uri) -> Upstream {
    counted(url, &ReplayCounters::default())
}

/// An upstream whose replays count in `replays`.
fn counted(url: &Uri, replays: &ReplayCounters) -> Upstream {
    let settings = ClientSettings {
        tls: None,
        server_name: None,
        connect_timeout: Duration::from_secs(5),
        insecure_skip_verify: false,
    };
    Upstream::with_replays(
        "up".into(),
        url.clone(),
        &settings,
        Duration::from_secs(10),
        replays.clone(),
    )
    .unwrap()
}

async fn ok(up: &Upstream, path: &str) {
    let (status, _, body) = up.get(path, "application/json", 1024).await.unwrap();
    assert_eq!((status, &body[..]), (http::StatusCode::OK, &b"ok"[..]));
}

#[tokio::test]
async fn a_connection_serves_request_after_request_and_one_closed_upstream_is_skipped() {
    let mut server = server().await;
    let up = upstream(&server.url);
    for _ in 0..3 {
        ok(&up, "/keep").await;
    }
    assert_eq!(server.opened.load(Ordering::SeqCst), 1);
    assert_eq!(up.http1_idle_connections(), 1);

    // the upstream closes the idle connection: the next request finds out and reconnects
    ok(&up, "/close").await;
    server.server_closed.recv().await.unwrap();
    // after the I/O driver has seen the close
    tokio::task::yield_now().await;
    ok(&up, "/keep").await;
    assert_eq!(server.opened.load(Ordering::SeqCst), 2);
    assert_eq!(up.http1_idle_connections(), 1);
    server.task.abort();
}

#[tokio::test]
async fn a_response_dropped_before_its_end_closes_its_connection() {
    let server = server().await;
    let up = upstream(&server.url);
    let partial = up.open("/partial", HeaderMap::new()).await.unwrap();
    assert_eq!(partial.status(), http::StatusCode::OK);
    drop(partial);
    assert_eq!(up.http1_idle_connections(), 0);
    ok(&up, "/keep").await;
    assert_eq!(server.opened.load(Ordering::SeqCst), 2);
    // the cut-short exchange's connection was closed, not left open
    for _ in 0..1000 {
        if server.closed_by_client.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(server.closed_by_client.load(Ordering::SeqCst), 1);
    server.task.abort();
}

#[tokio::test]
async fn an_idle_connection_its_upstream_closed_is_closed_without_a_request_to_find_it() {
    let mut server = server().await;
    let up = upstream(&server.url);
    ok(&up, "/close-when-told").await;
    assert_eq!(up.http1_idle_connections(), 1);

    // the upstream closes the idle connection (as a server's keep-alive timeout or a
    // restart does); no request comes to find out
    server.close_idle.send_replace(true);
    server.server_closed.recv().await.unwrap();
    // mvproxy closes its end: the descriptor is freed. The bound is far below the idle
    // expiry (IDLE_TIMEOUT, 90 s), the only other thing that would close it.
    let closed = tokio::time::timeout(Duration::from_secs(10), server.client_closed.recv());
    assert_eq!(closed.await, Ok(Some(())));
    assert_eq!(up.http1_idle_connections(), 0);
    assert_eq!(server.closed_by_client.load(Ordering::SeqCst), 1);

    // and the next request opens a new connection, with no failed attempt
    ok(&up, "/keep").await;
    assert_eq!(server.opened.load(Ordering::SeqCst), 2);
    server.task.abort();
}

/// How many times the server saw `line`.
fn seen(server: &Server, line: &str) -> usize {
    server
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|l| *l == line)
        .count()
}

#[tokio::test]
async fn a_get_whose_reused_connection_closes_unanswered_is_answered_on_a_new_one() {
    let server = server().await;
    let replays = ReplayCounters::default();
    let up = counted(&server.url, &replays);
    ok(&up, "/then-drop").await;
    assert_eq!(up.http1_idle_connections(), 1);

    // the idle connection takes the GET, and its upstream reads it and closes: the client
    // gets the answer of a second connection, not an error
    ok(&up, "/keep").await;
    assert_eq!(seen(&server, "GET /keep HTTP/1.1"), 2);
    assert_eq!(server.opened.load(Ordering::SeqCst), 2);
    assert_eq!(up.http1_idle_connections(), 1);
    // counted as one HTTP/1.1 replay (mvproxy_upstream_replays_total)
    assert_eq!((replays.http1.get(), replays.http2.get()), (1, 0));
    server.task.abort();
}

#[tokio::test]
async fn over_tls_a_close_notify_is_no_answer_and_the_get_is_sent_again() {
    let (server, ca) = tls_server().await;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca).unwrap();
    let settings = ClientSettings {
        tls: Some(
            rustls::ClientConfig::builder()
                .with_root_certificates(roots)
                .with_no_client_auth(),
        ),
        server_name: Some("localhost".to_owned()),
        connect_timeout: Duration::from_secs(5),
        insecure_skip_verify: false,
    };
    let up = Upstream::new(
        "up".into(),
        server.url.clone(),
        &settings,
        Duration::from_secs(10),
    )
    .unwrap();
    ok(&up, "/then-drop").await;
    assert_eq!(up.http1_idle_connections(), 1);

    // the upstream reads the GET and closes the connection, TLS first (close_notify):
    // no byte of an answer, so the GET is sent again
    ok(&up, "/keep").await;
    assert_eq!(seen(&server, "GET /keep HTTP/1.1"), 2);
    server.task.abort();
}

#[tokio::test]
async fn a_post_whose_reused_connection_closes_unanswered_is_not_sent_twice() {
    let server = server().await;
    let replays = ReplayCounters::default();
    let up = counted(&server.url, &replays);
    ok(&up, "/then-drop").await;
    assert_eq!(up.http1_idle_connections(), 1);

    let mut req = Request::new(crate::plumbing::full(r#"{"kind":"ConfigMap"}"#));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = Uri::from_static("/api/v1/namespaces/default/configmaps");
    let result = up.request(req).await.map(|r| r.status());
    assert!(
        matches!(result, Err(crate::error::ProxyError::Transport { .. })),
        "the error surfaces: {result:?}"
    );
    assert_eq!(
        seen(
            &server,
            "POST /api/v1/namespaces/default/configmaps HTTP/1.1"
        ),
        1
    );
    assert_eq!(server.opened.load(Ordering::SeqCst), 1);
    assert_eq!(replays.http1.get(), 0, "no replay counted");
    server.task.abort();
}

#[tokio::test]
async fn a_get_whose_new_connection_closes_unanswered_is_not_sent_again() {
    let server = server().await;
    let up = upstream(&server.url);
    let err = up
        .get("/drop", "application/json", 1024)
        .await
        .expect_err("the error surfaces");
    assert!(
        matches!(err, crate::error::ProxyError::Transport { .. }),
        "{err:?}"
    );
    assert_eq!(seen(&server, "GET /drop HTTP/1.1"), 1);
    assert_eq!(server.opened.load(Ordering::SeqCst), 1);
    server.task.abort();
}

#[tokio::test]
async fn a_get_is_sent_again_once_at_most() {
    let server = server().await;
    let up = upstream(&server.url);
    ok(&up, "/then-drop").await;
    // the reused connection closes under it, and so does the new one it is sent again on
    let err = up
        .get("/drop", "application/json", 1024)
        .await
        .expect_err("the second failure surfaces");
    assert!(
        matches!(err, crate::error::ProxyError::Transport { .. }),
        "{err:?}"
    );
    assert_eq!(seen(&server, "GET /drop HTTP/1.1"), 2);
    assert_eq!(server.opened.load(Ordering::SeqCst), 2);
    server.task.abort();
}

#[tokio::test]
async fn a_get_whose_answer_had_begun_is_not_sent_again() {
    let server = server().await;
    let up = upstream(&server.url);
    ok(&up, "/then-half").await;
    // the upstream began to answer on the reused connection, then closed it: it did
    // process the request
    let err = up
        .get("/keep", "application/json", 1024)
        .await
        .expect_err("the error surfaces");
    assert!(
        matches!(err, crate::error::ProxyError::Transport { .. }),
        "{err:?}"
    );
    assert_eq!(seen(&server, "GET /keep HTTP/1.1"), 1);
    assert_eq!(server.opened.load(Ordering::SeqCst), 1);
    server.task.abort();
}

#[test]
fn only_bodiless_idempotent_requests_are_replayable() {
    let req = |method: Method, body: Body| {
        let mut r = Request::new(body);
        *r.method_mut() = method;
        r
    };
    for m in [Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE] {
        assert!(is_replayable(&req(m.clone(), empty())), "{m}");
        assert!(
            !is_replayable(&req(m.clone(), crate::plumbing::full("x"))),
            "{m} with a body"
        );
    }
    for m in [
        Method::POST,
        Method::PUT,
        Method::PATCH,
        Method::DELETE,
        Method::CONNECT,
    ] {
        assert!(!is_replayable(&req(m.clone(), empty())), "{m}");
    }
}
