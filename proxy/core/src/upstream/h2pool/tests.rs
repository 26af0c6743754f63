use std::sync::Mutex;

use http::{HeaderMap, Method, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;

use super::*;
use crate::error::{ProxyError, TransportFailure};
use crate::plumbing::full;
use crate::upstream::Upstream;

// Frame types, flags and error codes of RFC 9113 (§6, §7).
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const NO_ERROR: u32 = 0x0;
const INTERNAL_ERROR: u32 = 0x2;
const REFUSED_STREAM: u32 = 0x7;
const CANCEL: u32 = 0x8;
/// HPACK for `:status: 200` (static table index 8).
const STATUS_200: &[u8] = &[0x88];

/// What a connection of [`server`] does with a request (a `HEADERS` frame).
#[derive(Clone, Copy, Debug)]
enum Act {
    /// `200`, body `ok`.
    Answer,
    /// `200` at once, the body (`ok`) held until the test releases it (a watch).
    Hold,
    /// Nothing: the request waits.
    Silent,
    /// `GOAWAY` naming the stream before this one as the last processed: a server that
    /// began to shut down as the request crossed it. The connection stays open until the
    /// client closes it.
    GoAwayBelow,
    /// The same `GOAWAY`, then the connection closed (TLS `close_notify` first).
    GoAwayBelowThenClose,
    /// `RST_STREAM` with this error code.
    Reset(u32),
    /// `200`, body `ok`, then a `GOAWAY` naming this stream as the last (a graceful
    /// shutdown) and a `PING`, whose `ACK` (written by the client after it has read the
    /// `GOAWAY`) is reported on `pinged`.
    AnswerThenGoAway,
    /// Nothing, and nothing more on this connection: it is neither read nor written again,
    /// its `PING`s unanswered (a stopped process, a dropped address), though it stays open.
    Freeze,
    /// `200` at once, its body never sent (a watch without events), and then [`Act::Freeze`].
    HeadThenFreeze,
}

/// An HTTP/2 upstream over TLS on loopback, frames written by hand so that it can say
/// what a real server says when it shuts down. Connection `i` (in the order opened) does
/// `script[i][n]` with its `n`th request, and answers anything past the script.
struct Server {
    url: Uri,
    ca: rustls::pki_types::CertificateDer<'static>,
    /// Per connection, the stream IDs of the requests it got.
    streams: Arc<Mutex<Vec<Vec<u32>>>>,
    /// One message (connection, stream ID) per request, as it arrives.
    arrived: tokio::sync::mpsc::UnboundedReceiver<(usize, u32)>,
    /// One message (connection) per `PING` acknowledged.
    pinged: tokio::sync::mpsc::UnboundedReceiver<usize>,
    /// One message (connection) per `PING` the client sent.
    pings: tokio::sync::mpsc::UnboundedReceiver<usize>,
    release: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

type Writer = Arc<tokio::sync::Mutex<WriteHalf<TlsStream<TcpStream>>>>;

async fn server(script: Vec<Vec<Act>>) -> Server {
    let (acceptor, ca) = crate::testkit::tls_acceptor(&[b"h2"]);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let streams = Arc::new(Mutex::new(Vec::new()));
    let (arrive, arrived) = tokio::sync::mpsc::unbounded_channel();
    let (release, released) = tokio::sync::watch::channel(false);
    let (ack, pinged) = tokio::sync::mpsc::unbounded_channel();
    let (ping, pings) = tokio::sync::mpsc::unbounded_channel();
    let s = streams.clone();
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let conn = {
                let mut s = s.lock().unwrap();
                s.push(Vec::new());
                s.len() - 1
            };
            let acts = script.get(conn).cloned().unwrap_or_default();
            let (acceptor, s) = (acceptor.clone(), s.clone());
            let events = Events {
                arrive: arrive.clone(),
                ack: ack.clone(),
                ping: ping.clone(),
                released: released.clone(),
            };
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    serve_conn(tls, conn, acts, s, events).await;
                }
            });
        }
    });
    Server {
        url: format!("https://localhost:{port}").parse().unwrap(),
        ca,
        streams,
        arrived,
        pinged,
        pings,
        release,
        task,
    }
}

/// What a connection of [`server`] reports to the test, and hears from it.
struct Events {
    arrive: tokio::sync::mpsc::UnboundedSender<(usize, u32)>,
    ack: tokio::sync::mpsc::UnboundedSender<usize>,
    ping: tokio::sync::mpsc::UnboundedSender<usize>,
    released: tokio::sync::watch::Receiver<bool>,
}

fn frame(kind: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut f = Vec::with_capacity(9 + payload.len());
    f.extend_from_slice(&len[1..]);
    f.extend_from_slice(&[kind, flags]);
    f.extend_from_slice(&id.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn go_away(last: u32, code: u32) -> Vec<u8> {
    let mut payload = last.to_be_bytes().to_vec();
    payload.extend_from_slice(&code.to_be_bytes());
    frame(GOAWAY, 0, 0, &payload)
}

async fn write(w: &Writer, bytes: &[u8]) {
    let mut w = w.lock().await;
    let _ = w.write_all(bytes).await;
    let _ = w.flush().await;
}

async fn serve_conn(
    tls: TlsStream<TcpStream>,
    conn: usize,
    acts: Vec<Act>,
    streams: Arc<Mutex<Vec<Vec<u32>>>>,
    events: Events,
) {
    let (mut rd, wr) = tokio::io::split(tls);
    let wr: Writer = Arc::new(tokio::sync::Mutex::new(wr));
    let mut preface = [0u8; 24];
    if rd.read_exact(&mut preface).await.is_err() {
        return;
    }
    write(&wr, &frame(SETTINGS, 0, 0, &[])).await;
    let mut n = 0;
    loop {
        let mut head = [0u8; 9];
        if rd.read_exact(&mut head).await.is_err() {
            return;
        }
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let (kind, flags) = (head[3], head[4]);
        let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; len];
        if rd.read_exact(&mut payload).await.is_err() {
            return;
        }
        match kind {
            SETTINGS if flags & ACK == 0 => write(&wr, &frame(SETTINGS, ACK, 0, &[])).await,
            PING if flags & ACK == 0 => {
                let _ = events.ping.send(conn);
                write(&wr, &frame(PING, ACK, 0, &payload)).await;
            }
            PING => {
                let _ = events.ack.send(conn);
            }
            HEADERS => {
                streams.lock().unwrap()[conn].push(id);
                let _ = events.arrive.send((conn, id));
                let act = acts.get(n).copied().unwrap_or(Act::Answer);
                n += 1;
                match act {
                    Act::Answer => {
                        let mut answer = frame(HEADERS, END_HEADERS, id, STATUS_200);
                        answer.extend(frame(DATA, END_STREAM, id, b"ok"));
                        write(&wr, &answer).await;
                    }
                    Act::Hold => {
                        write(&wr, &frame(HEADERS, END_HEADERS, id, STATUS_200)).await;
                        let (wr, mut released) = (wr.clone(), events.released.clone());
                        tokio::spawn(async move {
                            let _ = released.wait_for(|r| *r).await;
                            write(&wr, &frame(DATA, END_STREAM, id, b"ok")).await;
                        });
                    }
                    Act::Silent => {}
                    Act::Freeze => {
                        // held open, never read again, until the test ends
                        let _held = (rd, wr);
                        std::future::pending::<()>().await;
                        return;
                    }
                    Act::HeadThenFreeze => {
                        write(&wr, &frame(HEADERS, END_HEADERS, id, STATUS_200)).await;
                        let _held = (rd, wr);
                        std::future::pending::<()>().await;
                        return;
                    }
                    Act::GoAwayBelow => {
                        write(&wr, &go_away(id.saturating_sub(2), NO_ERROR)).await;
                    }
                    Act::GoAwayBelowThenClose => {
                        write(&wr, &go_away(id.saturating_sub(2), NO_ERROR)).await;
                        let _ = wr.lock().await.shutdown().await;
                        return;
                    }
                    Act::Reset(code) => {
                        write(&wr, &frame(RST_STREAM, 0, id, &code.to_be_bytes())).await;
                    }
                    Act::AnswerThenGoAway => {
                        let mut answer = frame(HEADERS, END_HEADERS, id, STATUS_200);
                        answer.extend(frame(DATA, END_STREAM, id, b"ok"));
                        answer.extend(go_away(id, NO_ERROR));
                        answer.extend(frame(PING, 0, 0, b"goneaway"));
                        write(&wr, &answer).await;
                    }
                }
            }
            _ => {}
        }
    }
}

/// A server that accepts TCP connections and never answers (not even TLS): a dial to it
/// hangs in the handshake until it is dropped; `accepted` counts the dials.
async fn silent() -> (http::Uri, tokio::sync::mpsc::UnboundedReceiver<TcpStream>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            // kept open, unanswered, for as long as the test holds the receiver
            if tx.send(tcp).is_err() {
                return;
            }
        }
    });
    (format!("https://localhost:{port}").parse().unwrap(), rx)
}

#[tokio::test]
async fn a_dial_that_hangs_holds_no_lock_and_its_waiters_share_its_failure() {
    let (url, mut accepted) = silent().await;
    let (_, ca) = crate::testkit::tls_acceptor(&[b"h2"]);
    let up = crate::testkit::tls_upstream(&url, ca);
    let pool = up.h2_pool().unwrap().clone();
    let (p, u) = (pool.clone(), url.clone());
    let dialer = tokio::spawn(async move { p.checkout(&u).await.map(|s| s.is_some()) });
    let _held = accepted.recv().await.unwrap();
    // The dial hangs in the TLS handshake: the pool's state is readable at once, without
    // waiting for it (one poll).
    assert!(
        tokio::time::timeout(std::time::Duration::ZERO, pool.connections())
            .await
            .is_ok(),
        "the pool's lock is held across a dial"
    );
    // A second request that needs a connection waits for that dial, dialing nothing itself.
    let (p, u) = (pool.clone(), url.clone());
    let waiter = tokio::spawn(async move { p.checkout(&u).await.map(|s| s.is_some()) });
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    assert!(accepted.try_recv().is_err(), "one dial at a time");
    // The dial fails (its server closes the connection): both are told, neither dials again.
    drop(_held);
    let first = dialer.await.unwrap();
    let second = waiter.await.unwrap();
    assert!(first.is_err(), "{first:?}");
    let e = second.unwrap_err().to_string();
    assert!(e.contains("connecting to the upstream failed"), "{e}");
    assert!(
        accepted.try_recv().is_err(),
        "the waiter shared the failure"
    );
}

fn upstream(server: &Server) -> Upstream {
    crate::testkit::tls_upstream(&server.url, server.ca.clone())
}

async fn ok(up: &Upstream, path: &str) {
    let (status, _, body) = up.get(path, "application/json", 1024).await.unwrap();
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"ok"[..]));
}

/// The failure of a GET, which must be one: a transport failure whose cause names `what`.
async fn fails(up: &Upstream, path: &str, what: &str) {
    let err = up
        .get(path, "application/json", 1024)
        .await
        .expect_err("the error surfaces");
    assert_transport(&err, what);
}

/// `err` is what the client gets for an upstream that failed the request: `503`, a
/// transport failure, its cause naming `what`.
fn assert_transport(err: &ProxyError, what: &str) {
    assert!(
        matches!(
            err,
            ProxyError::Transport { failure: TransportFailure::Other, cause, .. }
                if cause.contains(what)
        ),
        "{err:?}"
    );
    assert_eq!(err.status(), StatusCode::SERVICE_UNAVAILABLE);
}

fn streams(server: &Server) -> Vec<Vec<u32>> {
    server.streams.lock().unwrap().clone()
}

#[tokio::test]
async fn a_get_above_the_last_stream_of_a_goaway_is_answered_on_a_new_connection() {
    let server = server(vec![
        vec![Act::Answer, Act::GoAwayBelow],
        vec![Act::Answer, Act::Answer],
    ])
    .await;
    let up = upstream(&server);
    ok(&up, "/api/v1/pods").await;
    // the upstream begins to shut down as the second GET reaches it: a GOAWAY whose last
    // stream is the first GET's. The client gets the answer of a new connection.
    ok(&up, "/api/v1/pods").await;
    // and the next request goes there too: the first connection is no longer used
    ok(&up, "/api/v1/pods").await;
    assert_eq!(streams(&server), [vec![1, 3], vec![1, 3]]);
    assert_eq!(up.http2_connections().await, 1);
    server.task.abort();
}

#[tokio::test]
async fn a_refused_get_is_answered_on_a_new_connection_and_the_old_ones_streams_go_on() {
    let server = server(vec![
        vec![Act::Hold, Act::Reset(REFUSED_STREAM)],
        vec![Act::Answer, Act::Answer],
    ])
    .await;
    let replays = crate::upstream::ReplayCounters::default();
    let up = crate::testkit::tls_upstream_counted(&server.url, server.ca.clone(), replays.clone());
    let watch = up
        .open("/api/v1/pods?watch=1", HeaderMap::new())
        .await
        .unwrap();
    assert_eq!(watch.status(), StatusCode::OK);
    // the GET's stream is refused: it goes to a new connection
    ok(&up, "/api/v1/pods").await;
    ok(&up, "/api/v1/pods").await;
    assert_eq!(streams(&server), [vec![1, 3], vec![1, 3]]);
    // counted as one HTTP/2 replay (mvproxy_upstream_replays_total)
    assert_eq!((replays.http1.get(), replays.http2.get()), (0, 1));
    // the watch on the connection taken out of the pool still gets its events
    server.release.send_replace(true);
    let body = up.collect("/watch", watch.into_body(), 1024).await.unwrap();
    assert_eq!(&body[..], b"ok");
    server.task.abort();
}

#[tokio::test]
async fn a_refused_request_with_a_body_is_not_sent_again() {
    let server = server(vec![
        vec![Act::Reset(REFUSED_STREAM)],
        vec![Act::Answer, Act::Reset(REFUSED_STREAM)],
    ])
    .await;
    let up = upstream(&server);
    // a GET, refused on the first connection, is answered on a second
    ok(&up, "/api/v1/pods").await;
    // a POST refused on the second is not sent again: its body is gone
    let mut req = Request::new(full(r#"{"kind":"ConfigMap"}"#));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = Uri::from_static("/api/v1/namespaces/default/configmaps");
    let err = up
        .request(req)
        .await
        .map(|r| r.status())
        .expect_err("the error surfaces");
    assert_transport(&err, "refused stream");
    assert_eq!(streams(&server), [vec![1], vec![1, 3]]);
    server.task.abort();
}

#[tokio::test]
async fn a_request_is_sent_again_once_at_most() {
    let server = server(vec![
        vec![Act::GoAwayBelow],
        vec![Act::Reset(REFUSED_STREAM)],
    ])
    .await;
    let up = upstream(&server);
    // the first connection goes away under the GET, the second refuses it: the second
    // failure reaches the client, and no third connection is opened
    let err = up
        .get("/api/v1/pods", "application/json", 1024)
        .await
        .expect_err("the error surfaces");
    assert_eq!(streams(&server), [vec![1], vec![1]]);
    // the Status a refusal got before there was a replay
    let resp = err.to_response();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(resp.headers()[http::header::RETRY_AFTER], "1");
    let status: serde_json::Value = serde_json::from_slice(resp.body()).unwrap();
    assert_eq!(status["reason"], "ServiceUnavailable");
    assert_eq!(
        status["message"],
        "up could not be reached: stream error received: refused stream before processing any application logic"
    );
    server.task.abort();
}

#[tokio::test]
async fn a_stream_reset_for_another_reason_is_not_sent_again() {
    let server = server(vec![
        vec![
            Act::Reset(INTERNAL_ERROR),
            Act::Reset(CANCEL),
            Act::Reset(REFUSED_STREAM),
        ],
        vec![Act::Answer],
    ])
    .await;
    let up = upstream(&server);
    // the server's own answers: it may have processed the request
    fails(&up, "/api/v1/pods", "internal error").await;
    fails(&up, "/api/v1/pods", "stream no longer needed").await;
    assert_eq!(streams(&server), [vec![1, 3]]);
    // only the refusal is sent again (on the same connection it would be refused again)
    ok(&up, "/api/v1/pods").await;
    assert_eq!(streams(&server), [vec![1, 3, 5], vec![1]]);
    server.task.abort();
}

#[tokio::test]
async fn a_request_a_goaway_covers_is_not_sent_again_and_one_above_it_is() {
    let mut server = server(vec![
        vec![Act::Silent, Act::GoAwayBelowThenClose],
        vec![Act::Answer],
    ])
    .await;
    let up = upstream(&server);
    let covered = tokio::spawn({
        let up = up.clone();
        async move { up.get("/api/v1/pods", "application/json", 1024).await }
    });
    assert_eq!(server.arrived.recv().await, Some((0, 1)));
    // the second request's stream is above the GOAWAY's last; the first's is not, and the
    // server closes the connection without answering it: it may have processed it
    ok(&up, "/api/v1/pods").await;
    let err = covered.await.unwrap().expect_err("the error surfaces");
    assert_transport(&err, "broken pipe");
    assert_eq!(streams(&server), [vec![1, 3], vec![1]]);
    server.task.abort();
}

#[tokio::test]
async fn a_request_its_pooled_connection_hands_back_unsent_goes_to_another_unreplayed() {
    let mut server = server(vec![
        vec![Act::AnswerThenGoAway],
        vec![Act::Reset(REFUSED_STREAM)],
        vec![Act::Answer],
    ])
    .await;
    let up = upstream(&server);
    let pool = up.h2_pool().unwrap();
    // two requests take their streams on one connection; the first is answered, and the
    // upstream then shuts down gracefully: the connection closes before the second is sent
    let first = pool.checkout(&server.url).await.unwrap().unwrap();
    let second = pool.checkout(&server.url).await.unwrap().unwrap();
    let get = || {
        let mut req = Request::new(empty());
        *req.uri_mut() = format!("{}api/v1/pods", server.url).parse().unwrap();
        req
    };
    let resp = pool.send(&server.url, first, get()).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    // the client read the GOAWAY (it acknowledged the PING after it) ...
    assert_eq!(server.pinged.recv().await, Some(0));
    // ... and its connection closes
    for _ in 0..1000 {
        if pool.connections().await == 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(pool.connections().await, 0);
    // the second cannot be sent on it, and is handed back: it goes to a new connection, and when that
    // refuses it, the replay it still has goes to a third
    let resp = pool.send(&server.url, second, get()).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(streams(&server), [vec![1], vec![1], vec![1]]);
    server.task.abort();
}

#[tokio::test]
async fn a_connection_whose_ping_goes_unanswered_fails_its_request_without_waiting_for_the_timeout()
{
    let server = server(vec![vec![Act::Answer, Act::Freeze], vec![Act::Answer]]).await;
    let up = upstream(&server);
    ok(&up, "/api/v1/pods").await;
    // The server stops as the second GET reaches it. The response-header timeout (10 s) is not
    // what ends it: the unanswered PING is, and says so.
    fails(&up, "/api/v1/pods", "keep-alive timed out").await;
    // The frozen connection is given up: the next request is answered on a new one.
    ok(&up, "/api/v1/pods").await;
    assert_eq!(streams(&server), [vec![1, 3], vec![1]]);
    server.task.abort();
}

#[tokio::test]
async fn a_response_that_waits_on_a_server_answering_pings_is_not_cut_off() {
    let mut server = server(vec![vec![Act::Hold]]).await;
    let up = upstream(&server);
    let resp = up
        .get_response("/api/v1/pods?watch=true", "application/json")
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    // Nothing arrives on the body for several PING rounds (a watch without events); each PING
    // is answered, so the connection is kept.
    for _ in 0..3 {
        assert_eq!(server.pings.recv().await, Some(0));
    }
    server.release.send_replace(true);
    let body = up.collect("/api/v1/pods", resp.into_body(), 1024).await;
    assert_eq!(body.unwrap(), &b"ok"[..]);
    assert_eq!(up.http2_connections().await, 1);
    server.task.abort();
}

#[tokio::test]
async fn a_dial_whose_tls_handshake_hangs_fails_within_the_connect_timeout() {
    let (url, _accepted) = silent().await;
    let (_, ca) = crate::testkit::tls_acceptor(&[b"h2"]);
    let up = crate::testkit::tls_upstream(&url, ca);
    // The server completes TCP and never answers the TLS handshake (a stopped process): the
    // connect timeout (5 s) ends the dial, not the response-header timeout (10 s).
    fails(&up, "/api/v1/pods", "no connection within 5s").await;
}

#[tokio::test]
async fn a_connection_with_only_a_watch_on_it_whose_ping_goes_unanswered_is_reported() {
    let server = server(vec![vec![Act::HeadThenFreeze]]).await;
    let up = upstream(&server);
    let (tx, mut hung) = tokio::sync::mpsc::unbounded_channel();
    up.on_connection_hung(move |cause| {
        let _ = tx.send(cause);
    });
    // The watch's head arrived; then the server stops. No request waits for its head, so
    // none fails: the pool's owner is told all the same, and the watch ends.
    let resp = up
        .get_response("/api/v1/pods?watch=true", "application/json")
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let cause = hung.recv().await.unwrap();
    assert!(cause.contains("keep-alive timed out"), "{cause}");
    let body = up.collect("/api/v1/pods", resp.into_body(), 1024).await;
    assert!(body.is_err(), "{body:?}");
    server.task.abort();
}
