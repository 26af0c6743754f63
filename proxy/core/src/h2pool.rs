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

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, Uri};
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http2;
use hyper_util::client::legacy::connect::Connection;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tower_service::Service;

use crate::forward::{Body, BoxError, Connector};
use crate::h1pool::Lease;

/// Requests in flight on one upstream connection before another is opened.
pub(crate) const MAX_STREAMS: usize = 100;

/// The HTTP/2 connections to one upstream.
pub(crate) struct H2Pool {
    connector: Connector,
    conns: tokio::sync::Mutex<Vec<Conn>>,
    /// The upstream's handshake chose HTTP/1.1.
    no_h2: AtomicBool,
}

struct Conn {
    send: http2::SendRequest<Body>,
    streams: Arc<AtomicUsize>,
}

/// A stream reserved on a connection; released when the response body (or this) is dropped.
pub(crate) struct Stream {
    send: http2::SendRequest<Body>,
    guard: StreamGuard,
}

struct StreamGuard(Arc<AtomicUsize>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
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
    pub(crate) fn new(connector: Connector) -> Self {
        Self {
            connector,
            conns: tokio::sync::Mutex::new(Vec::new()),
            no_h2: AtomicBool::new(false),
        }
    }

    /// Whether the upstream is known not to speak HTTP/2.
    pub(crate) fn is_http1(&self) -> bool {
        self.no_h2.load(Ordering::Relaxed)
    }

    /// Open connections (for tests and the watch-scale measurement).
    pub(crate) async fn connections(&self) -> usize {
        let mut conns = self.conns.lock().await;
        conns.retain(|c| !c.send.is_closed());
        conns.len()
    }

    /// A stream on a connection with room, connecting if none has; `Ok(None)` when the
    /// upstream chose HTTP/1.1.
    pub(crate) async fn checkout(&self, base: &Uri) -> Result<Option<Stream>, BoxError> {
        let mut conns = self.conns.lock().await;
        conns.retain(|c| !c.send.is_closed());
        if let Some(c) = conns
            .iter()
            .find(|c| c.streams.load(Ordering::Acquire) < MAX_STREAMS)
        {
            return Ok(Some(reserve(c)));
        }
        if self.is_http1() {
            return Ok(None);
        }
        // Connecting under the lock: requests arriving meanwhile wait for this connection
        // rather than each opening its own.
        let io = self.connector.clone().call(base.clone()).await?;
        if !io.connected().is_negotiated_h2() {
            self.no_h2.store(true, Ordering::Relaxed);
            return Ok(None);
        }
        let (send, conn) = http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .handshake(io)
            .await?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "upstream HTTP/2 connection closed");
            }
        });
        let c = Conn {
            send,
            streams: Arc::new(AtomicUsize::new(0)),
        };
        let stream = reserve(&c);
        conns.push(c);
        Ok(Some(stream))
    }
}

fn reserve(c: &Conn) -> Stream {
    c.streams.fetch_add(1, Ordering::AcqRel);
    Stream {
        send: c.send.clone(),
        guard: StreamGuard(c.streams.clone()),
    }
}

impl Stream {
    /// Sends `req` (an absolute URI) on this stream.
    pub(crate) async fn send(
        mut self,
        mut req: Request<Body>,
    ) -> Result<Response<UpstreamBody>, hyper::Error> {
        *req.version_mut() = http::Version::HTTP_2;
        self.send.ready().await?;
        let resp = self.send.send_request(req).await?;
        Ok(resp.map(|inner| UpstreamBody {
            inner,
            held: Held::Stream { _guard: self.guard },
        }))
    }
}

/// An upstream response body. Over HTTP/2 it holds its stream's place until dropped; over
/// HTTP/1.1 it holds its connection and drives it as the body is read ([`crate::h1pool`]).
pub struct UpstreamBody {
    inner: Incoming,
    held: Held,
}

enum Held {
    Nothing,
    Stream { _guard: StreamGuard },
    Conn(Lease),
}

impl From<Incoming> for UpstreamBody {
    fn from(inner: Incoming) -> Self {
        Self {
            inner,
            held: Held::Nothing,
        }
    }
}

impl UpstreamBody {
    /// A body read over a pooled HTTP/1.1 connection.
    pub(crate) fn leased(inner: Incoming, lease: Lease) -> Self {
        let mut body = Self {
            inner,
            held: Held::Conn(lease),
        };
        body.check_end();
        body
    }

    fn check_end(&mut self) {
        if let Held::Conn(lease) = &mut self.held
            && self.inner.is_end_stream()
        {
            lease.finished();
        }
    }
}

impl HttpBody for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let mut polled = Pin::new(&mut this.inner).poll_frame(cx);
        if polled.is_pending()
            && let Held::Conn(lease) = &mut this.held
        {
            // Nobody else reads this connection: read it, then look again.
            lease.drive(cx);
            polled = Pin::new(&mut this.inner).poll_frame(cx);
        }
        match &polled {
            Poll::Ready(None) => {
                if let Held::Conn(lease) = &mut this.held {
                    lease.finished();
                }
            }
            Poll::Ready(Some(Ok(_))) => this.check_end(),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
