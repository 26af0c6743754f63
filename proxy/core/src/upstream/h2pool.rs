//! HTTP/2 to upstreams that offer it, so that many requests share a few connections.
//!
//! Over HTTP/1.1 every request in flight holds its own connection: 10 000 open watches are
//! 10 000 upstream connections (and as many sockets on the API server). kube-apiserver speaks
//! HTTP/2 when the TLS handshake agrees on it (ALPN `h2`), as client-go does, so mvproxy offers
//! `h2` and `http/1.1` and sends requests as streams of shared connections when `h2` is chosen.
//!
//! An HTTP/2 server caps the streams open at once on a connection (`SETTINGS_MAX_CONCURRENT_
//! STREAMS`: Go's default 250, kube-apiserver's `--http2-max-streams-per-connection` 1000,
//! hyper's 200). A stream over the cap waits for another to end, which a watch never does; so,
//! as Go's transport does when a server's cap is reached, the pool opens another connection
//! once each has [`MAX_STREAMS`] requests in flight (below every server's default).
//!
//! What stays on HTTP/1.1: upgrades (exec, attach, port-forward; HTTP/2 has no `Upgrade`),
//! `http://` upstreams (no ALPN), and an upstream whose handshake chose `http/1.1`: the pool
//! then remembers it and the caller's HTTP/1.1 client is used from then on.
//!
//! A server that stops taking requests on a connection says which ones it did not process,
//! and those may go elsewhere whatever their method (RFC 9113 §8.7): a `GOAWAY` names the last
//! stream it processed or might still process, so every stream above it was not (§6.8;
//! kube-apiserver sends one when it shuts down or restarts during an upgrade), and a
//! `RST_STREAM` with `REFUSED_STREAM` says its stream was not. Go's HTTP/2 transport sends such
//! a request again on another connection (golang.org/x/net `http2/transport.go`:
//! `(*Transport).RoundTripOpt`'s retry loop, `canRetryError`, `shouldRetryRequest`, and
//! `(*ClientConn).setGoAway`, which fails the streams above the last stream ID with
//! `errClientConnGotGoAway`), and so does this pool ([`H2Pool::send`]).
//!
//! h2 reports the two cases as a `GOAWAY` error and a `REFUSED_STREAM` reset on the stream,
//! both marked as received from the server (h2 0.4 `src/proto/streams/streams.rs`:
//! `recv_go_away` fails the streams above the last stream ID with the `GOAWAY`, and a stream
//! opened after it gets the same error). A stream the `GOAWAY` covers and that then ends
//! unanswered gets the connection's I/O error instead (the server may have processed it), and
//! any other reset is the server's answer: neither is sent again.
//!
//! The connection is taken out of the pool (its other streams run to their end) and the request
//! goes to another one: a new one unless another has room, which the connection's other refused
//! requests then share rather than each dialing its own. A request is sent again at most once
//! (Go tries up to seven times with a backoff; a second refusal reaches the client as a `503`
//! with `Retry-After: 1`, and the client decides), and only when its body can be sent again.
//! A request without a body, the common case (get, list, watch), is kept as its head: one copy
//! of its method, URI and header map per request, about 0.3 µs (`bench/PERF_NOTES.md`); the
//! extensions are left out, as they never reach the upstream. A request with a body is never
//! copied: its body has been sent by the time the server refuses it, and keeping every body for
//! a rare refusal would cost memory on every write, so its refusal reaches the client (`503`).
//!
//! A server that stops answering (a stopped or wedged process, an address whose packets are
//! dropped) would hold every request sent on its connections until the response-header
//! timeout. So a connection with requests or response bodies in flight is checked with
//! `PING`s: every [`KEEP_ALIVE_INTERVAL`] a `PING` is sent, and when its `ACK` does not arrive
//! within [`KEEP_ALIVE_TIMEOUT`] the connection is closed, its requests fail (a transport
//! failure, which the caller may send elsewhere) and its response bodies end. This is Go's
//! `ReadIdleTimeout` and `PingTimeout` (golang.org/x/net `http2/transport.go`,
//! `(*ClientConn).healthCheck`), except that Go pings only after an interval with nothing read:
//! here the timer alone decides, which costs a busy connection a small frame each way every
//! half second and keeps the reads untimed.
//! Unlike Go's, a connection without anything in flight is not pinged: nothing waits on it.
//! A server that answers `PING`s keeps its connections whatever its requests wait for: a watch
//! with no events, a slow list. A connection given up so is reported to the pool's owner
//! ([`H2Pool::on_hung`]) even when only response bodies (watches) were in flight, which end
//! without a request failing that would tell.
//!
//! A request whose connection closed before it could be sent (`h2`'s `SendRequest::ready`
//! fails; Go's `errClientConnUnusable`) goes to another connection whatever its body. That
//! spends no replay when the connection came from the pool (a pooled connection may close at
//! any time, and leaves the pool when it does), and is the one replay when it was opened for
//! the request.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use h2::RecvStream;
use http::{Request, Response, Uri};
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::Connection;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::watch;

use stream::{ConnState, SendFailure};

use crate::plumbing::{Body, BoxError, empty};

use crate::upstream::Connector;
use crate::upstream::h1pool::{CheckedOutConn, head_of};

/// Requests in flight on one upstream connection before another is opened.
pub(crate) const MAX_STREAMS: usize = 100;

/// How long nothing may be read on a connection with requests in flight before a `PING`
/// asks the server whether it is still there (see the module doc).
pub(crate) const KEEP_ALIVE_INTERVAL: Duration = Duration::from_millis(500);

/// How long a `PING` may wait for its `ACK` before the connection is given up. With
/// [`KEEP_ALIVE_INTERVAL`], a server that stops answering is noticed within a second of its
/// last frame; one that answers later than this (a round trip over half a second) is taken
/// for one that does not.
pub(crate) const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_millis(500);

/// Told, with the cause in words, that a connection was closed because its `PING` went
/// unanswered.
pub(crate) type HungHook = Box<dyn Fn(String) + Send + Sync>;

/// The HTTP/2 connections to one upstream.
pub(crate) struct H2Pool {
    connector: Connector,
    /// Set once by the pool's owner; read by each connection's task when it ends.
    hung: Arc<std::sync::OnceLock<HungHook>>,
    /// Never held across an await: a request that finds room on an open connection never
    /// waits for another being made (to a server that may not answer).
    conns: std::sync::Mutex<Conns>,
    /// The upstream's handshake chose HTTP/1.1.
    no_h2: AtomicBool,
    /// `mvproxy_upstream_replays_total{protocol="http2"}` of this upstream.
    replays: Counter,
}

#[derive(Default)]
struct Conns {
    open: Vec<Conn>,
    /// The connection being made, if any: requests that need one wait for its outcome rather
    /// than each dialing its own, and share its failure.
    dialing: Option<watch::Receiver<Option<Dialed>>>,
}

/// What a request that needs a new connection does.
enum Next {
    /// Dial, and tell those waiting through this.
    Dial(watch::Sender<Option<Dialed>>),
    /// Wait for another request's dial.
    Wait(watch::Receiver<Option<Dialed>>),
}

/// How a dial ended, for those who waited on it.
#[derive(Clone)]
enum Dialed {
    /// A connection is in the pool (or the upstream chose HTTP/1.1): look again.
    Done,
    /// It failed, in words.
    Failed(Arc<str>),
}

/// Another request's dial to the upstream failed while this one waited for it.
#[derive(Debug, thiserror::Error)]
#[error("connecting to the upstream failed: {0}")]
struct DialFailed(Arc<str>);

/// Clears the pool's dial in progress when the dialing request ends, however it ends (it can
/// be dropped mid-dial when its client goes away), so that the next request dials anew.
struct Dialing<'a>(&'a H2Pool);

impl Drop for Dialing<'_> {
    fn drop(&mut self) {
        self.0.lock().dialing = None;
    }
}

struct Conn {
    send: h2::client::SendRequest<Bytes>,
    state: Arc<ConnState>,
}

/// A stream reserved on a connection; released when the response body (or this) is dropped.
pub(crate) struct Stream {
    send: h2::client::SendRequest<Bytes>,
    guard: StreamGuard,
    /// The connection was opened for this request.
    fresh: bool,
}

struct StreamGuard(Arc<ConnState>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::Release);
    }
}

impl std::fmt::Debug for H2Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Pool")
            .field("no_h2", &self.no_h2)
            .finish_non_exhaustive()
    }
}

impl H2Pool {
    /// `connector` must offer `h2` by ALPN.
    pub(crate) fn new(connector: Connector, replays: Counter) -> Self {
        Self {
            connector,
            replays,
            hung: Arc::default(),
            conns: std::sync::Mutex::new(Conns::default()),
            no_h2: AtomicBool::new(false),
        }
    }

    /// Calls `hung` whenever a connection of this pool is closed because its `PING` went
    /// unanswered. Set once; a later call is ignored.
    pub(crate) fn on_hung(&self, hung: HungHook) {
        let _ = self.hung.set(hung);
    }

    /// Whether the upstream is known not to speak HTTP/2.
    pub(crate) fn is_http1(&self) -> bool {
        self.no_h2.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Conns> {
        // A panic while holding the lock leaves a plain list behind: still usable.
        self.conns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Open connections (for tests and the watch-scale measurement).
    pub(crate) async fn connections(&self) -> usize {
        let mut conns = self.lock();
        conns.open.retain(|c| !c.state.is_closed());
        conns.open.len()
    }

    /// A stream on a connection with room, connecting if none has; `Ok(None)` when the
    /// upstream chose HTTP/1.1. One connection is made at a time: requests that need one
    /// meanwhile wait for it (not for the lock), and share its failure.
    pub(crate) async fn checkout(&self, base: &Uri) -> Result<Option<Stream>, BoxError> {
        loop {
            let next = {
                let mut conns = self.lock();
                conns.open.retain(|c| !c.state.is_closed());
                if let Some(c) = conns
                    .open
                    .iter()
                    .find(|c| c.state.streams.load(Ordering::Acquire) < MAX_STREAMS)
                {
                    return Ok(Some(reserve(c, false)));
                }
                if self.is_http1() {
                    return Ok(None);
                }
                match conns.dialing.clone() {
                    Some(rx) => Next::Wait(rx),
                    None => {
                        let (tx, rx) = watch::channel(None);
                        conns.dialing = Some(rx);
                        Next::Dial(tx)
                    }
                }
            };
            match next {
                Next::Dial(tx) => return self.dial(base, tx).await,
                Next::Wait(mut rx) => {
                    // A dialer dropped without a word (its client went away): look again,
                    // and dial if need be.
                    if let Ok(outcome) = rx.wait_for(Option::is_some).await
                        && let Some(Dialed::Failed(why)) = outcome.clone()
                    {
                        return Err(DialFailed(why).into());
                    }
                }
            }
        }
    }

    /// Makes a connection, the lock not held, and tells those waiting through `done`.
    async fn dial(
        &self,
        base: &Uri,
        done: watch::Sender<Option<Dialed>>,
    ) -> Result<Option<Stream>, BoxError> {
        let _dialing = Dialing(self);
        // Boxed: the handshake's future is most of a request's (6.5 KB of 13.6 KB), and every
        // request's future is copied whole into its task when hyper's server spawns it, though
        // only the request that dials ever uses this part (bench/PERF_NOTES.md, eleventh round).
        let result = Box::pin(self.connect(base)).await;
        let stream = match &result {
            Ok(Some(c)) => {
                let stream = reserve(c, true);
                Some(stream)
            }
            _ => None,
        };
        let outcome = match result {
            Ok(Some(c)) => {
                self.lock().open.push(c);
                Dialed::Done
            }
            Ok(None) => Dialed::Done,
            Err(e) => {
                let why: Arc<str> = crate::plumbing::causes(e.as_ref()).into();
                done.send_replace(Some(Dialed::Failed(why)));
                return Err(e);
            }
        };
        done.send_replace(Some(outcome));
        Ok(stream)
    }

    /// A new connection; `None` when the upstream chose HTTP/1.1.
    async fn connect(&self, base: &Uri) -> Result<Option<Conn>, BoxError> {
        let io = self.connector.dial(base).await?;
        if !io.connected().is_negotiated_h2() {
            self.no_h2.store(true, Ordering::Relaxed);
            return Ok(None);
        }
        let (send, state) = stream::handshake(io, self.hung.clone()).await?;
        Ok(Some(Conn { send, state }))
    }

    /// Sends `req` (an absolute URI) on `stream`, from [`H2Pool::checkout`]. A request the
    /// upstream did not process (a `GOAWAY` above it, `REFUSED_STREAM`) is sent once more, on
    /// another connection, when it has no body (see the module doc).
    pub(crate) async fn send(
        &self,
        base: &Uri,
        mut stream: Stream,
        mut req: Request<Body>,
    ) -> Result<Response<UpstreamBody>, BoxError> {
        // What a replay is rebuilt from: kept only for a request without a body.
        let mut head = req.body().is_end_stream().then(|| head_of(&req));
        // The request was sent once more already: whatever happens now is the answer.
        let mut replayed = false;
        loop {
            let Stream { send, guard, fresh } = stream;
            let SendFailure { error: e, unsent } = match stream::send(send, &guard.0, req).await {
                Ok(resp) => {
                    return Ok(resp.map(|body| UpstreamBody {
                        inner: Inner::H2 {
                            body,
                            _guard: guard,
                        },
                        held: Held::Nothing,
                    }));
                }
                Err(failure) => failure,
            };
            // The request to send again, and whether that is its one replay.
            let (again, replay) = match unsent {
                // Not sent: the connection closed before the request could be. A pooled one
                // can close at any time, and is then out of the pool: no replay is spent on it.
                Some(unsent) => (Some(unsent), fresh),
                None if refused_unprocessed(e.as_ref()) => {
                    (head.take().map(|h| h.map(|()| empty())), true)
                }
                None => (None, true),
            };
            let Some(again) = again.filter(|_| !(replay && replayed)) else {
                return Err(e);
            };
            tracing::debug!(error = %e, "upstream did not process the request; sending it once more on another connection");
            // No new stream goes to this connection; those in flight on it run to their end.
            self.lock()
                .open
                .retain(|c| !Arc::ptr_eq(&c.state, &guard.0));
            drop(guard);
            stream = match self.checkout(base).await? {
                Some(s) => s,
                // The upstream now chose HTTP/1.1: the refusal stands.
                None => return Err(e),
            };
            req = again;
            replayed |= replay;
            if replay {
                self.replays.inc();
            }
        }
    }
}

fn reserve(c: &Conn, fresh: bool) -> Stream {
    c.state.streams.fetch_add(1, Ordering::AcqRel);
    Stream {
        send: c.send.clone(),
        guard: StreamGuard(c.state.clone()),
        fresh,
    }
}

/// Whether `e`, the failure of a request on an HTTP/2 stream before its response head, says
/// the server did not process the request: a `GOAWAY` from the server that does not cover the
/// stream, or a reset from the server with `REFUSED_STREAM` (see the module doc).
fn refused_unprocessed(e: &(dyn std::error::Error + 'static)) -> bool {
    let Some(h2) = e.downcast_ref::<h2::Error>() else {
        return false;
    };
    h2.is_remote() && (h2.is_go_away() || h2.reason() == Some(h2::Reason::REFUSED_STREAM))
}

/// An upstream response body. Over HTTP/2 it holds its stream's place until dropped, and gives
/// back the stream's flow-control window as it is read; over HTTP/1.1 it holds its connection
/// and drives it as the body is read ([`crate::upstream::h1pool`]).
pub struct UpstreamBody {
    inner: Inner,
    held: Held,
}

enum Inner {
    H1(Incoming),
    H2 {
        body: RecvStream,
        _guard: StreamGuard,
    },
}

enum Held {
    Nothing,
    Conn(CheckedOutConn),
}

impl From<Incoming> for UpstreamBody {
    fn from(inner: Incoming) -> Self {
        Self {
            inner: Inner::H1(inner),
            held: Held::Nothing,
        }
    }
}

impl UpstreamBody {
    /// A body read over a pooled HTTP/1.1 connection.
    pub(crate) fn with_h1_conn(inner: Incoming, conn: CheckedOutConn) -> Self {
        let mut body = Self {
            inner: Inner::H1(inner),
            held: Held::Conn(conn),
        };
        body.check_end();
        body
    }

    fn check_end(&mut self) {
        let end = self.is_end_stream();
        if let Held::Conn(conn) = &mut self.held
            && end
        {
            conn.finished();
        }
    }
}

impl HttpBody for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let inner = match &mut this.inner {
            Inner::H2 { body, .. } => return poll_h2(body, cx),
            Inner::H1(inner) => inner,
        };
        let mut polled = Pin::new(&mut *inner).poll_frame(cx);
        if polled.is_pending()
            && let Held::Conn(conn) = &mut this.held
        {
            // Nobody else reads this connection: read it, then look again.
            conn.drive(cx);
            polled = Pin::new(inner).poll_frame(cx);
        }
        match &polled {
            Poll::Ready(None) => {
                if let Held::Conn(conn) = &mut this.held {
                    conn.finished();
                }
            }
            Poll::Ready(Some(Ok(_))) => this.check_end(),
            _ => {}
        }
        polled.map_err(BoxError::from)
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::H1(inner) => inner.is_end_stream(),
            Inner::H2 { body, .. } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::H1(inner) => inner.size_hint(),
            Inner::H2 { body, .. } if body.is_end_stream() => SizeHint::with_exact(0),
            Inner::H2 { .. } => SizeHint::default(),
        }
    }
}

/// The next frame of an HTTP/2 response body: its data, the window they took given back at
/// once (the reader has them), then its trailers.
fn poll_h2(
    body: &mut RecvStream,
    cx: &mut Context<'_>,
) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
    match body.poll_data(cx) {
        Poll::Ready(Some(Ok(data))) => {
            // Fails only once the stream is gone, which the next poll reports.
            let _ = body.flow_control().release_capacity(data.len());
            Poll::Ready(Some(Ok(Frame::data(data))))
        }
        Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
        Poll::Ready(None) => match body.poll_trailers(cx) {
            Poll::Ready(Ok(Some(trailers))) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Poll::Ready(Ok(None)) => Poll::Ready(None),
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e.into()))),
            Poll::Pending => Poll::Pending,
        },
        Poll::Pending => Poll::Pending,
    }
}

mod stream;
#[cfg(test)]
mod tests;
