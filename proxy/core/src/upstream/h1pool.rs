//! HTTP/1.1 connections to one upstream, driven by the request that uses them.
//!
//! A pooled client in the usual shape (hyper-util's legacy `Client`) runs each upstream
//! connection as a task of its own: a request is handed to that task through a channel, its
//! response handed back through another, and a third task per request watches for the
//! connection to become idle again. Each hand-off is a wake-up and a trip through the
//! scheduler, on every request, and on a proxy that forwards small requests they cost more
//! than the HTTP/1.1 parsing itself (bench/PERF_NOTES.md).
//!
//! Here a connection has no task. Whoever holds it polls it: the request's own future while
//! it waits for the response head, then the response body ([`CheckedOutConn`], inside
//! [`crate::upstream::h2pool::UpstreamBody`]) while the client reads it. Once the body has been read to
//! its end the connection goes back to the pool, idle. One task per pool watches the idle
//! connections: each is polled once with that task's waker when it comes back, so the
//! upstream closing it (an EOF) wakes the watcher, which drops it at once and frees its
//! descriptor, as hyper-util's connection tasks do; a connection the watcher has not seen
//! yet is found out by the next request to take it, which polls it first (and skips it).
//! The watcher costs nothing per request beyond that one poll: it runs when an idle
//! connection closes or expires. A body dropped before its end closes its connection, as an
//! HTTP/1.1 exchange cut short must.
//!
//! An upstream may close an idle connection at the moment a request is taken to it: the pool
//! keeps idle connections up to [`IDLE_TIMEOUT`] (90 s), longer than a peer mvproxy keeps them
//! open (30 s, `limits::HEADER_READ_TIMEOUT`), and any server closes them when it restarts.
//! The request then meets an EOF or a reset and no answer, although the upstream processed
//! nothing. A request that a reused connection could not even start (hyper hands it back
//! unsent) is sent again on another one, as hyper-util's client does. A request already
//! written is sent once more, on a new connection, only as Go's net/http `Transport` does
//! (golang/go `src/net/http/transport.go`, `(*persistConn).shouldRetryRequest`, and
//! `src/net/http/request.go`, `(*Request).isReplayable`): the connection was reused (a fresh
//! one has no reason to be closed under a request, and the upstream may be refusing it), not
//! one byte of a response arrived on it (counted after TLS by [`ReadFlaggingIo`], so a TLS
//! `close_notify` is no answer), the failure is the connection's and not hyper's refusal of
//! the request, and the request is replayable: `GET`, `HEAD`, `OPTIONS` or `TRACE` with an
//! empty body. A `POST`, `PUT`, `PATCH` or `DELETE`, or anything with a body, is never sent
//! twice; an upgrade never comes here ([`H1Pool::send_upgrade`]); and a request is replayed
//! at most once. What the replay needs is kept only for a replayable request on a reused
//! connection: a `Request<()>` with its method, URI, version and headers (one copy of the
//! header map; the extensions are left out, hyper's HTTP/1.1 client reads none), rebuilt with
//! an empty body. A request with a body, or on a new connection, is never copied.
//!
//! Upgrades (exec, attach, port-forward) get a fresh connection, run as a task with hyper's
//! upgrade support: the connection becomes the tunnel and never returns to the pool.
//! Idle connections are closed after [`IDLE_TIMEOUT`] (hyper-util's client used 90 s too),
//! and at most [`MAX_IDLE`] are kept.

use std::future::{Future, poll_fn};
use std::io;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use http::{Method, Request, Response, Uri};
use http_body::Body as _;
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_rustls::MaybeHttpsStream;
use hyper_util::rt::TokioIo;
use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::TcpStream;

use crate::plumbing::{Body, BoxError, empty};

use crate::upstream::Connector;

/// How long an unused connection is kept.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Idle connections kept per upstream; more are closed when their exchange ends.
pub(crate) const MAX_IDLE: usize = 1024;

type Io = TokioIo<ReadFlaggingIo>;
type Conn = http1::Connection<Io, Body>;

/// An upstream connection's stream (after TLS) that notes whether it read anything: whether
/// a response began to arrive (see the module doc). One flag per connection, set on a read.
struct ReadFlaggingIo {
    io: TokioIo<MaybeHttpsStream<TokioIo<TcpStream>>>,
    has_read: Arc<AtomicBool>,
}

/// The HTTP/1.1 connections to one upstream.
pub(crate) struct H1Pool {
    connector: Connector,
    idle: Mutex<Idle>,
    /// `mvproxy_upstream_replays_total{protocol="http1"}` of this upstream.
    replays: Counter,
}

#[derive(Default)]
struct Idle {
    /// Most recently used last (so the oldest first).
    conns: Vec<IdleConn>,
    /// The watcher task has been started.
    watching: bool,
    /// The watcher's waker, once it has run: an idle connection polled with it wakes the
    /// watcher when its upstream closes it.
    watcher: Option<Waker>,
}

struct IdleConn {
    conn: Box<Driven>,
    since: Instant,
}

/// A connection and its sender (boxed where it is held: a connection is large, and moves
/// from the pool to a request to its response body and back).
struct Driven {
    send: http1::SendRequest<Body>,
    /// `None` once the connection has closed.
    conn: Option<Conn>,
    /// Set by the stream when it reads bytes; cleared before a replayable request is written.
    has_read: Arc<AtomicBool>,
}

/// A request that failed on its way to the upstream: why, and the request itself when none
/// of it was written (no connection could be made), so that it can go to another server.
pub(crate) struct SendError {
    pub(crate) cause: BoxError,
    pub(crate) unsent: Option<Request<Body>>,
}

impl std::fmt::Debug for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendError")
            .field("cause", &self.cause)
            .field("unsent", &self.unsent.is_some())
            .finish()
    }
}

impl<E: Into<BoxError>> From<E> for SendError {
    fn from(cause: E) -> Self {
        Self {
            cause: cause.into(),
            unsent: None,
        }
    }
}

/// A connection in use by a response body, which polls it as the client reads; back to the
/// pool when dropped after the body's end.
pub(crate) struct CheckedOutConn {
    conn: Option<Box<Driven>>,
    pool: Weak<H1Pool>,
    /// The exchange ended cleanly: the connection can serve another request.
    reusable: bool,
}

impl std::fmt::Debug for H1Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H1Pool").finish_non_exhaustive()
    }
}

impl H1Pool {
    pub(crate) fn new(connector: Connector, replays: Counter) -> Arc<Self> {
        Arc::new(Self {
            connector,
            replays,
            idle: Mutex::new(Idle::default()),
        })
    }

    /// Idle connections (for tests).
    pub(crate) fn idle(&self) -> usize {
        self.lock().conns.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Idle> {
        // A panic while holding the lock leaves a plain list behind: still usable.
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends `req` (origin-form URI, `Host` set) on an idle connection or a new one to `base`.
    /// When no connection could be made, or a new one closed before hyper took the request,
    /// nothing was written and the error carries the request back.
    pub(crate) async fn send(
        self: &Arc<Self>,
        base: &Uri,
        mut req: Request<Body>,
    ) -> Result<(Response<Incoming>, CheckedOutConn), SendError> {
        let replayable = is_replayable(&req);
        // What a replay is rebuilt from: copied only for a replayable request on a reused
        // connection.
        let mut head: Option<Request<()>> = None;
        // The request was written once and is sent again: on a new connection, and no more.
        let mut replayed = false;
        loop {
            let idle = if replayed { None } else { self.take_idle() };
            // A request written once already (`replayed`) is not unsent whatever happens now.
            let unsent = |cause: BoxError, req| SendError {
                cause,
                unsent: (!replayed).then_some(req),
            };
            let (mut c, reused) = match idle {
                Some(c) => (c, true),
                // Boxed, as `H2Pool`'s dial: kept out of every request's future.
                None => match Box::pin(self.connect(base)).await {
                    Ok(c) => (c, false),
                    Err(cause) => return Err(unsent(cause, req)),
                },
            };
            let ready = poll_fn(|cx| {
                c.drive(cx);
                c.send.poll_ready(cx)
            })
            .await;
            if let Err(e) = ready {
                if reused {
                    continue;
                }
                return Err(unsent(e.into(), req));
            }
            let may_replay = reused && replayable;
            if may_replay {
                if head.is_none() {
                    head = Some(head_of(&req));
                }
                c.has_read.store(false, Ordering::Relaxed);
            }
            let mut sent = pin!(c.send.try_send_request(req));
            let result = poll_fn(|cx| {
                // The response first: when the connection is polled it may complete it.
                if let Poll::Ready(r) = sent.as_mut().poll(cx) {
                    return Poll::Ready(r);
                }
                c.drive(cx);
                sent.as_mut().poll(cx)
            })
            .await;
            let mut e = match result {
                Ok(resp) => {
                    let conn = CheckedOutConn {
                        conn: Some(c),
                        pool: Arc::downgrade(self),
                        reusable: false,
                    };
                    return Ok((resp, conn));
                }
                Err(e) => e,
            };
            match e.take_message() {
                // Not written: a reused connection was closed under it; try another.
                Some(unsent) if reused => {
                    req = unsent;
                    continue;
                }
                Some(unsent) => {
                    return Err(SendError {
                        cause: e.into_error().into(),
                        unsent: (!replayed).then_some(unsent),
                    });
                }
                None => {}
            }
            let e = e.into_error();
            // Written, and the reused connection closed (or was reset) before one byte of an
            // answer: Go's `shouldRetryRequest` (see the module doc).
            if may_replay
                && !e.is_user()
                && !c.has_read.load(Ordering::Relaxed)
                && let Some(head) = head.take()
            {
                tracing::debug!(error = %e, "reused upstream connection closed before answering; sending the request once more on a new one");
                req = head.map(|()| empty());
                replayed = true;
                self.replays.inc();
                continue;
            }
            return Err(e.into());
        }
    }

    /// Sends an upgrade request on a connection of its own, run as a task until the upgrade
    /// completes (then the connection is the tunnel's).
    pub(crate) async fn send_upgrade(
        &self,
        base: &Uri,
        req: Request<Body>,
    ) -> Result<Response<Incoming>, BoxError> {
        let io = self.connector.dial(base).await?;
        let (mut send, conn) = http1::Builder::new().handshake(io).await?;
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "upstream upgrade connection closed");
            }
        });
        send.ready().await?;
        Ok(send.send_request(req).await?)
    }

    async fn connect(&self, base: &Uri) -> Result<Box<Driven>, BoxError> {
        let io = self.connector.dial(base).await?;
        let has_read = Arc::new(AtomicBool::new(false));
        let io = TokioIo::new(ReadFlaggingIo {
            io: TokioIo::new(io),
            has_read: has_read.clone(),
        });
        let (send, conn) = http1::Builder::new().handshake(io).await?;
        Ok(Box::new(Driven {
            send,
            conn: Some(conn),
            has_read,
        }))
    }

    fn take_idle(&self) -> Option<Box<Driven>> {
        let mut idle = self.lock();
        let now = Instant::now();
        while let Some(c) = idle.conns.pop() {
            if now.duration_since(c.since) < IDLE_TIMEOUT && c.conn.is_open() {
                return Some(c.conn);
            }
        }
        None
    }

    fn put(self: Arc<Self>, mut conn: Box<Driven>) {
        let mut idle = self.lock();
        if idle.conns.len() >= MAX_IDLE {
            return;
        }
        if let Some(watcher) = &idle.watcher {
            // Idle, the connection only looks for an EOF (or stray bytes): from now on its
            // arrival wakes the watcher.
            conn.drive(&mut Context::from_waker(watcher));
            if !conn.is_open() {
                return;
            }
        }
        idle.conns.push(IdleConn {
            conn,
            since: Instant::now(),
        });
        if !idle.watching
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            idle.watching = true;
            rt.spawn(watch(Arc::downgrade(&self)));
        }
    }
}

/// Drops idle connections as soon as their upstream closes them, and when they expire, until
/// the pool is gone. Woken by an idle connection's socket (an EOF) and by the oldest one's
/// expiry; an empty pool is looked at again after [`IDLE_TIMEOUT`] (to end once it is gone).
async fn watch(pool: Weak<H1Pool>) {
    let mut expiry = pin!(tokio::time::sleep(IDLE_TIMEOUT));
    poll_fn(|cx| {
        loop {
            let Some(pool) = pool.upgrade() else {
                return Poll::Ready(());
            };
            let mut idle = pool.lock();
            if !idle
                .watcher
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()))
            {
                idle.watcher = Some(cx.waker().clone());
            }
            let now = Instant::now();
            idle.conns.retain_mut(|c| {
                // Reads what arrived (an EOF closes the connection) and registers this task's
                // waker for what comes next.
                c.conn.drive(cx);
                c.conn.is_open() && now.duration_since(c.since) < IDLE_TIMEOUT
            });
            let next = idle.conns.first().map_or(now, |oldest| oldest.since) + IDLE_TIMEOUT;
            drop(idle);
            expiry.as_mut().reset(next.into());
            if expiry.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    })
    .await;
}

/// Whether a request may be sent twice: an idempotent method that Go's `isReplayable`
/// names, and no body (golang/go `src/net/http/request.go`, `(*Request).isReplayable`; its
/// `Idempotency-Key` exception is left out: mvproxy never sends a body twice).
fn is_replayable(req: &Request<Body>) -> bool {
    matches!(
        *req.method(),
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    ) && req.body().is_end_stream()
}

/// The method, URI, version and headers of `req`, to send it again (on HTTP/2 too).
pub(crate) fn head_of(req: &Request<Body>) -> Request<()> {
    let mut head = Request::new(());
    head.method_mut().clone_from(req.method());
    head.uri_mut().clone_from(req.uri());
    *head.version_mut() = req.version();
    head.headers_mut().clone_from(req.headers());
    head
}

impl AsyncRead for ReadFlaggingIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.has_read.store(true, Ordering::Relaxed);
        }
        polled
    }
}

crate::plumbing::write_through!(ReadFlaggingIo, io);

impl Driven {
    /// Lets the connection do its work: write the request and its body, read the response.
    fn drive(&mut self, cx: &mut Context<'_>) {
        if let Some(conn) = &mut self.conn
            && let Poll::Ready(result) = Pin::new(conn).poll(cx)
        {
            if let Err(e) = result {
                tracing::debug!(error = %e, "upstream connection closed");
            }
            self.conn = None;
        }
    }

    fn is_open(&self) -> bool {
        self.conn.is_some() && !self.send.is_closed()
    }
}

impl CheckedOutConn {
    /// Lets the connection read more of the response.
    pub(crate) fn drive(&mut self, cx: &mut Context<'_>) {
        if let Some(c) = &mut self.conn {
            c.drive(cx);
        }
    }

    /// The response body was read to its end: the connection may serve another request.
    pub(crate) fn finished(&mut self) {
        self.reusable = true;
    }
}

impl Drop for CheckedOutConn {
    fn drop(&mut self) {
        if !self.reusable {
            return;
        }
        if let (Some(c), Some(pool)) = (self.conn.take(), self.pool.upgrade())
            && c.is_open()
        {
            pool.put(c);
        }
    }
}

#[cfg(test)]
mod tests;
