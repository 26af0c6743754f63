//! The connection limit: admitting a connection while there is a slot, answering `503` with
//! `Retry-After` (within bounds) when there is none.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http::{HeaderValue, Request, Response, header};
use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::error::ProxyError;
use crate::plumbing::{Body, full};

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
        http: &HttpServer,
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
                http.clone(),
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
    http: HttpServer,
    limit: usize,
    _slot: OwnedSemaphorePermit,
) {
    let refused = async move {
        match tls {
            Some(acceptor) => match crate::tls::accept::accept(&acceptor, stream).await {
                Ok(s) => serve_refusal(s, &http, limit).await,
                Err(e) => tracing::debug!(error = %e, "refused connection: TLS handshake failed"),
            },
            None => serve_refusal(stream, &http, limit).await,
        }
    };
    let _ = tokio::time::timeout(REFUSE_TIMEOUT, refused).await;
}

async fn serve_refusal<I>(io: I, http: &HttpServer, limit: usize)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // Cancelled by the first request: its 503 is on its way, then the connection closes
    // (GOAWAY for HTTP/2).
    let answered = CancellationToken::new();
    let service = {
        let answered = answered.clone();
        hyper::service::service_fn(move |req: Request<Incoming>| {
            answered.cancel();
            let resp = too_many_connections(&req, limit);
            async move { Ok::<_, Infallible>(resp) }
        })
    };
    let mut io = FirstBytesDeadline::new(io, HEADER_READ_TIMEOUT);
    let Ok(first) = detect(&mut io, &answered).await else {
        return;
    };
    let _ = match first.protocol {
        Protocol::Http1 => {
            http.http1(Detected::new(first, io), service, &answered)
                .await
        }
        Protocol::Http2 => {
            http.http2(Detected::new(first, io), service, &answered)
                .await
        }
    };
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
