//! The upstream client: sending a request to an upstream (the local API server or a peer) and
//! streaming back its answer.
//!
//! Bodies stream both ways, frame by frame, so a watch reaches the client as each event
//! arrives (hyper writes every frame as it comes, well inside upstream's 200 ms flush
//! interval). HTTP/1.1 upgrades (exec, attach, port-forward) become a byte tunnel. Hop-by-hop
//! headers are dropped as RFC 9110 §7.6.1 says; everything else, `Authorization` and
//! `Impersonate-*` included, passes as sent (identity headers are [`crate::identity`]'s). The
//! upstream's status, headers and body come back unchanged. Failures before a response arrives
//! become a [`ProxyError`] naming the upstream and the cause; there is no retry (one hop, as
//! upstream), but for the replay of a body-less `GET`, `HEAD`, `OPTIONS` or `TRACE` whose
//! reused HTTP/1.1 connection its upstream closed before answering, and of a body-less request
//! the upstream did not process on HTTP/2 (a `GOAWAY` above its stream, `REFUSED_STREAM`), once
//! each, as Go's transports do. A replay that fails too is answered as the first failure would
//! have been (a transport failure, `503`).
//!
//! Here: [`Upstream`] and its settings. Below it: `h1pool` and `h2pool` hold the connections
//! (and do the replays), `resolve` looks names up, `hop` strips hop-by-hop headers and splices
//! upgraded connections.

pub(crate) mod h1pool;
pub(crate) mod h2pool;
mod hop;
mod resolve;

use std::error::Error as StdError;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::uri::PathAndQuery;
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Limited};
use hyper_rustls::{FixedServerNameResolver, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::GaiResolver;
use prometheus_client::metrics::counter::Counter;

use crate::error::{ProxyError, TransportFailure};
use crate::limits::{BodyTooLarge, ClientBodyFailed};
use crate::plumbing::{Body, BoxError, ServerName, causes, empty, port_of_scheme};
use h1pool::{H1Pool, SendError};
use h2pool::{H2Pool, UpstreamBody};
use hop::tunnel;
pub use hop::{is_upgrade, strip_hop_by_hop};
pub(crate) use resolve::Connector;
use resolve::Resolver;
pub use resolve::{DialTimeout, ResolveError};

/// The loop-guard header upstream sets on the peer hop.
pub const PEER_PROXIED: &str = "x-kubernetes-peer-proxied";

/// Why an [`Upstream`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The configured TLS server name is not a DNS name or an IP address.
    #[error("server name {name:?}: {source}")]
    ServerName {
        /// The name given.
        name: String,
        /// Why it is not a DNS name or IP address.
        source: rustls::pki_types::InvalidDnsNameError,
    },
    /// The URL's host cannot be a `Host` header.
    #[error("{url}: the host is not a valid Host header")]
    Host {
        /// The upstream's URL.
        url: String,
    },
}

/// A failed request that was the client's fault, by the types in its source chain: its body
/// went over the limit (`413`) or could not be read (`400`). hyper reports a request body
/// that failed as a failed request; without this the upstream would be blamed.
fn client_fault(e: &(dyn StdError + 'static)) -> Option<ProxyError> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(too_large) = err.downcast_ref::<BodyTooLarge>() {
            return Some(ProxyError::BodyTooLarge {
                limit: too_large.limit,
            });
        }
        if let Some(failed) = err.downcast_ref::<ClientBodyFailed>() {
            return Some(ProxyError::ClientBody {
                cause: failed.cause.clone(),
            });
        }
        cur = err.source();
    }
    None
}

/// What kind of transport failure `e` is, by the types in its source chain.
fn transport_failure(e: &(dyn StdError + 'static)) -> TransportFailure {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err.is::<ResolveError>() {
            return TransportFailure::NameResolution;
        }
        cur = err.source();
    }
    TransportFailure::Other
}

/// How to reach one kind of upstream.
#[derive(Clone)]
pub struct ClientSettings {
    /// TLS for `https` URLs; `None` allows `http` only.
    pub tls: Option<rustls::ClientConfig>,
    /// SNI and verified name for TLS upstreams; `None` uses the URL's host.
    pub server_name: Option<String>,
    /// For a connection: the TCP connect and the TLS handshake.
    pub connect_timeout: Duration,
    /// `tls` does not verify certificates (`--insecure-skip-tls-verify`): every failure to
    /// reach the upstream logs a warning saying so.
    pub insecure_skip_verify: bool,
}

/// Where an upstream's pools count the requests they send a second time
/// (`mvproxy_upstream_replays_total`, one counter per protocol).
#[derive(Clone, Debug, Default)]
pub struct ReplayCounters {
    /// Replays over HTTP/1.1.
    pub http1: Counter,
    /// Replays over HTTP/2.
    pub http2: Counter,
}

/// One upstream: its name, its base URL and pooled connections: HTTP/2 when an `https`
/// upstream offers it (`crate::upstream::h2pool`), HTTP/1.1 otherwise and for upgrades
/// (`crate::upstream::h1pool`, connections driven by the request that uses them).
#[derive(Clone)]
pub struct Upstream {
    /// The server's name (label values, error messages).
    pub name: ServerName,
    /// `scheme://authority` of the upstream.
    pub base: Uri,
    /// The `Host` header of HTTP/1.1 requests: the base's host, and its port unless it is the
    /// scheme's default (as hyper-util's client wrote it).
    host: HeaderValue,
    h1: Arc<H1Pool>,
    h2: Option<Arc<H2Pool>>,
    response_header_timeout: Duration,
    insecure_skip_verify: bool,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("name", &self.name)
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// The identity mvproxy's own discovery reads run as: upstream's peer discovery runs as
/// `system:apiserver` (UID `system:apiserver`, group `system:authenticated`) and reaches the
/// peer as front-proxy headers (k8s.io/apiserver `pkg/util/peerproxy/peer_discovery.go`, through
/// `proxyRequestToDestinationAPIServer`). A real kube-apiserver refuses a request that presents
/// the front-proxy client certificate without `X-Remote-User` with `401` (the certificate is
/// not from its client CA, and requestheader authentication needs the user header), so without
/// these headers no discovery is read through `--proxy-client-cert-file`. A server that does not
/// trust the connection as a front proxy ignores them; discovery is readable by every
/// authenticated user (the `system:discovery` ClusterRole).
const DISCOVERY_USER: &str = "system:apiserver";
const DISCOVERY_GROUP: &str = "system:authenticated";

/// Sets the identity headers of mvproxy's own reads (discovery, OpenAPI).
pub(crate) fn discovery_identity(headers: &mut HeaderMap) {
    headers.insert("x-remote-user", HeaderValue::from_static(DISCOVERY_USER));
    headers.insert("x-remote-uid", HeaderValue::from_static(DISCOVERY_USER));
    headers.insert("x-remote-group", HeaderValue::from_static(DISCOVERY_GROUP));
}

impl Upstream {
    /// An upstream with its own connection pool, its replays counted nowhere.
    pub fn new(
        name: ServerName,
        base: Uri,
        settings: &ClientSettings,
        response_header_timeout: Duration,
    ) -> Result<Self, UpstreamError> {
        Self::with_replays(
            name,
            base,
            settings,
            response_header_timeout,
            ReplayCounters::default(),
        )
    }

    /// An upstream with its own connection pool, counting its replays in `replays`.
    pub fn with_replays(
        name: ServerName,
        base: Uri,
        settings: &ClientSettings,
        response_header_timeout: Duration,
        replays: ReplayCounters,
    ) -> Result<Self, UpstreamError> {
        let mut http = HttpConnector::new_with_resolver(Resolver(GaiResolver::new()));
        http.enforce_http(false);
        http.set_connect_timeout(Some(settings.connect_timeout));
        http.set_nodelay(true);
        // An empty trust store for http:// upstreams: config validation requires a CA file
        // for every https:// one, so this config never verifies anything.
        let tls = settings.tls.clone().unwrap_or_else(|| {
            rustls::ClientConfig::builder()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth()
        });
        // The name the upstream's certificate is checked against, parsed once for both pools.
        let sni = match &settings.server_name {
            Some(sni) => Some(
                rustls::pki_types::ServerName::try_from(sni.clone()).map_err(|source| {
                    UpstreamError::ServerName {
                        name: sni.clone(),
                        source,
                    }
                })?,
            ),
            None => None,
        };
        let builder = HttpsConnectorBuilder::new()
            .with_tls_config(tls.clone())
            .https_or_http();
        let builder = match &sni {
            Some(name) => {
                builder.with_server_name_resolver(FixedServerNameResolver::new(name.clone()))
            }
            None => builder,
        };
        let connector = Connector::new(
            builder.enable_http1().wrap_connector(http.clone()),
            settings.connect_timeout,
        );
        let h2 = if base.scheme_str() == Some("https") {
            let builder = HttpsConnectorBuilder::new()
                .with_tls_config(tls)
                .https_or_http();
            let builder = match sni {
                Some(name) => builder.with_server_name_resolver(FixedServerNameResolver::new(name)),
                None => builder,
            };
            // ALPN offers h2 then http/1.1; the server chooses.
            Some(Arc::new(H2Pool::new(
                Connector::new(
                    builder.enable_all_versions().wrap_connector(http),
                    settings.connect_timeout,
                ),
                replays.http2,
            )))
        } else {
            None
        };
        let insecure_skip_verify =
            settings.insecure_skip_verify && base.scheme_str() == Some("https");
        let host = host_header(&base)?;
        Ok(Self {
            name,
            base,
            host,
            h1: H1Pool::new(connector, replays.http1),
            h2,
            response_header_timeout,
            insecure_skip_verify,
        })
    }

    /// Forwards `req` (its path and query byte for byte) and returns the upstream's response.
    /// `peer_hop` adds the loop guard so the peer serves it locally.
    pub async fn forward<B>(
        &self,
        req: Request<B>,
        peer_hop: bool,
    ) -> Result<Response<Body>, ProxyError>
    where
        B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
        B::Error: Into<BoxError>,
    {
        self.try_forward(req, peer_hop).await.map_err(|f| f.error)
    }

    /// [`Upstream::forward`], and when the upstream could not be reached at all (nothing of
    /// the request was written) the request back, to send elsewhere.
    pub async fn try_forward<B>(
        &self,
        mut req: Request<B>,
        peer_hop: bool,
    ) -> Result<Response<Body>, Failed>
    where
        B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
        B::Error: Into<BoxError>,
    {
        let upgrade = is_upgrade(req.headers());
        let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
        let (mut parts, body) = req.into_parts();
        // Origin form, the path and query byte for byte (no parse: the client's is reused).
        parts.uri = match parts.uri.path_and_query() {
            Some(pq) => Uri::from(pq.clone()),
            None => Uri::from(PathAndQuery::from_static("/")),
        };
        parts.version = http::Version::HTTP_11;
        strip_hop_by_hop(&mut parts.headers, upgrade);
        parts.headers.remove(header::HOST);
        if peer_hop {
            parts
                .headers
                .insert(PEER_PROXIED, HeaderValue::from_static("true"));
        }
        let body = body.map_err(Into::into).boxed();
        let mut resp = self.send(Request::from_parts(parts, body), upgrade).await?;
        if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
            if let Some(client_upgrade) = client_upgrade {
                let upstream_upgrade = hyper::upgrade::on(&mut resp);
                tokio::spawn(tunnel(client_upgrade, upstream_upgrade));
            }
        } else {
            strip_hop_by_hop(resp.headers_mut(), false);
        }
        Ok(resp.map(|b| b.map_err(BoxError::from).boxed()))
    }

    /// GETs `path` with `accept` and collects at most `limit` bytes of body (discovery).
    pub async fn get(
        &self,
        path: &str,
        accept: &str,
        limit: usize,
    ) -> Result<(StatusCode, HeaderMap, Bytes), ProxyError> {
        let (parts, body) = self.get_response(path, accept).await?.into_parts();
        let body = self.collect(path, body, limit).await?;
        Ok((parts.status, parts.headers, body))
    }

    /// Sends mvproxy's own request `req` (its path and query, against this upstream).
    pub async fn request(
        &self,
        mut req: Request<Body>,
    ) -> Result<Response<UpstreamBody>, ProxyError> {
        *req.uri_mut() = Uri::from(
            req.uri()
                .path_and_query()
                .cloned()
                .unwrap_or_else(|| PathAndQuery::from_static("/")),
        );
        let upgrade = is_upgrade(req.headers());
        self.send(req, upgrade).await.map_err(|f| f.error)
    }

    /// GETs `path` with `headers`; the body is left streaming (a watch).
    pub async fn open(
        &self,
        path: &str,
        headers: HeaderMap,
    ) -> Result<Response<UpstreamBody>, ProxyError> {
        let mut req = Request::new(empty());
        *req.uri_mut() = path
            .parse()
            .map_err(|e: http::uri::InvalidUri| ProxyError::BadRequest(e.to_string()))?;
        *req.headers_mut() = headers;
        let upgrade = is_upgrade(req.headers());
        self.send(req, upgrade).await.map_err(|f| f.error)
    }

    /// Collects at most `limit` bytes of a response body from `path`.
    pub async fn collect(
        &self,
        path: &str,
        body: UpstreamBody,
        limit: usize,
    ) -> Result<Bytes, ProxyError> {
        Ok(Limited::new(body, limit)
            .collect()
            .await
            .map_err(|e| ProxyError::Transport {
                upstream: self.name.clone(),
                failure: TransportFailure::Other,
                cause: format!("reading {path}: {}", causes(e.as_ref())),
                written: false,
            })?
            .to_bytes())
    }

    /// GETs `path` with `accept`; the body is the caller's to read (and to bound).
    pub async fn get_response(
        &self,
        path: &str,
        accept: &str,
    ) -> Result<Response<UpstreamBody>, ProxyError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_str(accept).map_err(|e| ProxyError::BadRequest(e.to_string()))?,
        );
        discovery_identity(&mut headers);
        self.open(path, headers).await
    }

    /// `upgrade`: `req` asks for a protocol upgrade ([`is_upgrade`], said by the caller, which
    /// has looked already).
    async fn send(
        &self,
        req: Request<Body>,
        upgrade: bool,
    ) -> Result<Response<UpstreamBody>, Failed> {
        // A failure after some of it was handed over may leave it applied.
        let may_change = !is_safe(req.method());
        match tokio::time::timeout(
            self.response_header_timeout,
            self.send_on_pool(req, upgrade),
        )
        .await
        {
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(SendError { cause, unsent })) => {
                if let Some(client) = client_fault(cause.as_ref()) {
                    return Err(Failed {
                        error: client,
                        unsent: None,
                    });
                }
                if self.insecure_skip_verify {
                    tracing::warn!(upstream = %self.name, url = %self.base, "connection failed while TLS verification is off (--insecure-skip-tls-verify): this upstream's certificate is not checked");
                }
                Err(Failed {
                    error: ProxyError::Transport {
                        upstream: self.name.clone(),
                        failure: transport_failure(cause.as_ref()),
                        cause: causes(cause.as_ref()),
                        written: may_change && unsent.is_none(),
                    },
                    unsent,
                })
            }
            Err(_) => Err(Failed {
                error: ProxyError::Timeout {
                    upstream: self.name.clone(),
                    seconds: self.response_header_timeout.as_secs().max(1),
                    written: may_change,
                },
                unsent: None,
            }),
        }
    }

    /// HTTP/2 when the upstream speaks it and the request is no upgrade, else HTTP/1.1.
    /// `req` has an origin-form URI.
    async fn send_on_pool(
        &self,
        mut req: Request<Body>,
        upgrade: bool,
    ) -> Result<Response<UpstreamBody>, SendError> {
        if let Some(h2) = &self.h2
            && !h2.is_http1()
            && !upgrade
        {
            match h2.checkout(&self.base).await {
                Ok(Some(stream)) => {
                    *req.uri_mut() = self.absolute(req.uri())?;
                    return Ok(h2.send(&self.base, stream, req).await?);
                }
                Ok(None) => {}
                // No connection: nothing of the request was written.
                Err(cause) => {
                    return Err(SendError {
                        cause,
                        unsent: Some(req),
                    });
                }
            }
        }
        if !req.headers().contains_key(header::HOST) {
            req.headers_mut().insert(header::HOST, self.host.clone());
        }
        if upgrade {
            // Boxed, as the pools' dials: an upgrade's dial is kept out of every request's
            // future.
            return Ok(Box::pin(self.h1.send_upgrade(&self.base, req))
                .await?
                .map(UpstreamBody::from));
        }
        let (resp, conn) = self.h1.send(&self.base, req).await?;
        Ok(resp.map(|body| UpstreamBody::with_h1_conn(body, conn)))
    }

    /// Open HTTP/2 connections to this upstream (0 for HTTP/1.1 upstreams).
    pub async fn http2_connections(&self) -> usize {
        match &self.h2 {
            Some(h2) => h2.connections().await,
            None => 0,
        }
    }

    /// Calls `hung` with the cause whenever an HTTP/2 connection to this upstream is closed
    /// because its `PING` went unanswered (`crate::upstream::h2pool`), whatever was in
    /// flight on it. Set once.
    pub(crate) fn on_connection_hung(&self, hung: impl Fn(String) + Send + Sync + 'static) {
        if let Some(h2) = &self.h2 {
            h2.on_hung(Box::new(hung));
        }
    }

    /// The HTTP/2 pool (for tests).
    #[cfg(test)]
    pub(crate) fn h2_pool(&self) -> Option<&Arc<H2Pool>> {
        self.h2.as_ref()
    }

    /// `origin` (a path and query) against this upstream's scheme and authority (HTTP/2).
    fn absolute(&self, origin: &Uri) -> Result<Uri, http::uri::InvalidUriParts> {
        let mut parts = self.base.clone().into_parts();
        parts.path_and_query = origin.path_and_query().cloned();
        Uri::from_parts(parts)
    }

    /// Idle HTTP/1.1 connections to this upstream (for tests).
    pub fn http1_idle_connections(&self) -> usize {
        self.h1.idle()
    }
}

/// A failed attempt on one upstream: why, and the request when none of it reached the
/// upstream (it could not be connected to), so that the caller may send it to another.
#[derive(Debug)]
pub struct Failed {
    /// The failure, as the client would be answered.
    pub error: ProxyError,
    /// The request, unsent (its URI and headers as this upstream would have received them).
    pub unsent: Option<Request<Body>>,
}

/// Whether a request cannot change anything on the server: `GET`, `HEAD`, `OPTIONS`,
/// `TRACE` (RFC 9110 §9.2.1).
pub fn is_safe(method: &http::Method) -> bool {
    matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS | http::Method::TRACE
    )
}

/// The `Host` header for `base`: its host, with its port unless that is the scheme's default.
fn host_header(base: &Uri) -> Result<HeaderValue, UpstreamError> {
    let host = base.host().unwrap_or_default();
    let value = match base.port_u16() {
        Some(port) if port != port_of_scheme(base) => format!("{host}:{port}"),
        _ => host.to_owned(),
    };
    HeaderValue::from_str(&value).map_err(|_| UpstreamError::Host {
        url: base.to_string(),
    })
}

#[cfg(test)]
mod tests;
