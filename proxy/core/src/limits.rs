//! Limits that keep the proxy standing when a client (or a peer) misbehaves.
//!
//! mvproxy sits in front of every client of the control plane, so one client must not be able
//! to exhaust it for the others: not with a huge request head, a huge body, an endless stream
//! of connections, or a peer that sends an endless discovery document. Each limit is a flag
//! whose default follows kube-apiserver where it has one, so that mvproxy refuses nothing the
//! API server behind it would accept:
//!
//! | limit | default | over it |
//! | --- | --- | --- |
//! | request head (`--max-request-header-bytes`) | 1 MiB, kube-apiserver's `MaxHeaderBytes` | `431`, from the HTTP layer (below) |
//! | request body (`--max-request-body-bytes`) | 3 MiB, kube-apiserver's `MaxRequestBodyBytes` | `413` `Status` |
//! | discovery document (`--max-discovery-document-bytes`) | 16 MiB | the fetch fails, the last good view stays |
//! | open client connections (`--max-connections`) | 4096 | `503` `Status`, then the connection is closed |
//!
//! The request head is checked by hyper while it parses, before any handler runs, as Go's
//! `net/http` does for kube-apiserver: over HTTP/1.1 the head must fit in hyper's read buffer,
//! sized to the limit, and when it does not hyper answers `431 Request Header Fields Too
//! Large` itself (no body) and closes the connection (also for more than 100 header fields,
//! hyper's fixed count); over HTTP/2 the limit is announced
//! as `SETTINGS_MAX_HEADER_LIST_SIZE` (hyper's own default would be 16 KiB), so conforming
//! clients refuse locally, and a header block over it gets `431` from the h2 layer. Neither
//! can carry a `Status` body: the request is not parsed yet.
//!
//! The body limit counts bytes as they stream (a body is never buffered) and also refuses up
//! front by `Content-Length`; the rest of a refused HTTP/1.1 body is read and discarded, within
//! bounds, so the client gets to read its `413`. It does not apply to the `proxy` subresource, which
//! kube-apiserver streams to its backend without a limit either. Watches and upgrades carry no
//! request body and are not affected; no limit here is a timer on an established response.
//!
//! Over the connection limit, a new connection is accepted and answered `503` with
//! `Retry-After`, and closed. The alternative, leaving it in the kernel's accept queue, makes a
//! client hang with no answer until its own timeout (kubectl has none by default), while
//! client-go retries a `503` with `Retry-After` by itself. Refusing costs a TLS handshake and
//! one request, bounded by [`MAX_REFUSING`] refusals at once and [`REFUSE_TIMEOUT`] each;
//! beyond that a connection is closed at once. A connection that completes no TLS handshake
//! within [`crate::tls::accept::HANDSHAKE_TIMEOUT`], sends nothing within
//! [`HEADER_READ_TIMEOUT`] ([`FirstBytes`]: hyper's protocol detection would wait forever), or
//! (HTTP/1.1) no complete request head within it is closed, so silent sockets cannot hold the
//! slots. An idle HTTP/2 connection is kept: clients (kubelets) hold one for hours.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, header};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::classify::RequestInfo;
use crate::error::ProxyError;
use crate::plumbing::{Body, full};

/// kube-apiserver's `MaxHeaderBytes` (`1 << 20`).
pub const DEFAULT_MAX_REQUEST_HEADER_BYTES: usize = 1 << 20;
/// The smallest head limit: hyper's smallest read buffer.
pub const MIN_REQUEST_HEADER_BYTES: usize = 8192;
/// kube-apiserver's `MaxRequestBodyBytes`: 3 MiB, twice etcd's default request limit, so a
/// bigger create, update or patch would be refused by the API server anyway.
pub const DEFAULT_MAX_REQUEST_BODY_BYTES: u64 = 3 << 20;
/// Room for the largest clusters: 1.34's `/apis` is about 60 KiB, each CRD group adds a few
/// hundred bytes.
pub const DEFAULT_MAX_DISCOVERY_DOCUMENT_BYTES: usize = 16 << 20;
/// Several times what the clients of one API server open in a staging cluster (each kubelet
/// and kube-proxy holds one or two HTTP/2 connections).
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;

/// How long an HTTP/1.1 connection may take to send a request head, counted from when the
/// server starts waiting for one (so an idle keep-alive connection is closed after it too).
/// hyper's own default, close to kube-apiserver's `ReadHeaderTimeout` of 32 s.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections being refused at once (each costs a handshake); more are closed unanswered.
pub const MAX_REFUSING: usize = 64;
/// Longest a refused connection is kept: handshake, one request, the `503`.
pub const REFUSE_TIMEOUT: Duration = Duration::from_secs(10);

/// The limits, validated (see [`crate::config`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `--max-request-header-bytes`.
    pub max_request_header_bytes: usize,
    /// `--max-request-body-bytes`.
    pub max_request_body_bytes: u64,
    /// `--max-discovery-document-bytes`.
    pub max_discovery_document_bytes: usize,
    /// `--max-connections`.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_request_header_bytes: DEFAULT_MAX_REQUEST_HEADER_BYTES,
            max_request_body_bytes: DEFAULT_MAX_REQUEST_BODY_BYTES,
            max_discovery_document_bytes: DEFAULT_MAX_DISCOVERY_DOCUMENT_BYTES,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// The connection builder of the proxy listener, with the request-head limits applied.
pub fn http_builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    let head = limits.max_request_header_bytes;
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        // A request head must fit in the read buffer to be parsed at all; hyper answers 431
        // when the buffer is full and the head still incomplete. (hyper's own default is
        // about 400 KiB; it refuses less than 8 KiB, as config validation does.)
        .max_buf_size(head.max(MIN_REQUEST_HEADER_BYTES));
    builder
        .http2()
        .max_header_list_size(u32::try_from(head).unwrap_or(u32::MAX));
    builder
}

// === connections ===

/// The open-connection count of the proxy listener.
pub struct Connections {
    limit: usize,
    open: Arc<Semaphore>,
    refusing: Arc<Semaphore>,
    /// Set while at the limit, so the warning is logged once per episode.
    full: AtomicBool,
}

impl Connections {
    /// At most `limit` connections served at once.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            open: Arc::new(Semaphore::new(limit)),
            refusing: Arc::new(Semaphore::new(MAX_REFUSING)),
            full: AtomicBool::new(false),
        }
    }

    /// A slot for a new connection, held until it is dropped; `None` when all are taken, in
    /// which case the connection is refused in the background (or closed, if too many are).
    pub fn admit(
        &self,
        stream: TcpStream,
        tls: Option<&TlsAcceptor>,
        builder: &auto::Builder<TokioExecutor>,
    ) -> Option<(TcpStream, OwnedSemaphorePermit)> {
        if let Ok(permit) = self.open.clone().try_acquire_owned() {
            self.full.store(false, Ordering::Relaxed);
            return Some((stream, permit));
        }
        if !self.full.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                limit = self.limit,
                "connection limit reached (--max-connections): new connections get 503"
            );
        }
        if let Ok(permit) = self.refusing.clone().try_acquire_owned() {
            tokio::spawn(refuse(
                stream,
                tls.cloned(),
                builder.clone(),
                self.limit,
                permit,
            ));
        }
        None
    }
}

/// Answers every request of `stream` with `503` and closes it after the first.
async fn refuse(
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    builder: auto::Builder<TokioExecutor>,
    limit: usize,
    _slot: OwnedSemaphorePermit,
) {
    let refused = async move {
        match tls {
            Some(acceptor) => match crate::tls::accept::accept(&acceptor, stream).await {
                Ok(s) => serve_refusal(s, &builder, limit).await,
                Err(e) => tracing::debug!(error = %e, "refused connection: TLS handshake failed"),
            },
            None => serve_refusal(stream, &builder, limit).await,
        }
    };
    let _ = tokio::time::timeout(REFUSE_TIMEOUT, refused).await;
}

async fn serve_refusal<I>(io: I, builder: &auto::Builder<TokioExecutor>, limit: usize)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let answered = Arc::new(Notify::new());
    let service = {
        let answered = answered.clone();
        hyper::service::service_fn(move |req: Request<Incoming>| {
            answered.notify_one();
            let resp = too_many_connections(&req, limit);
            async move { Ok::<_, Infallible>(resp) }
        })
    };
    let io = TokioIo::new(FirstBytes::new(io, HEADER_READ_TIMEOUT));
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        () = answered.notified() => {}
    }
    // The 503 is on its way: let it finish, then close (GOAWAY for HTTP/2).
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

fn too_many_connections(req: &Request<Incoming>, limit: usize) -> Response<Body> {
    let mut resp = ProxyError::TooManyConnections { limit }
        .to_response()
        .map(full);
    if req.version() < http::Version::HTTP_2 {
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

// === silent connections ===

/// Bytes after which hyper has told HTTP/2's preface from an HTTP/1.1 request.
const PREFACE_BYTES: usize = 24;

/// A connection that fails its reads once `timeout` passes before its first
/// `PREFACE_BYTES` arrive. hyper's automatic protocol detection reads them with no time
/// limit, and its HTTP/1.1 header timeout only starts after it; this closes the gap.
pub struct FirstBytes<I> {
    inner: I,
    read: usize,
    timeout: Duration,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<I> FirstBytes<I> {
    /// `inner`, whose first bytes must arrive within `timeout` (counted from the first read).
    pub fn new(inner: I, timeout: Duration) -> Self {
        Self {
            inner,
            read: 0,
            timeout,
            deadline: None,
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for FirstBytes<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if this.read >= PREFACE_BYTES {
            return polled;
        }
        this.read += buf.filled().len() - before;
        if polled.is_ready() || this.read >= PREFACE_BYTES {
            if this.read >= PREFACE_BYTES {
                this.deadline = None;
            }
            return polled;
        }
        let timeout = this.timeout;
        let deadline = this
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no request within {timeout:?}"),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for FirstBytes<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

// === request bodies ===

/// Most of a refused HTTP/1.1 body read and thrown away (see `drain`).
pub const DRAIN_BYTES: u64 = 64 << 20;
/// Longest time spent on that.
pub const REFUSED_BODY_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads and discards the rest of a refused HTTP/1.1 request body, so a client still writing
/// it can finish and then read the `413`: if the connection closed under it (hyper closes
/// one whose request body was not read), it would see a write error instead of the answer.
/// Bounded by [`DRAIN_BYTES`] and [`REFUSED_BODY_DRAIN_TIMEOUT`], so refusing costs no more than that.
/// HTTP/2 needs none of this: the stream is reset and the connection goes on.
fn drain<B>(mut body: B, version: http::Version)
where
    B: HttpBody<Data = Bytes> + Send + Unpin + 'static,
{
    if version >= http::Version::HTTP_2 {
        return;
    }
    tokio::spawn(async move {
        let mut left = DRAIN_BYTES;
        let _ = tokio::time::timeout(REFUSED_BODY_DRAIN_TIMEOUT, async {
            while let Some(Ok(frame)) = body.frame().await {
                let len = frame.data_ref().map_or(0, |d| d.len() as u64);
                match left.checked_sub(len) {
                    Some(l) => left = l,
                    None => return,
                }
            }
        })
        .await;
    });
}

/// A request body that fails once more than its limit has streamed through, and that tells
/// a failure to read the client's body apart from an upstream's (see [`BodyLimit::explain`]).
///
/// Generic over the client's body (hyper's [`Incoming`] on the listener), so the request path
/// can be driven without a socket.
#[derive(Debug)]
pub struct LimitedBody<B = Incoming> {
    /// `None` once the limit was passed (the rest is being drained).
    inner: Option<B>,
    version: http::Version,
    /// Bytes still allowed.
    remaining: u64,
    limit: u64,
    failed: Arc<OnceLock<BodyFailure>>,
    /// The last read of the client's body found nothing yet: the body is waiting on the
    /// client, not on the upstream (which reads it only as fast as it takes it).
    waiting_on_client: Arc<AtomicBool>,
}

/// How a client's request body failed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum BodyFailure {
    TooLarge,
    Read(String),
}

/// The error a [`LimitedBody`] fails with when the body goes over its limit.
#[derive(Debug, thiserror::Error)]
#[error("the request body is larger than {limit} bytes")]
pub struct BodyTooLarge {
    /// `--max-request-body-bytes`.
    pub limit: u64,
}

/// The error a [`LimitedBody`] fails with when reading the client's body failed: a malformed
/// chunk, a connection closed or an HTTP/2 stream reset before the body's end.
#[derive(Debug, thiserror::Error)]
#[error("reading the client's request body: {cause}")]
pub struct ClientBodyFailed {
    /// What failed, in words.
    pub cause: String,
}

impl<B> HttpBody for LimitedBody<B>
where
    B: HttpBody<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<crate::plumbing::BoxError>,
{
    type Data = Bytes;
    type Error = crate::plumbing::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(Some(Err(Box::new(BodyTooLarge { limit: this.limit }))));
        };
        let polled = Pin::new(inner).poll_frame(cx);
        this.waiting_on_client
            .store(polled.is_pending(), Ordering::Relaxed);
        match polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let len = data.len() as u64;
                    if len > this.remaining {
                        let _ = this.failed.set(BodyFailure::TooLarge);
                        if let Some(rest) = this.inner.take() {
                            drain(rest, this.version);
                        }
                        return Poll::Ready(Some(Err(Box::new(BodyTooLarge {
                            limit: this.limit,
                        }))));
                    }
                    this.remaining -= len;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                let e: crate::plumbing::BoxError = e.into();
                let cause = crate::plumbing::causes(&*e);
                let _ = this.failed.set(BodyFailure::Read(cause.clone()));
                Poll::Ready(Some(Err(Box::new(ClientBodyFailed { cause }))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), HttpBody::size_hint)
    }
}

/// Tells, after the request was forwarded, whether its body failed on the client's side.
#[derive(Debug)]
pub struct BodyLimit {
    limit: u64,
    failed: Arc<OnceLock<BodyFailure>>,
    waiting_on_client: Arc<AtomicBool>,
}

impl BodyLimit {
    /// A failure to forward while the client's body had failed is the client's: the `413` of
    /// a body over the limit, or the `400` of a body that could not be read, whatever the
    /// upstream connection reported after it was aborted. So is a response-header timeout
    /// that passed while the body was still waiting for the client's next bytes (a client
    /// sending slowly, or stopped mid-body): the upstream cannot answer a request it has not
    /// received, and a `504` would make client-go send the same body again. A timeout while
    /// the body had all arrived, or was waiting for the upstream to take more, stays the
    /// upstream's `504`.
    pub fn explain<T>(&self, result: Result<T, ProxyError>) -> Result<T, ProxyError> {
        if let Err(ProxyError::Timeout { seconds, .. }) = &result
            && self.failed.get().is_none()
            && self.waiting_on_client.load(Ordering::Relaxed)
        {
            return Err(ProxyError::ClientBody {
                cause: format!(
                    "it had not all arrived after {seconds}s (--response-header-timeout-seconds)"
                ),
            });
        }
        match (result, self.failed.get()) {
            (Err(_), Some(BodyFailure::TooLarge)) => {
                Err(ProxyError::BodyTooLarge { limit: self.limit })
            }
            (Err(_), Some(BodyFailure::Read(cause))) => Err(ProxyError::ClientBody {
                cause: cause.clone(),
            }),
            (other, _) => other,
        }
    }
}

/// Puts the body limit on `req`: refused at once when its `Content-Length` is over `limit`,
/// else counted as it streams. The `proxy` subresource is not limited (see the module docs).
pub fn limit_body<B>(
    req: Request<B>,
    info: &RequestInfo,
    limit: u64,
) -> Result<(Request<LimitedBody<B>>, BodyLimit), ProxyError>
where
    B: HttpBody<Data = Bytes> + Send + Unpin + 'static,
{
    let limit = match info {
        RequestInfo::Resource(r) if r.subresource.as_deref() == Some("proxy") => u64::MAX,
        _ => limit,
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let version = req.version();
    if declared.is_some_and(|n| n > limit) {
        drain(req.into_body(), version);
        return Err(ProxyError::BodyTooLarge { limit });
    }
    let failed = Arc::new(OnceLock::new());
    let waiting_on_client = Arc::new(AtomicBool::new(false));
    let req = req.map(|inner| LimitedBody {
        inner: Some(inner),
        version,
        remaining: limit,
        limit,
        failed: failed.clone(),
        waiting_on_client: waiting_on_client.clone(),
    });
    Ok((
        req,
        BodyLimit {
            limit,
            failed,
            waiting_on_client,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::channel::Channel;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
        let mut silent = FirstBytes::new(server, timeout);
        let mut buf = [0u8; 64];
        let e = tokio::time::timeout(bound, silent.read(&mut buf))
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        drop(client);

        // a few bytes are not enough to tell the protocol: still bounded
        let (mut client, server) = tokio::io::duplex(1024);
        let mut slow = FirstBytes::new(server, timeout);
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
        let mut talking = FirstBytes::new(server, timeout);
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
}
