//! The proxy listener: one request's path from arrival to response.
//!
//! [`handle`] is the whole story, in order: classify the path, look up the snapshot and decide
//! where it goes, forward it (or answer it: merged discovery, or an error `Status`), then
//! record what happened. [`serve`] accepts connections (plain or TLS, HTTP/1.1 with upgrades
//! and HTTP/2) and drains them on shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use mvproxy_telemetry::metrics::{
    Metrics, PeerErrorLabels, RequestLabels, RerouteLabels, ResultLabels, RouteLabels,
};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::classify::{DiscoveryPath, RequestInfo, classify};
use crate::discovery::negotiate::{DiscoveryFormat, negotiate};
use crate::discovery::types::CONTENT_TYPE_V2;
use crate::discovery::{Cache, ServerName, Snapshot};
use crate::error::ProxyError;
use crate::forward::{Body, Upstream, full};
use crate::route::{LocalReason, MergedFormat, Route, decide};

/// What every request needs: the upstreams, the discovery cache and the metric handles.
pub struct App {
    pub local: Upstream,
    pub peers: Vec<Upstream>,
    pub cache: Arc<Cache>,
    pub metrics: Arc<Metrics>,
}

impl App {
    fn peer(&self, name: &ServerName) -> Option<&Upstream> {
        self.peers.iter().find(|p| &p.name == name)
    }
}

/// Handles one request: classify → look up and decide → forward → record.
pub async fn handle(app: Arc<App>, req: Request<Incoming>) -> Response<Body> {
    let start = Instant::now();
    let method = req.method().clone();
    let info = classify(&method, req.uri().path(), req.uri().query());

    let snap = app.cache.load();
    let lookup_start = Instant::now();
    let route = decide(&info, &method, req.headers(), &snap, |n| {
        fastrand::usize(..n)
    });
    record_lookup(&app, &info, &route, lookup_start.elapsed());
    if is_nopeer_discovery(&info, req.headers()) {
        app.metrics.discovery_nopeer_requests.inc();
    }

    let result = match &route {
        Route::Local(_) => app.local.forward(req, false).await,
        Route::Peer(name) => match app.peer(name) {
            Some(peer) => {
                tracing::info!(peer = %name, method = %method, path = %req.uri().path(), "proxying request to peer");
                peer.forward(req, true).await
            }
            None => Err(ProxyError::BadRequest(format!("unknown peer {name}"))),
        },
        Route::Discovery(format) => match merged_discovery(&app, &snap, *format, req.headers()) {
            Some(resp) => Ok(resp),
            None => app.local.forward(req, false).await,
        },
        Route::Unavailable(e) => Err(e.clone()),
    };
    let resp = result.unwrap_or_else(|e| {
        tracing::warn!(error = %e, method = %method, route = route.kind(), "request failed");
        record_peer_error(&app.metrics, &info, &e);
        e.to_response().map(full)
    });
    record(
        &app.metrics,
        &method,
        &info,
        &route,
        resp.status(),
        start.elapsed(),
    );
    resp
}

fn is_nopeer_discovery(info: &RequestInfo, headers: &HeaderMap) -> bool {
    matches!(info, RequestInfo::Discovery(DiscoveryPath::Apis))
        && negotiate(headers.get(header::ACCEPT)) == DiscoveryFormat::AggregatedV2 { nopeer: true }
}

/// Answers `GET /apis` with the merged document, or `None` to let the local server answer
/// (legacy format when the merge changed nothing: local's own document is the right one).
fn merged_discovery(
    app: &App,
    snap: &Snapshot,
    format: MergedFormat,
    headers: &HeaderMap,
) -> Option<Response<Body>> {
    let (merged, hit) = snap.merged()?;
    app.metrics
        .merges
        .get_or_create(&ResultLabels {
            result: if hit { "hit" } else { "miss" },
        })
        .inc();
    if !hit {
        app.metrics
            .merge_duration
            .observe(merged.took.as_secs_f64());
    }
    let (body, content_type) = match format {
        MergedFormat::Aggregated => (merged.aggregated.clone(), CONTENT_TYPE_V2),
        MergedFormat::Legacy => (merged.legacy.clone()?, "application/json"),
    };
    let mut resp = if format == MergedFormat::Aggregated
        && headers
            .get(header::IF_NONE_MATCH)
            .is_some_and(|v| v.as_bytes() == merged.etag.as_bytes())
    {
        let mut r = Response::new(full(Bytes::new()));
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        let mut r = Response::new(full(body));
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        r
    };
    let h = resp.headers_mut();
    if format == MergedFormat::Aggregated {
        if let Ok(etag) = HeaderValue::from_str(&merged.etag) {
            h.insert(header::ETAG, etag);
        }
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("public"));
    }
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    Some(resp)
}

/// Counts a routing-index lookup of a resource request: a hit when some server serves the
/// GVR, a miss when none does (which also schedules a refetch of every server).
fn record_lookup(app: &App, info: &RequestInfo, route: &Route, took: Duration) {
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
    if !hit {
        app.cache.on_miss();
    }
    let labels = ResultLabels {
        result: if hit { "hit" } else { "miss" },
    };
    app.metrics.cache_lookups.get_or_create(&labels).inc();
    app.metrics
        .cache_lookup_duration
        .get_or_create(&labels)
        .observe(took.as_secs_f64());
}

fn gvr_labels(info: &RequestInfo) -> (String, String, String) {
    match info {
        RequestInfo::Resource(r) => (
            r.gvr.group.clone(),
            r.gvr.version.clone(),
            r.gvr.resource.clone(),
        ),
        _ => Default::default(),
    }
}

fn record_peer_error(metrics: &Metrics, info: &RequestInfo, e: &ProxyError) {
    if let Some(ty) = e.peer_error_type() {
        let (group, version, resource) = gvr_labels(info);
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
}

fn record(
    metrics: &Metrics,
    method: &Method,
    info: &RequestInfo,
    route: &Route,
    status: StatusCode,
    took: Duration,
) {
    let peer = match route {
        Route::Peer(p) => p.to_string(),
        _ => String::new(),
    };
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
    metrics
        .requests
        .get_or_create(&RequestLabels {
            route: route.kind(),
            reason: route.reason(),
            peer: peer.clone(),
            code: status.as_u16(),
            method: method_label(method),
        })
        .inc();
    metrics
        .request_duration
        .get_or_create(&RouteLabels {
            route: route.kind(),
            peer,
        })
        .observe(took.as_secs_f64());
}

/// Methods as a closed set, so a client cannot grow the label set.
fn method_label(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

/// How long in-flight requests get to finish after a shutdown signal (watches never finish).
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves the proxy on `listener` until `shutdown` is cancelled, then drains open connections.
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    app: Arc<App>,
    shutdown: CancellationToken,
) {
    let graceful = GracefulShutdown::new();
    let builder = auto::Builder::new(TokioExecutor::new());
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
        let app = app.clone();
        let service = hyper::service::service_fn(move |req| {
            let app = app.clone();
            async move { Ok::<_, std::convert::Infallible>(handle(app, req).await) }
        });
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let tls = tls.clone();
        tokio::spawn(async move {
            let result = match tls {
                Some(acceptor) => match acceptor.accept(stream).await {
                    Ok(s) => {
                        let conn = builder.serve_connection_with_upgrades(TokioIo::new(s), service);
                        watcher.watch(conn.into_owned()).await
                    }
                    Err(e) => {
                        tracing::debug!(%remote, error = %e, "TLS handshake failed");
                        return;
                    }
                },
                None => {
                    let conn =
                        builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    watcher.watch(conn.into_owned()).await
                }
            };
            if let Err(e) = result {
                tracing::debug!(%remote, error = %e, "connection closed with error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after {DRAIN_TIMEOUT:?}; closing them");
    }
}

/// Binds a listener, naming the address in the error.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("bind {addr}: {e}")))
}
