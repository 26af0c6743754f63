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
//! [`HEADER_READ_TIMEOUT`] ([`FirstBytesDeadline`]: telling the protocol would wait forever), or
//! (HTTP/1.1) no complete request head within it is closed, so silent sockets cannot hold the
//! slots. An idle HTTP/2 connection is kept: clients (kubelets) hold one for hours.
//!
//! Here: the limits and the listener's HTTP servers (the head limit, the drain). Below:
//! `connections` admits or refuses a connection, `protocol` tells HTTP/1.1 from HTTP/2,
//! `first_bytes` closes a connection that stays silent, `body` counts and refuses request
//! bodies, `drain` waits for the drain signal at no cost per poll.

mod body;
mod connections;
mod drain;
mod first_bytes;
mod protocol;

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;

pub use body::{
    BodyLimit, BodyTooLarge, ClientBodyFailed, DRAIN_BYTES, LimitedBody,
    REFUSED_BODY_DRAIN_TIMEOUT, limit_body,
};
pub use connections::Connections;
pub use first_bytes::FirstBytesDeadline;
pub use protocol::{Detected, FirstBytes, Protocol, detect};

use crate::plumbing::Body;

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

/// Polls a hyper server connection to its end in place (the connections are `Unpin`: no copy
/// of it is made), closing it gracefully once `drain` fires ([`drain::Drain`]: looked at again
/// only once fired). A macro: the two connection types share no trait, and a function generic
/// over them fails the compiler's `Send` proof of the task that runs it.
macro_rules! until_drained {
    ($conn:expr, $drain:expr) => {{
        let mut conn = $conn;
        let drain = $drain;
        async move {
            // Biased: the connection first, and no random draw at each poll.
            tokio::select! {
                biased;
                done = &mut conn => return done,
                () = drain::Drain::new(drain) => std::pin::Pin::new(&mut conn).graceful_shutdown(),
            }
            (&mut conn).await
        }
    }};
}

/// hyper's HTTP/1.1 and HTTP/2 servers for the proxy listener's connections, with the
/// request-head limits applied. Connections are told apart by [`detect`] rather than by
/// hyper-util's `auto` builder (`limits/protocol.rs` says why).
#[derive(Clone)]
pub struct HttpServer {
    http1: http1::Builder,
    http2: http2::Builder<TokioExecutor>,
}

impl HttpServer {
    /// The servers for `limits`.
    pub fn new(limits: &Limits) -> Self {
        let head = limits.max_request_header_bytes;
        let mut http1 = http1::Builder::new();
        http1
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT)
            // A request head must fit in the read buffer to be parsed at all; hyper answers 431
            // when the buffer is full and the head still incomplete. (hyper's own default is
            // about 400 KiB; it refuses less than 8 KiB, as config validation does.)
            .max_buf_size(head.max(MIN_REQUEST_HEADER_BYTES));
        let mut http2 = http2::Builder::new(TokioExecutor::new());
        http2.max_header_list_size(u32::try_from(head).unwrap_or(u32::MAX));
        Self { http1, http2 }
    }

    /// Serves `io` over HTTP/1.1 (upgrades allowed: `exec`, `attach`, `port-forward`) until
    /// it closes, or, once `drain` fires, until the request in flight has its response.
    pub fn http1<'a, I, S>(
        &self,
        io: I,
        service: S,
        drain: &'a CancellationToken,
    ) -> impl Future<Output = hyper::Result<()>> + Send + 'a
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        S: ClientService,
    {
        let conn = self.http1.serve_connection(TokioIo::new(io), service);
        until_drained!(conn.with_upgrades(), drain)
    }

    /// Serves `io` over HTTP/2 until it closes, or, once `drain` fires, sends `GOAWAY` and
    /// serves the streams already open.
    pub fn http2<'a, I, S>(
        &self,
        io: I,
        service: S,
        drain: &'a CancellationToken,
    ) -> impl Future<Output = hyper::Result<()>> + Send + 'a
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        S: ClientService,
    {
        until_drained!(
            self.http2.serve_connection(TokioIo::new(io), service),
            drain
        )
    }
}

/// The service of a client connection, as [`HttpServer`] takes it.
pub trait ClientService:
    hyper::service::Service<
        Request<Incoming>,
        Response = Response<Body>,
        Error = Infallible,
        Future: Send + 'static,
    > + Send
    + 'static
{
}

impl<S> ClientService for S where
    S: hyper::service::Service<
            Request<Incoming>,
            Response = Response<Body>,
            Error = Infallible,
            Future: Send + 'static,
        > + Send
        + 'static
{
}

#[cfg(test)]
mod tests;
