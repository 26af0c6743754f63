//! Name resolution for upstream connections: the system resolver, its failures typed so that a
//! failed lookup is told apart from an upstream that failed.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::{GaiAddrs, GaiResolver, Name};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tower_service::Service;

use crate::plumbing::BoxError;

/// The connector of every upstream client: TCP (names looked up by [`Resolver`]), then TLS for
/// `https`, the whole of it within `--connect-timeout-seconds`. hyper-util's connector bounds
/// the TCP connect only; a server that accepts connections and then hangs (a stopped process:
/// its kernel still completes the TCP handshake) would hold a dial in the TLS handshake until
/// the request's response-header timeout, so the bound is over both, as Go's
/// `net/http.Transport` bounds each (`DialContext`'s timeout, `TLSHandshakeTimeout`).
#[derive(Clone)]
pub(crate) struct Connector {
    inner: HttpsConnector<HttpConnector<Resolver>>,
    timeout: Duration,
}

/// A connection made by [`Connector::dial`].
pub(crate) type Conn = MaybeHttpsStream<TokioIo<TcpStream>>;

/// No connection (TCP and TLS) within `--connect-timeout-seconds`.
#[derive(Debug, thiserror::Error)]
#[error("no connection within {}s (TCP connect and TLS handshake; --connect-timeout-seconds)", .0.as_secs())]
pub struct DialTimeout(Duration);

impl Connector {
    pub(crate) fn new(inner: HttpsConnector<HttpConnector<Resolver>>, timeout: Duration) -> Self {
        Self { inner, timeout }
    }

    /// A connection to `base`, within the connect timeout.
    pub(crate) async fn dial(&self, base: &Uri) -> Result<Conn, BoxError> {
        match tokio::time::timeout(self.timeout, self.inner.clone().call(base.clone())).await {
            Ok(conn) => conn,
            Err(_) => Err(DialTimeout(self.timeout).into()),
        }
    }
}

/// A failed name lookup: the upstream's address, not the upstream, is what failed.
/// [`Upstream`](super::Upstream)'s errors are told apart by finding this type in their source chain.
#[derive(Debug, thiserror::Error)]
#[error("{source}")]
pub struct ResolveError {
    /// The host name looked up.
    pub host: String,
    pub(crate) source: std::io::Error,
}

/// The system resolver (`getaddrinfo`, as hyper-util's default), its failures typed as
/// [`ResolveError`].
#[derive(Clone)]
pub(crate) struct Resolver(pub(super) GaiResolver);

type ResolveFuture = Pin<Box<dyn Future<Output = Result<GaiAddrs, ResolveError>> + Send>>;

impl tower_service::Service<Name> for Resolver {
    type Response = GaiAddrs;
    type Error = ResolveError;
    type Future = ResolveFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ResolveError>> {
        self.0.poll_ready(cx).map_err(|source| ResolveError {
            host: String::new(),
            source,
        })
    }

    fn call(&mut self, name: Name) -> ResolveFuture {
        let host = name.as_str().to_owned();
        let lookup = self.0.call(name);
        Box::pin(async move { lookup.await.map_err(|source| ResolveError { host, source }) })
    }
}
