//! One HTTP/2 connection to an upstream, driven through `h2` directly: its task, its
//! keep-alive `PING`s, and a request sent on it as a stream.
//!
//! hyper's HTTP/2 client puts a dispatch task and a channel between the caller and `h2`, spawns
//! a task per request for its body and response, and answers through a oneshot: about 7 500 to
//! 8 300 instructions per request over `h2`'s own `SendRequest` (bench/PERF_NOTES.md, eighteenth
//! round). Here the request's own task opens the stream and awaits the answer; the connection's
//! task only reads and writes frames. What hyper's client did besides is done here as it did:
//! connection-specific headers are left out of the request (the caller strips them,
//! `crate::upstream::hop`), `Content-Length` is set from a body of known size
//! (hyper-1.12.0 `src/proto/h2/client.rs`, `ClientTask::poll`), the body is written as the
//! stream's flow-control window allows (`src/proto/h2/mod.rs`, `PipeToSendStream`), and the
//! connection is checked with `PING`s while streams are open on it
//! (`src/proto/h2/ping.rs`).

use std::future::poll_fn;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::Poll;

use bytes::Bytes;
use h2::client::{Connection, SendRequest};
use h2::{Ping, Reason, RecvStream, SendStream};
use http::header::{CONTENT_LENGTH, HeaderValue};
use http::{Method, Request, Response};
use http_body::Body as HttpBody;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

use super::{HungHook, KEEP_ALIVE_INTERVAL, KEEP_ALIVE_TIMEOUT};
use crate::plumbing::{Body, BoxError};
use crate::upstream::resolve::Conn;

// Flow-control windows and buffers as hyper's client set them (hyper-1.12.0
// `src/proto/h2/client.rs`, `Config::default`), so that a watch buffers what it did before.
const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
const CONN_WINDOW: u32 = 5 * 1024 * 1024;
const MAX_FRAME_SIZE: u32 = 16 * 1024;
const MAX_SEND_BUF_SIZE: usize = 1024 * 1024;
const MAX_HEADER_LIST_SIZE: u32 = 16 * 1024;
const INITIAL_MAX_SEND_STREAMS: usize = 100;
const MAX_LOCAL_ERROR_RESET_STREAMS: usize = 1024;

/// What the pool and the connection's task share about one connection.
#[derive(Default)]
pub(super) struct ConnState {
    /// Streams reserved on it: requests in flight and response bodies not yet dropped.
    pub(super) streams: AtomicUsize,
    /// Its task has ended: nothing more can be sent on it.
    closed: AtomicBool,
    /// It was closed because a `PING` went unanswered.
    hung: AtomicBool,
}

impl ConnState {
    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// `e`, an error of a stream of this connection, saying why when the connection was given
    /// up for an unanswered `PING` (`h2` sees only the connection's end).
    fn failure(&self, e: h2::Error) -> BoxError {
        if self.hung.load(Ordering::Acquire) {
            KeepAliveTimedOut(e).into()
        } else {
            e.into()
        }
    }
}

/// A stream's error on a connection given up because its `PING` went unanswered.
#[derive(Debug, thiserror::Error)]
#[error("keep-alive timed out (no PING acknowledgement within {KEEP_ALIVE_TIMEOUT:?}): {0}")]
struct KeepAliveTimedOut(#[source] h2::Error);

/// A request that failed before its response head.
pub(super) struct SendFailure {
    pub(super) error: BoxError,
    /// The request, whole, when the connection was closed before it could be sent.
    pub(super) unsent: Option<Request<Body>>,
}

/// The HTTP/2 handshake on `io`; the connection's task is spawned, and reports to `hung` when
/// it gives the connection up for an unanswered `PING`.
pub(super) async fn handshake(
    io: Conn,
    hung: Arc<OnceLock<HungHook>>,
) -> Result<(SendRequest<Bytes>, Arc<ConnState>), h2::Error> {
    let (send, conn) = h2::client::Builder::new()
        .initial_max_send_streams(INITIAL_MAX_SEND_STREAMS)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONN_WINDOW)
        .max_frame_size(MAX_FRAME_SIZE)
        .max_header_list_size(MAX_HEADER_LIST_SIZE)
        .max_send_buffer_size(MAX_SEND_BUF_SIZE)
        .max_local_error_reset_streams(Some(MAX_LOCAL_ERROR_RESET_STREAMS))
        .enable_push(false)
        .handshake(TokioIo::new(io))
        .await?;
    let state = Arc::new(ConnState::default());
    tokio::spawn(drive(conn, state.clone(), hung));
    Ok((send, state))
}

/// Reads and writes the connection's frames until it ends. While streams are open on it, a
/// `PING` goes out every [`KEEP_ALIVE_INTERVAL`]; one whose `ACK` has not come within
/// [`KEEP_ALIVE_TIMEOUT`] ends the connection, its streams failing with it.
async fn drive<T>(
    mut conn: Connection<T, Bytes>,
    state: Arc<ConnState>,
    hung: Arc<OnceLock<HungHook>>,
) where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let mut pings = conn.ping_pong();
    let tick = tokio::time::sleep(KEEP_ALIVE_INTERVAL);
    tokio::pin!(tick);
    let mut awaiting_ack = false;
    loop {
        tokio::select! {
            // The connection's frames first, without select's random draw: they are why it woke.
            biased;
            ended = &mut conn => {
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "upstream HTTP/2 connection closed");
                }
                break;
            }
            () = &mut tick => {
                if awaiting_ack {
                    let cause = format!(
                        "HTTP/2 keep-alive timed out: no PING acknowledgement within {KEEP_ALIVE_TIMEOUT:?}"
                    );
                    tracing::debug!("{cause}");
                    // Set before the connection is dropped, which fails its streams.
                    state.hung.store(true, Ordering::Release);
                    if let Some(hung) = hung.get() {
                        hung(cause);
                    }
                    break;
                }
                let busy = state.streams.load(Ordering::Acquire) > 0;
                awaiting_ack = busy
                    && pings
                        .as_mut()
                        .is_some_and(|p| p.send_ping(Ping::opaque()).is_ok());
                let wait = if awaiting_ack { KEEP_ALIVE_TIMEOUT } else { KEEP_ALIVE_INTERVAL };
                tick.as_mut().reset(Instant::now() + wait);
            }
            _ = poll_fn(|cx| pings.as_mut().map_or(Poll::Pending, |p| p.poll_pong(cx))), if awaiting_ack => {
                awaiting_ack = false;
                tick.as_mut().reset(Instant::now() + KEEP_ALIVE_INTERVAL);
            }
        }
    }
    state.closed.store(true, Ordering::Release);
    drop(conn);
}

/// Sends `req` (an absolute URI, no connection-specific headers) on `send`'s connection, and
/// awaits its response head. The body is written as the stream's window allows; it is written
/// on by a task of its own when the answer comes first.
pub(super) async fn send(
    send: SendRequest<Bytes>,
    state: &ConnState,
    req: Request<Body>,
) -> Result<Response<RecvStream>, SendFailure> {
    let (mut head, body) = req.into_parts();
    let end = body.is_end_stream();
    if let Some(len) = body.size_hint().exact()
        && (len != 0 || has_payload_semantics(&head.method))
        && !head.headers.contains_key(CONTENT_LENGTH)
    {
        head.headers.insert(CONTENT_LENGTH, HeaderValue::from(len));
    }
    let mut send = match send.ready().await {
        Ok(send) => send,
        Err(e) => {
            return Err(SendFailure {
                error: state.failure(e),
                unsent: Some(Request::from_parts(head, body)),
            });
        }
    };
    let failed = |e| SendFailure {
        error: state.failure(e),
        unsent: None,
    };
    let (mut answer, stream) = send
        .send_request(Request::from_parts(head, ()), end)
        .map_err(failed)?;
    if end {
        return answer.await.map_err(failed);
    }
    // Boxed: only requests with a body have it, and it may outlive this future.
    let mut writing = Box::pin(write_body(body, stream));
    tokio::select! {
        biased;
        answered = &mut answer => {
            if answered.is_ok() {
                tokio::spawn(writing);
            }
            answered.map_err(failed)
        }
        written = &mut writing => match written {
            Err(BodyFailure::Client(e)) => Err(SendFailure { error: e, unsent: None }),
            // The server ended or reset the stream: its answer says why.
            Ok(()) | Err(BodyFailure::Stream) => answer.await.map_err(failed),
        },
    }
}

/// Why a request body was not written to its end.
enum BodyFailure {
    /// The client's body failed (it went away, or was over the limit): the stream is reset.
    Client(BoxError),
    /// The stream was reset or closed by the server.
    Stream,
}

async fn write_body(mut body: Body, mut stream: SendStream<Bytes>) -> Result<(), BodyFailure> {
    loop {
        let frame = match body.frame().await {
            None => {
                return stream
                    .send_data(Bytes::new(), true)
                    .map_err(|_| BodyFailure::Stream);
            }
            Some(Ok(frame)) => frame,
            Some(Err(e)) => {
                stream.send_reset(Reason::CANCEL);
                return Err(BodyFailure::Client(e));
            }
        };
        match frame.into_data() {
            Ok(data) => {
                let last = body.is_end_stream();
                write_data(&mut stream, data, last).await?;
                if last {
                    return Ok(());
                }
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    return stream
                        .send_trailers(trailers)
                        .map_err(|_| BodyFailure::Stream);
                }
            }
        }
    }
}

/// Writes `data` as the stream's window allows, ending the stream with it when `last`.
async fn write_data(
    stream: &mut SendStream<Bytes>,
    mut data: Bytes,
    last: bool,
) -> Result<(), BodyFailure> {
    if data.is_empty() {
        return match last {
            true => stream
                .send_data(data, true)
                .map_err(|_| BodyFailure::Stream),
            false => Ok(()),
        };
    }
    while !data.is_empty() {
        stream.reserve_capacity(data.len());
        let room = match poll_fn(|cx| stream.poll_capacity(cx)).await {
            Some(Ok(room)) => room,
            Some(Err(_)) | None => return Err(BodyFailure::Stream),
        };
        if room == 0 {
            continue;
        }
        let chunk = data.split_to(room.min(data.len()));
        stream
            .send_data(chunk, last && data.is_empty())
            .map_err(|_| BodyFailure::Stream)?;
    }
    Ok(())
}

/// Whether an empty body of `method` still says `Content-Length: 0` (hyper-1.12.0
/// `src/headers.rs`, `method_has_defined_payload_semantics`).
fn has_payload_semantics(method: &Method) -> bool {
    !matches!(
        *method,
        Method::GET | Method::HEAD | Method::DELETE | Method::CONNECT
    )
}
