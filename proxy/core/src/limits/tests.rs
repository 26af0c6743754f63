use std::pin::Pin;
use std::task::Poll;

use bytes::Bytes;
use http::Request;
use http_body::Body as HttpBody;
use http_body_util::BodyExt;

use super::*;
use crate::error::ProxyError;
use http_body_util::channel::Channel;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn upstream_timeout() -> Result<(), ProxyError> {
    Err(ProxyError::Timeout {
        upstream: crate::plumbing::ServerName::from("apiserver-a"),
        seconds: 60,
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
