//! Name resolution for upstream connections: the system resolver, its failures typed so that a
//! failed lookup is told apart from an upstream that failed.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::{GaiAddrs, GaiResolver, Name};

/// The connector of every upstream client.
pub(crate) type Connector = HttpsConnector<HttpConnector<Resolver>>;

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
