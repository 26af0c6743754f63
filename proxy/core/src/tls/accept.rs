//! Accepting a TLS connection on the proxy listener, within a bounded time.
//!
//! A client that connects and never completes a handshake would otherwise hold a connection
//! slot (and a task) forever; [`HANDSHAKE_TIMEOUT`] is client-go's own `TLSHandshakeTimeout`,
//! so no Kubernetes client waits longer than that anyway. A client that speaks plain HTTP to
//! the TLS listener (`http://` instead of `https://`) gets what kube-apiserver (Go's
//! `net/http`) answers it: a `400` saying so, here as a `Status`, instead of a TLS alert it
//! cannot read. A TLS record starts with byte `0x16`; an HTTP request with a method name in
//! capitals.

use std::convert::Infallible;
use std::time::Duration;

use http::{HeaderValue, Request, Response, header};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::error::ProxyError;
use crate::plumbing::{Body, full};

/// Longest wait for a client's TLS handshake (client-go's `TLSHandshakeTimeout`).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a connection did not become a TLS stream.
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    #[error("no TLS handshake within {HANDSHAKE_TIMEOUT:?}")]
    /// The client sent nothing in time.
    Timeout,
    #[error("plain HTTP on the TLS listener (answered 400)")]
    /// The client spoke plain HTTP.
    PlainHttp,
    #[error("TLS handshake failed: {0}")]
    /// The handshake failed.
    Handshake(std::io::Error),
}

/// The TLS stream of `stream`, or why not (a plain-HTTP client has been answered).
pub async fn accept(
    acceptor: &TlsAcceptor,
    stream: TcpStream,
) -> Result<TlsStream<TcpStream>, AcceptError> {
    let handshake = async {
        let mut first = [0u8; 1];
        let n = stream
            .peek(&mut first)
            .await
            .map_err(AcceptError::Handshake)?;
        if n == 1 && first[0].is_ascii_uppercase() {
            answer_plain_http(stream).await;
            return Err(AcceptError::PlainHttp);
        }
        acceptor
            .accept(stream)
            .await
            .map_err(AcceptError::Handshake)
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake)
        .await
        .map_err(|_| AcceptError::Timeout)?
}

/// Reads the plain-HTTP request and answers it with a `400` `Status`, then closes.
async fn answer_plain_http(stream: TcpStream) {
    let service = hyper::service::service_fn(|_req: Request<Incoming>| async {
        Ok::<_, Infallible>(plain_http_response())
    });
    let mut http1 = hyper::server::conn::http1::Builder::new();
    http1.keep_alive(false);
    if let Err(e) = http1.serve_connection(TokioIo::new(stream), service).await {
        tracing::debug!(error = %e, "plain HTTP on the TLS listener");
    }
}

fn plain_http_response() -> Response<Body> {
    let mut resp =
        ProxyError::BadRequest("client sent an HTTP request to an HTTPS server".to_owned())
            .to_response()
            .map(full);
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}
