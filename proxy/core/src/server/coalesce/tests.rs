use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Empty, Full};
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::DuplexStream;
use tokio::sync::Barrier;

use super::*;

/// The server's end of a connection, counting the writes that reach it.
struct Counted {
    io: DuplexStream,
    writes: Arc<AtomicUsize>,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(1..)) = written {
            self.writes.fetch_add(1, Ordering::Relaxed);
        }
        written
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The body of the answer to `/N`: `N` bytes, each the low byte of its offset plus `N`.
fn body_of(len: usize) -> Bytes {
    (0..len).map(|i| (i + len) as u8).collect()
}

/// Serves HTTP/2 on `io` through [`serve`], answering `/N` with [`body_of`]`(N)` once
/// `together` requests are in (all at once, as a burst's answers come back from the upstream).
async fn serve_bodies(io: Counted, together: usize) -> hyper::Result<()> {
    let barrier = Arc::new(Barrier::new(together));
    let service = service_fn(move |req: Request<hyper::body::Incoming>| {
        let barrier = barrier.clone();
        async move {
            barrier.wait().await;
            let len: usize = req.uri().path()[1..].parse().unwrap_or(0);
            Ok::<_, std::convert::Infallible>(Response::new(Full::new(body_of(len))))
        }
    });
    serve(io, |io| {
        http2::Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(io), service)
    })
    .await
}

type Client = hyper::client::conn::http2::SendRequest<Empty<Bytes>>;

/// A client of `io`, and the task of its connection.
async fn client(io: DuplexStream) -> (Client, tokio::task::JoinHandle<hyper::Result<()>>) {
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
            .await
            .unwrap();
    (send, tokio::spawn(conn))
}

/// Asks for `/N` of each of `lengths` at once; each answer's body checked whole.
async fn ask(send: &Client, lengths: &[usize]) {
    let asked = lengths.iter().map(|&len| {
        let mut send = send.clone();
        async move {
            let req = Request::get(format!("http://proxy/{len}"))
                .body(Empty::new())
                .unwrap();
            let body = send
                .send_request(req)
                .await
                .unwrap()
                .into_body()
                .collect()
                .await
                .unwrap();
            assert!(
                body.to_bytes() == body_of(len),
                "the answer of {len} bytes came whole"
            );
        }
    });
    futures_util::future::join_all(asked).await;
}

#[tokio::test]
async fn answers_ready_together_leave_in_fewer_writes_than_answers() {
    let (client_io, server_io) = tokio::io::duplex(1 << 20);
    let writes = Arc::new(AtomicUsize::new(0));
    let server = tokio::spawn(serve_bodies(
        Counted {
            io: server_io,
            writes: writes.clone(),
        },
        16,
    ));
    let (send, _) = client(client_io).await;
    // a first burst of empty answers: the handshake's settings are written and acknowledged
    ask(&send, &[0; 16]).await;
    let before = writes.load(Ordering::Relaxed);

    ask(&send, &[2048; 16]).await;
    let burst = writes.load(Ordering::Relaxed) - before;
    // Each answer is a HEADERS and a DATA frame of 2 KiB: hyper alone writes each DATA frame
    // on its own (16 writes or more). Together they are 33 KiB: three records' worth.
    assert!(
        burst <= 4,
        "16 answers ready together left in {burst} writes"
    );
    drop(send);
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn answers_of_every_size_arrive_whole_through_a_slow_connection() {
    // A connection that takes 1 KiB at a time: every send of the pending bytes is cut short.
    let (client_io, server_io) = tokio::io::duplex(1024);
    let lengths = [
        0,
        1,
        255,
        256,
        2048,
        RECORD - 1,
        RECORD,
        RECORD + 1,
        1 << 20,
    ];
    let server = tokio::spawn(serve_bodies(
        Counted {
            io: server_io,
            writes: Arc::default(),
        },
        lengths.len(),
    ));
    let (send, _) = client(client_io).await;
    ask(&send, &lengths).await;
    drop(send);
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_client_gone_in_the_middle_of_an_answer_ends_the_connection() {
    // client <-> relay <-> server: the relay's end, when it goes, is a client gone at once (no
    // GOAWAY, no reset), as a process killed or a network cut
    let (client_io, mut relay_client) = tokio::io::duplex(1024);
    let (mut relay_server, server_io) = tokio::io::duplex(1024);
    let relay = tokio::spawn(async move {
        let _ = tokio::io::copy_bidirectional(&mut relay_client, &mut relay_server).await;
    });
    let server = tokio::spawn(serve_bodies(
        Counted {
            io: server_io,
            writes: Arc::default(),
        },
        1,
    ));
    let (mut send, _) = client(client_io).await;
    let req = Request::get("http://proxy/1048576")
        .body(Empty::new())
        .unwrap();
    let mut body = send.send_request(req).await.unwrap().into_body();
    body.frame().await.unwrap().unwrap();
    relay.abort();
    let ended = tokio::time::timeout(Duration::from_secs(10), server).await;
    assert!(
        ended.is_ok(),
        "the server's connection still open after its client left"
    );
}
