//! The connection limit: admitting a connection while there is a slot, answering `503` with
//! `Retry-After` (within bounds) when there is none.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http::{HeaderValue, Request, Response, header};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;

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
    let io = TokioIo::new(FirstBytesDeadline::new(io, HEADER_READ_TIMEOUT));
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
