//! The proxy listener: one request's path from arrival to response.
//!
//! [`handle`] is the whole story, in order: classify the path, look up the snapshot and decide
//! where it goes, forward it (or answer it: merged discovery, or an error `Status`), then
//! record what happened. [`serve`] accepts connections (plain or TLS, HTTP/1.1 with upgrades
//! and HTTP/2) within the [`crate::limits`], and drains them on shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap};
use http::uri::PathAndQuery;
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use mvproxy_telemetry::metrics::{
    Metrics, PeerErrorLabels, RerouteLabels, TraceLabels, TypeLabels,
};
use mvproxy_telemetry::trace::{RequestSpan, Tracer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::either::Either;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::classify::{DiscoveryPath, RequestInfo, classify};
use crate::discovery::negotiate::{DiscoveryFormat, negotiate};
use crate::discovery::{Cache, Snapshot};
use crate::error::ProxyError;
use crate::identity::{Authenticator, ClientIdentity};
use crate::limits::{self, LimitedBody, Limits, Protocol};
use crate::plumbing::ServerName;
use crate::plumbing::{Body, BoxError, full};
use crate::route::{LocalReason, Route, decide};
use crate::skew::SkewClients;
use crate::spans;
use crate::upstream::Upstream;
use crate::upstream::h1pool::head_of;
use crate::upstream::{Failed, is_safe};
use crate::watch_end::{Framing, WatchBody};

/// A client's request body as [`handle`] takes it: hyper's [`Incoming`](hyper::body::Incoming) on the listener.
pub(crate) trait ClientBody:
    http_body::Body<Data = Bytes> + Send + Sync + Unpin + 'static
{
}

impl<B> ClientBody for B where B: http_body::Body<Data = Bytes> + Send + Sync + Unpin + 'static {}

/// What every request needs: the upstreams, the discovery cache and the metric handles.
pub(crate) struct App {
    /// Turns a connection's client certificate into the identity headers upstreams see.
    pub auth: Authenticator,
    /// Where request spans start, and go when they end.
    pub tracer: Tracer,
    /// The proxy listener's address, and the server id, as server spans' attributes.
    pub listener: spans::ListenerAttributes,
    pub local: Upstream,
    pub cache: Arc<Cache>,
    pub metrics: Arc<Metrics>,
    pub limits: Limits,
    /// Who uses the GVRs of the skew (`mvproxy_skew_requests_total`, `/debug/clients`).
    pub skew_clients: Arc<SkewClients>,
    /// The merged OpenAPI documents of the current snapshot (`crate::openapi`).
    pub openapi: crate::openapi::OpenApi,
}

/// A client connection as its requests see it: the proxy's state, who the client is, and where
/// it connects from (the server span's `client.address`; `None` for a test's request without a
/// socket). One `Arc` of it per request: each count taken and dropped is a locked instruction
/// (bench/PERF_NOTES.md, thirty-eighth round).
pub(crate) struct ClientConn {
    pub app: Arc<App>,
    pub identity: ClientIdentity,
    pub remote: Option<SocketAddr>,
}

/// Handles one request from a client with `identity`: classify → look up and decide →
/// forward → record. A request for a GVR in the skew is also recorded with its client
/// ([`SkewClients::observe`], once identity headers are settled).
///
/// Generic over the request body: the listener passes hyper's
/// [`Incoming`](hyper::body::Incoming), a test any body.
pub(crate) async fn handle<B>(conn: Arc<ClientConn>, mut req: Request<B>) -> Response<Body>
where
    B: ClientBody,
    B::Error: Into<BoxError>,
{
    let app = &*conn.app;
    let start = Instant::now();
    let method = req.method().clone();
    // For log lines after the request is gone: shares the request's bytes, no copy (and only
    // the path's: each shared part cloned is a locked count taken and dropped).
    let pq = req.uri().path_and_query().cloned();
    let path = pq.as_ref().map_or("", PathAndQuery::path);

    // 1. classify
    let info = classify(&method, path, pq.as_ref().and_then(PathAndQuery::query));
    let arrival = spans::Arrival {
        version: req.version(),
        client: conn.remote,
    };
    let span = spans::server(
        &app.tracer,
        &method,
        req.uri(),
        &info,
        &app.listener,
        req.headers(),
        arrival,
    );

    // 2. look up and decide
    let snap = app.cache.load();
    let lookup_start = Instant::now();
    let route = decide(&info, &method, req.headers(), &snap, |n| {
        fastrand::usize(..n)
    });
    record_lookup(app, &span, &info, &route, lookup_start.elapsed());
    spans::decided(&span, &route);
    if is_nopeer_discovery(&info, req.headers()) {
        app.metrics.discovery_nopeer_requests.inc();
    }

    // 3. forward, or answer
    app.auth.apply(&conn.identity, req.headers_mut());
    let requester = app
        .skew_clients
        .observe(&snap, &info, &route, req.headers());
    // The peer that answered, or failed last: after a fail-over not the one first chosen.
    let (result, peer) = respond(app, &snap, &span, &info, &route, req).await;
    let result = match (requester, result) {
        (Some(requester), Ok(resp)) => {
            let resp = app.skew_clients.watch_open(&requester, resp);
            app.skew_clients
                .answered(&snap, &info, requester, resp.headers());
            let resp = app.skew_clients.failed(&snap, &info, peer, resp);
            Ok(app.skew_clients.deleted(&snap, &info, resp))
        }
        (_, result) => result,
    };
    let resp = result.unwrap_or_else(|e| {
        spans::failed(&span, &e);
        let ids = span.ids();
        let (trace_id, span_id) = ids
            .as_ref()
            .map_or(("", ""), |i| (i.trace_id.as_str(), i.span_id.as_str()));
        if e.is_client_error() {
            // The client's own fault (its body): no upstream failed.
            tracing::info!(error = %e, %trace_id, %span_id, %method, %path, route = route.kind(), "request refused");
        } else {
            tracing::warn!(error = %e, %trace_id, %span_id, %method, %path, route = route.kind(), "request failed");
        }
        record_proxy_error(&app.metrics, &info, &route, &e);
        e.to_response().map(full)
    });

    // 4. record
    spans::responded(&span, resp.status(), 500);
    let took = start.elapsed();
    let answered = Answered {
        status: resp.status(),
        took,
        peer,
    };
    record(&app.metrics, &method, &info, &route, &answered, &span);
    log_request(&span, &route, peer, &method, path, resp.status(), took);
    span.end();
    resp
}

/// Step 3: where the decision sends the request; for a peer-routed one, also the peer that
/// answered it (or failed last).
async fn respond<'a, B>(
    app: &App,
    snap: &'a Arc<Snapshot>,
    span: &RequestSpan,
    info: &RequestInfo,
    route: &'a Route,
    req: Request<B>,
) -> (Result<Response<Body>, ProxyError>, Option<&'a ServerName>)
where
    B: ClientBody,
    B::Error: Into<BoxError>,
{
    let mut peer = None;
    let (req, body_limit) = match limits::limit_body(req, info, app.limits.max_request_body_bytes) {
        Ok(limited) => limited,
        Err(e) => return (Err(e), peer),
    };
    let result = match route {
        Route::Local(_) => forward(&app.local, req, span, info, None)
            .await
            .map_err(|f| f.error),
        Route::Peer(name) => {
            let (result, last) = forward_to_peers(app, snap, span, info, name, req).await;
            peer = Some(last);
            result
        }
        Route::Discovery(doc) => match discovery::answer(app, snap, span, doc, req.headers()) {
            Some(resp) => Ok(resp),
            None => forward(&app.local, req, span, info, None)
                .await
                .map_err(|f| f.error),
        },
        Route::OpenApi(doc) => {
            // Boxed: building a merged document fetches from every server, a future as large
            // as the rest of the request's, and every request's future is copied whole when
            // its task is spawned (bench/PERF_NOTES.md, eleventh round).
            let merged = Box::pin(app.openapi.serve(
                &app.local,
                snap,
                span,
                &app.metrics,
                *doc,
                req.headers(),
            ))
            .await;
            match merged {
                Some(resp) => Ok(resp),
                None => forward(&app.local, req, span, info, None)
                    .await
                    .map_err(|f| f.error),
            }
        }
        Route::Unavailable(e) => Err(e.clone()),
    };
    (body_limit.explain(result), peer)
}

/// A peer-routed request: to `first`, and when a peer cannot be reached, or does not answer
/// in time, to another that serves the resource and is up in `snap`, each at most once, within
/// the same request. Each peer that fails so is marked suspect at once
/// ([`Cache::suspect`]). A request goes on after nothing of it was written (no connection
/// could be made), whatever it is; after it was written, only when it cannot change anything
/// and has no body (`GET`, `HEAD`, `OPTIONS`, `TRACE`, as the pools' own replays decide,
/// `crate::upstream::h1pool`): a write may have been applied by the server that failed, and must not be
/// sent twice. Returns the last peer tried with its answer.
async fn forward_to_peers<'a, B>(
    app: &App,
    snap: &'a Snapshot,
    span: &RequestSpan,
    info: &RequestInfo,
    first: &'a ServerName,
    req: Request<LimitedBody<B>>,
) -> (Result<Response<Body>, ProxyError>, &'a ServerName)
where
    B: ClientBody,
    B::Error: Into<BoxError>,
{
    let mut req: Request<Body> = req.map(|b| b.map_err(Into::into).boxed());
    // The other servers it may go to: those up that serve the resource.
    let mut others: Vec<&'a ServerName> = match info {
        RequestInfo::Resource(r) => snap
            .serving(&r.gvr)
            .map(|s| s.up.iter().filter(|p| *p != first).collect())
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    // What a written request is sent again from: kept only for one that may be, and only
    // when there is somewhere else to send it.
    let replay =
        (!others.is_empty() && is_safe(req.method()) && http_body::Body::is_end_stream(req.body()))
            .then(|| head_of(&req));
    let mut name = first;
    loop {
        // The snapshot that chose the peer knows how to reach it.
        let Some(peer) = snap.upstream(name) else {
            return (
                Err(ProxyError::PeerUpstreamMissing { peer: name.clone() }),
                name,
            );
        };
        let failed = match forward(peer, req, span, info, Some(name)).await {
            Ok(resp) => return (Ok(resp), name),
            Err(failed) => failed,
        };
        if !matches!(
            failed.error,
            ProxyError::Transport { .. } | ProxyError::Timeout { .. }
        ) {
            return (Err(failed.error), name);
        }
        app.cache.suspect(name, &failed.error);
        let again = failed
            .unsent
            .or_else(|| replay.as_ref().map(|h| rebuild(h)));
        let (Some(again), false) = (again, others.is_empty()) else {
            return (Err(failed.error), name);
        };
        let next = others.swap_remove(fastrand::usize(..others.len()));
        tracing::info!(peer = %name, next = %next, cause = %failed.error, "peer failed; the request goes to another server that serves it");
        name = next;
        req = again;
    }
}

/// A body-less request again, from its head.
fn rebuild(head: &Request<()>) -> Request<Body> {
    let mut req = Request::new(crate::plumbing::empty());
    *req.method_mut() = head.method().clone();
    *req.uri_mut() = head.uri().clone();
    *req.version_mut() = head.version();
    *req.headers_mut() = head.headers().clone();
    req
}

/// One upstream attempt, in its own `CLIENT` span whose context the upstream receives; a
/// failure carries the request back when none of it was written.
async fn forward<Rb>(
    up: &Upstream,
    mut req: Request<Rb>,
    server_span: &RequestSpan,
    info: &RequestInfo,
    peer: Option<&ServerName>,
) -> Result<Response<Body>, Failed>
where
    Rb: http_body::Body<Data = Bytes> + Send + Sync + 'static,
    Rb::Error: Into<BoxError>,
{
    let pq = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
    let client = spans::client(server_span, req.method(), info, &up.base, pq, peer);
    client.inject(req.headers_mut());
    let result = up.try_forward(req, peer.is_some()).await;
    match &result {
        Ok(resp) => spans::responded(&client, resp.status(), 400),
        Err(f) => spans::failed(&client, &f.error),
    }
    client.end();
    result.map(|resp| end_watches_cleanly(info, resp, server_span))
}

/// A watch's body ends, rather than fails, when its upstream breaks between two events
/// ([`crate::watch_end`]), and has a span of its own that lasts as long as it does.
fn end_watches_cleanly(
    info: &RequestInfo,
    resp: Response<Body>,
    server_span: &RequestSpan,
) -> Response<Body> {
    let is_watch = matches!(info, RequestInfo::Resource(r) if r.verb == "watch");
    if !is_watch || resp.status() != StatusCode::OK {
        return resp;
    }
    match Framing::of(resp.headers().get(header::CONTENT_TYPE)) {
        Some(framing) => {
            let span = spans::watch(server_span, info);
            resp.map(|body| WatchBody::new(body, framing).with_span(span).boxed())
        }
        None => resp,
    }
}

/// One log line per request: at info for peer-routed and failed ones, debug otherwise.
/// Never a header: `Authorization` must not reach a log.
fn log_request(
    span: &RequestSpan,
    route: &Route,
    peer: Option<&ServerName>,
    method: &Method,
    path: &str,
    status: StatusCode,
    took: Duration,
) {
    let peer = match route {
        Route::Peer(_) => peer,
        Route::Unavailable(_) => return,
        _ if tracing::enabled!(tracing::Level::DEBUG) => None,
        _ => return,
    };
    // The ids are formatted only for a line that is written.
    let ids = span.ids();
    let trace_id = ids
        .as_ref()
        .map(|i| i.trace_id.as_str())
        .unwrap_or_default();
    let span_id = ids.as_ref().map(|i| i.span_id.as_str()).unwrap_or_default();
    let millis = took.as_secs_f64() * 1000.0;
    match peer {
        Some(peer) => {
            tracing::info!(%trace_id, %span_id, %peer, %method, %path, status = status.as_u16(), millis, "proxied to peer")
        }
        None => {
            tracing::debug!(%trace_id, %span_id, route = route.kind(), %method, %path, status = status.as_u16(), millis, "request")
        }
    }
}

fn is_nopeer_discovery(info: &RequestInfo, headers: &HeaderMap) -> bool {
    matches!(info, RequestInfo::Discovery(DiscoveryPath::Apis))
        && negotiate(headers.get(header::ACCEPT)) == DiscoveryFormat::AggregatedV2 { nopeer: true }
}

/// Counts a routing-index lookup of a resource request: a hit when some server serves the
/// GVR, a miss when none does (which also schedules a refetch of every server).
fn record_lookup(app: &App, span: &RequestSpan, info: &RequestInfo, route: &Route, took: Duration) {
    if !matches!(info, RequestInfo::Resource(_)) {
        return;
    }
    let hit = match route {
        Route::Local(LocalReason::NoPeer)
        | Route::Unavailable(ProxyError::SurfaceUnknown { .. }) => false,
        Route::Local(LocalReason::ServedLocally) | Route::Peer(_) | Route::Unavailable(_) => true,
        // not looked up: loop guard or not synced
        _ => return,
    };
    spans::lookup_event(span, hit, took.as_micros());
    if !hit {
        app.cache.on_miss();
    }
    app.metrics.observe_lookup(hit, took.as_secs_f64());
}

fn gvr_labels(info: &RequestInfo) -> (String, String, String) {
    match info {
        RequestInfo::Resource(r) => (
            r.gvr.group.as_str().to_owned(),
            r.gvr.version.as_str().to_owned(),
            r.gvr.resource.as_str().to_owned(),
        ),
        _ => Default::default(),
    }
}

/// A failure to proxy: to a peer in `mvproxy_peer_proxy_errors_total` (upstream's family,
/// errors proxying to a peer), to the local API server in `mvproxy_local_proxy_errors_total`.
fn record_proxy_error(metrics: &Metrics, info: &RequestInfo, route: &Route, e: &ProxyError) {
    let Some(ty) = e.peer_error_type() else {
        return;
    };
    match route {
        Route::Peer(_) | Route::Unavailable(_) => {
            // A GVR that no server is known to serve comes from the client's path alone:
            // labelled as no GVR, so made-up paths cannot add series.
            let (group, version, resource) = match e {
                ProxyError::SurfaceUnknown { .. } => Default::default(),
                _ => gvr_labels(info),
            };
            metrics
                .peer_proxy_errors
                .get_or_create(&PeerErrorLabels {
                    r#type: ty,
                    group,
                    version,
                    resource,
                })
                .inc();
        }
        Route::Local(_) | Route::Discovery(_) | Route::OpenApi(_) => {
            metrics
                .local_proxy_errors
                .get_or_create(&TypeLabels { r#type: ty })
                .inc();
        }
    }
}

/// How a request was answered, for [`record`].
#[derive(Clone, Copy)]
struct Answered<'a> {
    status: StatusCode,
    took: Duration,
    /// For a peer-routed request, the peer that answered (or failed last).
    peer: Option<&'a ServerName>,
}

fn record(
    metrics: &Metrics,
    method: &Method,
    info: &RequestInfo,
    route: &Route,
    answered: &Answered<'_>,
    span: &RequestSpan,
) {
    let Answered { status, took, peer } = *answered;
    let peer = peer.map_or("", |p| p.as_str());
    if let Route::Peer(_) = route {
        let (group, version, resource) = gvr_labels(info);
        metrics
            .rerouted_requests
            .get_or_create(&RerouteLabels {
                code: status.as_u16(),
                group,
                version,
                resource,
            })
            .inc();
    }
    metrics.count_request(
        route.kind(),
        route.reason(),
        peer,
        status.as_u16(),
        method_label(method),
    );
    metrics.observe_request(
        route.kind(),
        peer,
        took.as_secs_f64(),
        span.sampled_trace_id()
            .map(|trace_id| TraceLabels { trace_id }),
    );
}

/// Methods as a closed set, so a client cannot grow the label set (`CONNECT` and `TRACE`,
/// which no API server serves, are `OTHER` too).
fn method_label(m: &Method) -> &'static str {
    match crate::spans::standard_method(m) {
        Some("CONNECT" | "TRACE") | None => "OTHER",
        Some(name) => name,
    }
}

/// How long in-flight requests get to finish after a shutdown signal (watches never finish).
pub(crate) const SHUTDOWN_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// One request on a client connection, answered by [`handle`].
async fn answer(
    conn: Arc<ClientConn>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    Ok(handle(conn, req).await)
}

/// [`answer`]'s future in a box of its own, written in place. The future is 7 KB (the whole
/// request path's state), and each protocol's server would otherwise move it whole:
/// hyper's HTTP/2 server spawns a task per request holding it (tokio moves a task's future
/// into its cell, and `Box::pin(answer(..))` copied all 7 KB into the box first: about an
/// eighth of the bytes the proxy copies per request, bench/PERF_NOTES.md, twenty-fourth
/// round); hyper's HTTP/1.1 server keeps a box of the future's size for the connection's
/// life, 7 KB per open watch though a watch's request future ends with the response head.
/// `Box::write` into a fresh allocation lets the compiler build the future there: only its
/// arguments are written.
fn answer_boxed(
    conn: Arc<ClientConn>,
    req: Request<Incoming>,
) -> Pin<Box<impl Future<Output = Result<Response<Body>, Infallible>>>> {
    Box::into_pin(Box::write(Box::new_uninit(), answer(conn, req)))
}

/// A client connection's service: each request answered by [`handle`] with the connection, its
/// future built in its box ([`answer_boxed`]).
fn connection_service(conn: ClientConn) -> impl limits::ClientService {
    let conn = Arc::new(conn);
    hyper::service::service_fn(move |req| answer_boxed(conn.clone(), req))
}

/// Serves the proxy on `listener` until `shutdown` is cancelled, then drains open connections.
pub(crate) async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    app: Arc<App>,
    shutdown: CancellationToken,
) {
    let open = TaskTracker::new();
    let http = limits::HttpServer::new(&app.limits);
    let connections = limits::Connections::new(app.limits.max_connections);
    loop {
        let (stream, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let Some((stream, permit)) = connections.admit(stream, tls.as_ref(), &http) else {
            continue;
        };
        let app = app.clone();
        let http = http.clone();
        let shutdown = shutdown.clone();
        let tls = tls.clone();
        open.spawn(async move {
            let _permit = permit;
            // One type for both, so that one future serves them (and holds one stream).
            let (io, identity) = match tls {
                Some(acceptor) => match crate::tls::accept::accept(&acceptor, stream).await {
                    Ok(s) => {
                        let identity = app.auth.identify(s.get_ref().1.peer_certificates());
                        (Either::Left(s), identity)
                    }
                    Err(e) => {
                        tracing::debug!(%remote, error = %e, "TLS handshake failed");
                        return;
                    }
                },
                None => (Either::Right(stream), ClientIdentity::Anonymous),
            };
            let conn = ClientConn {
                app,
                identity,
                remote: Some(remote),
            };
            let mut io = limits::FirstBytesDeadline::new(io, limits::HEADER_READ_TIMEOUT);
            let first = match limits::detect(&mut io, &shutdown).await {
                Ok(first) => first,
                Err(e) => {
                    tracing::debug!(%remote, error = %e, "connection closed before a request");
                    return;
                }
            };
            let protocol = first.protocol;
            let io = limits::Detected::new(first, io);
            let service = connection_service(conn);
            let result = match protocol {
                Protocol::Http2 => {
                    coalesce::serve(io, |io| http.http2(io, service, &shutdown)).await
                }
                Protocol::Http1 => http.http1(io, service, &shutdown).await,
            };
            if let Err(e) = result {
                tracing::debug!(%remote, error = %e, "connection closed with error");
            }
        });
    }
    drop(listener);
    open.close();
    if tokio::time::timeout(SHUTDOWN_DRAIN_TIMEOUT, open.wait())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after {SHUTDOWN_DRAIN_TIMEOUT:?}; closing them");
    }
}

/// Binds a listener, naming the address in the error.
pub(crate) async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("bind {addr}: {e}")))
}

mod coalesce;
mod discovery;

#[cfg(test)]
mod tests;
