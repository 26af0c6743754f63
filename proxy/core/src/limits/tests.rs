use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body::Body as HttpBody;
use http_body_util::BodyExt;

use super::*;
use crate::error::ProxyError;
use http_body_util::channel::Channel;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

fn upstream_timeout() -> Result<(), ProxyError> {
    Err(ProxyError::Timeout {
        upstream: crate::plumbing::ServerName::from("apiserver-a"),
        seconds: 60,
        written: true,
    })
}

fn limited_post(
    body: Channel<Bytes, crate::plumbing::BoxError>,
) -> (
    LimitedBody<Channel<Bytes, crate::plumbing::BoxError>>,
    BodyLimit,
) {
    let info = crate::classify::classify(
        &http::Method::POST,
        "/api/v1/namespaces/default/configmaps",
        None,
    );
    let req = Request::post("/api/v1/namespaces/default/configmaps")
        .body(body)
        .unwrap();
    let (req, limit) = limit_body(req, &info, 1 << 20).unwrap();
    (req.into_body(), limit)
}

#[tokio::test]
async fn a_timeout_while_the_body_waits_on_the_client_is_the_clients_400() {
    // part of the body came, then the client went quiet: the body waits on the client
    let (mut tx, rx) = Channel::new(4);
    let (mut body, limit) = limited_post(rx);
    tx.send_data(Bytes::from_static(b"{\"metadata\":"))
        .await
        .unwrap();
    let first = body.frame().await.unwrap().unwrap();
    assert_eq!(first.into_data().unwrap(), &b"{\"metadata\":"[..]);
    let waited = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut body).poll_frame(cx)));
    assert!(
        waited.await.is_pending(),
        "nothing more from the client yet"
    );
    match limit.explain(upstream_timeout()) {
        Err(ProxyError::ClientBody { cause }) => {
            assert!(cause.contains("had not all arrived after 60s"), "{cause}")
        }
        other => panic!("not the client's 400: {other:?}"),
    }
    drop(tx);
}

#[tokio::test]
async fn a_timeout_after_the_whole_body_or_while_the_upstream_reads_is_the_upstreams() {
    // the whole body arrived: the upstream had all it needed to answer
    let (mut tx, rx) = Channel::new(4);
    let (mut body, limit) = limited_post(rx);
    tx.send_data(Bytes::from_static(b"{}")).await.unwrap();
    drop(tx);
    assert!(body.frame().await.unwrap().is_ok());
    assert!(body.frame().await.is_none(), "the body ended");
    assert_eq!(limit.explain(upstream_timeout()), upstream_timeout());

    // the body was never read (the upstream took none of it, or needed none yet)
    let (tx, rx) = Channel::new(4);
    let (_body, limit) = limited_post(rx);
    assert_eq!(limit.explain(upstream_timeout()), upstream_timeout());
    drop(tx);

    // the last read got bytes, and the upstream stopped taking more
    let (mut tx, rx) = Channel::new(4);
    let (mut body, limit) = limited_post(rx);
    tx.send_data(Bytes::from_static(b"{")).await.unwrap();
    assert!(body.frame().await.unwrap().is_ok());
    assert_eq!(limit.explain(upstream_timeout()), upstream_timeout());
    drop(tx);
}

#[tokio::test]
async fn a_silent_connection_times_out_and_a_talking_one_does_not() {
    let timeout = Duration::from_millis(50);
    let bound = Duration::from_secs(10);

    // nothing arrives: the read fails once the timeout passes
    let (client, server) = tokio::io::duplex(1024);
    let mut silent = FirstBytesDeadline::new(server, timeout);
    let mut buf = [0u8; 64];
    let e = tokio::time::timeout(bound, silent.read(&mut buf))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    drop(client);

    // a few bytes are not enough to tell the protocol: still bounded
    let (mut client, server) = tokio::io::duplex(1024);
    let mut slow = FirstBytesDeadline::new(server, timeout);
    client.write_all(b"GET").await.unwrap();
    assert_eq!(slow.read(&mut buf).await.unwrap(), 3);
    let e = tokio::time::timeout(bound, slow.read(&mut buf))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);

    // once the first bytes are in, silence is the protocol's business (a watch, an idle
    // HTTP/2 connection): reads wait, and end normally at EOF
    let (mut client, server) = tokio::io::duplex(1024);
    let mut talking = FirstBytesDeadline::new(server, timeout);
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(talking.read(&mut buf).await.unwrap(), 27);
    let waited = tokio::time::timeout(timeout * 4, talking.read(&mut buf)).await;
    assert!(waited.is_err(), "still waiting, no error: {waited:?}");
    drop(client);
    assert_eq!(talking.read(&mut buf).await.unwrap(), 0);
}

/// `detect`, then the connection with its first bytes given back, as the listener does.
async fn detected(
    server: tokio::io::DuplexStream,
    drain: &CancellationToken,
) -> std::io::Result<(
    Protocol,
    Detected<FirstBytesDeadline<tokio::io::DuplexStream>>,
)> {
    let mut io = FirstBytesDeadline::new(server, HEADER_READ_TIMEOUT);
    let first = detect(&mut io, drain).await?;
    Ok((first.protocol, Detected::new(first, io)))
}

const H2_START: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

#[tokio::test]
async fn a_request_head_sent_at_once_reaches_hyper_in_one_read_after_detection() {
    // hyper-util's detection handed back its 24 bytes alone, and hyper grew its 8 KiB read
    // buffer to 16 KiB for the rest, for the connection's life
    let head = b"GET /apis/apps/v1/namespaces/default/deployments?watch=true HTTP/1.1\r\nHost: mvproxy\r\n\r\n";
    let (mut client, server) = tokio::io::duplex(1024);
    client.write_all(head).await.unwrap();
    let (protocol, mut io) = detected(server, &CancellationToken::new()).await.unwrap();
    assert_eq!(protocol, Protocol::Http1);
    let mut buf = [0u8; 8192];
    assert_eq!(io.read(&mut buf).await.unwrap(), head.len());
    assert_eq!(&buf[..head.len()], head);

    // what comes later is read as it comes, and the end of the stream is one
    client.write_all(b"more").await.unwrap();
    assert_eq!(io.read(&mut buf).await.unwrap(), 4);
    drop(client);
    assert_eq!(io.read(&mut buf).await.unwrap(), 0);
}

#[tokio::test]
async fn http2_is_told_by_its_preface_even_in_pieces_and_the_preface_is_read_again() {
    let (mut client, server) = tokio::io::duplex(1024);
    let detecting = tokio::spawn(async move { detected(server, &CancellationToken::new()).await });
    for piece in H2_START.chunks(7) {
        client.write_all(piece).await.unwrap();
        tokio::task::yield_now().await;
    }
    let (protocol, mut io) = detecting.await.unwrap().unwrap();
    assert_eq!(protocol, Protocol::Http2);
    let mut got = Vec::new();
    while got.len() < H2_START.len() {
        let mut buf = [0u8; 64];
        let n = io.read(&mut buf).await.unwrap();
        assert!(n > 0, "ended after {got:?}");
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, H2_START);

    // a small read buffer gets the first bytes over several reads, none lost
    let (mut client, server) = tokio::io::duplex(1024);
    client.write_all(H2_START).await.unwrap();
    let (_, mut io) = detected(server, &CancellationToken::new()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 5];
    while got.len() < H2_START.len() {
        let n = io.read(&mut buf).await.unwrap();
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, H2_START);
}

#[tokio::test]
async fn a_preface_that_stops_matching_or_ends_is_http1_with_its_bytes_kept() {
    // starts like the preface, then is not: hyper's HTTP/1.1 side gets every byte (and
    // refuses the method)
    let (mut client, server) = tokio::io::duplex(1024);
    client.write_all(b"PRI * HTTP/1.1\r\n\r\n").await.unwrap();
    let (protocol, mut io) = detected(server, &CancellationToken::new()).await.unwrap();
    assert_eq!(protocol, Protocol::Http1);
    let mut buf = [0u8; 64];
    assert_eq!(io.read(&mut buf).await.unwrap(), 18);
    assert_eq!(&buf[..18], b"PRI * HTTP/1.1\r\n\r\n");

    // the client closes mid-preface
    let (mut client, server) = tokio::io::duplex(1024);
    client.write_all(b"PRI * HT").await.unwrap();
    drop(client);
    let (protocol, mut io) = detected(server, &CancellationToken::new()).await.unwrap();
    assert_eq!(protocol, Protocol::Http1);
    assert_eq!(io.read(&mut buf).await.unwrap(), 8);
    assert_eq!(io.read(&mut buf).await.unwrap(), 0);
}

#[tokio::test(start_paused = true)]
async fn detection_ends_at_the_first_bytes_deadline_or_at_shutdown() {
    let (_client, server) = tokio::io::duplex(1024);
    let e = detected(server, &CancellationToken::new())
        .await
        .err()
        .unwrap();
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);

    let (mut client, server) = tokio::io::duplex(1024);
    client.write_all(b"PRI * HTTP/2.0").await.unwrap();
    let drain = CancellationToken::new();
    let detecting = tokio::spawn({
        let drain = drain.clone();
        async move { detected(server, &drain).await.map(|(p, _)| p) }
    });
    tokio::task::yield_now().await;
    drain.cancel();
    let e = detecting.await.unwrap().unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::Interrupted);
}

/// A service that answers every request `200 ok`.
fn ok_service() -> impl ClientService {
    hyper::service::service_fn(|_: Request<Incoming>| async {
        Ok::<_, Infallible>(Response::new(crate::plumbing::full("ok")))
    })
}

/// `server` served over `protocol` by the listener's servers until `drain`, on a task of its own.
fn served(
    server: tokio::io::DuplexStream,
    protocol: Protocol,
    drain: &CancellationToken,
) -> tokio::task::JoinHandle<hyper::Result<()>> {
    let drain = drain.clone();
    tokio::spawn(async move {
        let http = HttpServer::new(&Limits::default());
        match protocol {
            Protocol::Http2 => http.http2(server, ok_service(), &drain).await,
            Protocol::Http1 => http.http1(server, ok_service(), &drain).await,
        }
    })
}

/// How long a connection gets to end once drained: far more than it needs; a drain that is
/// never seen leaves it open for good.
const ENDS_WITHIN: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_drain_sends_goaway_to_an_idle_http2_client() {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let drain = CancellationToken::new();
    let serving = served(server, Protocol::Http2, &drain);
    let (mut send, conn) = h2::client::handshake(client).await.unwrap();
    let client_conn = tokio::spawn(conn);
    let (answer, _) = send
        .send_request(Request::get("http://mvproxy/api").body(()).unwrap(), true)
        .unwrap();
    assert_eq!(answer.await.unwrap().status(), http::StatusCode::OK);
    // The connection is idle (the client keeps it, as kubelets do) when the drain comes.
    drain.cancel();
    // Ended, with an error or not: the client may close the connection on the first GOAWAY,
    // before hyper's second (RFC 9113, section 6.8, the two-step shutdown) is written.
    let served = tokio::time::timeout(ENDS_WITHIN, serving).await;
    assert!(
        matches!(served, Ok(Ok(_))),
        "the server closed the connection: {served:?}"
    );
    // A GOAWAY ends the client's connection without an error; a connection just dropped would
    // end it with one.
    let ended = tokio::time::timeout(ENDS_WITHIN, client_conn).await;
    assert!(
        matches!(ended, Ok(Ok(Ok(())))),
        "the client was told GOAWAY: {ended:?}"
    );
}

#[tokio::test]
async fn a_drain_closes_an_idle_http1_keep_alive_connection() {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let drain = CancellationToken::new();
    let serving = served(server, Protocol::Http1, &drain);
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(client))
            .await
            .unwrap();
    let client_conn = tokio::spawn(conn);
    let req = Request::get("/api")
        .header(http::header::HOST, "mvproxy")
        .body(http_body_util::Empty::<Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), http::StatusCode::OK);
    assert_eq!(resp.into_body().collect().await.unwrap().to_bytes(), "ok");
    drain.cancel();
    let served = tokio::time::timeout(ENDS_WITHIN, serving).await;
    assert!(
        matches!(served, Ok(Ok(Ok(())))),
        "the server closed the connection: {served:?}"
    );
    let ended = tokio::time::timeout(ENDS_WITHIN, client_conn).await;
    assert!(
        matches!(ended, Ok(Ok(Ok(())))),
        "the client saw the connection end: {ended:?}"
    );
}
