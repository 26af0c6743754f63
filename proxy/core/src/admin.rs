//! The admin listener: health, readiness, metrics, what mvproxy believes about its servers
//! (`/debug/discovery`) and which clients use the GVRs of the skew (`/debug/clients`).
//!
//! Kept off the proxy listener so that an API path can never collide with an admin path and
//! so that scraping works even when the proxy port is behind TLS and client auth.
//!
//! Plain HTTP is for loopback only (config validation refuses anything else); over TLS
//! (`--admin-tls-cert-file`) every request is authenticated and authorized by the local API
//! server, as a control-plane component's are ([`crate::admin::auth`]).

pub(crate) mod auth;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::admin::auth::{AdminAuth, User, cert_user};
use crate::discovery::{Cache, ServerState};
use crate::skew::SkewClients;

/// What the admin endpoints read.
#[derive(Clone)]
pub(crate) struct Admin {
    pub cache: Arc<Cache>,
    pub registry: Arc<Registry>,
    pub skew_clients: Arc<SkewClients>,
    /// Authentication and authorization by the local API server (admin over TLS); `None`
    /// on a plain loopback listener.
    pub auth: Option<Arc<AdminAuth>>,
}

/// The verified client certificate of an admin connection.
#[derive(Clone)]
struct CertUser(Option<User>);

/// The admin router.
pub(crate) fn router(admin: Admin) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/debug/discovery", get(debug_discovery))
        .route("/debug/clients", get(debug_clients))
        .route_layer(middleware::from_fn_with_state(admin.clone(), guard))
        .with_state(admin)
}

/// Refuses what the local API server does not allow (when delegated).
async fn guard(State(admin): State<Admin>, req: Request, next: Next) -> Response {
    if let Some(d) = &admin.auth {
        let user = req.extensions().get::<CertUser>().and_then(|c| c.0.clone());
        let (method, path, headers) = (
            req.method().clone(),
            req.uri().path().to_owned(),
            req.headers().clone(),
        );
        if let Err(refusal) = d.check(&method, &path, &headers, user).await {
            tracing::info!(%path, error = %refusal, "admin request refused");
            return refusal.to_response().map(axum::body::Body::from);
        }
    }
    next.run(req).await
}

/// Serves the admin router until `shutdown` is cancelled: plain, or over TLS (`tls`).
pub(crate) async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    admin: Admin,
    shutdown: CancellationToken,
) {
    let Some(acceptor) = tls else {
        let result = axum::serve(listener, router(admin))
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "admin listener failed");
        }
        return;
    };
    let router = router(admin);
    let graceful = GracefulShutdown::new();
    let builder = auto::Builder::new(TokioExecutor::new());
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "admin accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        let (acceptor, router, builder) = (acceptor.clone(), router.clone(), builder.clone());
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let Ok(tls) = crate::tls::accept::accept(&acceptor, stream).await else {
                return;
            };
            // The handshake verified any certificate against --admin-client-ca-file.
            let user = CertUser(
                tls.get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .and_then(|c| crate::identity::subject(c))
                    .map(|(cn, orgs)| cert_user(cn, orgs)),
            );
            let service = hyper::service::service_fn(
                move |mut req: hyper::Request<hyper::body::Incoming>| {
                    req.extensions_mut().insert(user.clone());
                    let mut router = router.clone();
                    async move {
                        tower_service::Service::call(&mut router, req.map(axum::body::Body::new))
                            .await
                    }
                },
            );
            let io = TokioIo::new(crate::limits::FirstBytesDeadline::new(
                tls,
                crate::limits::HEADER_READ_TIMEOUT,
            ));
            let conn = builder.serve_connection(io, service);
            let _ = watcher.watch(conn.into_owned()).await;
        });
    }
    let _ = tokio::time::timeout(crate::server::SHUTDOWN_DRAIN_TIMEOUT, graceful.shutdown()).await;
}

/// 200 once every configured server has been fetched once or marked down.
async fn readyz(State(admin): State<Admin>) -> Response {
    let snap = admin.cache.load();
    if snap.ready() {
        (StatusCode::OK, "ok").into_response()
    } else {
        let pending: Vec<&str> = snap
            .servers
            .iter()
            .filter(|s| !s.attempted)
            .map(|s| s.name.as_str())
            .collect();
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("discovery not fetched yet from: {}", pending.join(", ")),
        )
            .into_response()
    }
}

/// Classic Prometheus text, or OpenMetrics (with exemplars) when the scraper asks for it.
async fn metrics(State(admin): State<Admin>, headers: HeaderMap) -> Response {
    let openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/openmetrics-text"));
    match mvproxy_telemetry::metrics::encode(&admin.registry, openmetrics) {
        Ok((body, content_type)) => ([(header::CONTENT_TYPE, content_type)], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Each server's state and the skew: GVRs not served by every server that has been seen.
async fn debug_discovery(State(admin): State<Admin>) -> Response {
    let servers = admin.cache.servers();
    let skew = skew(&servers);
    let body = json!({
        "servers": servers.iter().map(server_json).collect::<Vec<_>>(),
        "skew": skew,
        "excluded": admin.cache.load().excluded().iter().map(|(g, v)| format!("{g}/{v}")).collect::<Vec<_>>(),
    });
    axum::Json(body).into_response()
}

/// Per client, the GVRs of the skew it used: those that break after the upgrade, those that
/// break on a rollback (see `crate::skew`).
async fn debug_clients(State(admin): State<Admin>) -> Response {
    axum::Json(admin.skew_clients.report(&admin.cache.load())).into_response()
}

fn server_json(s: &ServerState) -> serde_json::Value {
    json!({
        "id": s.name.as_str(),
        "url": s.url,
        "local": s.local,
        "up": s.up,
        "state": s.health(),
        "error": s.error.as_ref().map(ToString::to_string),
        "error_at": s.error_at.and_then(unix_seconds),
        "suspected_by": s.suspected_by.as_ref().map(|(e, at)| json!({"error": e.to_string(), "at": unix_seconds(*at)})),
        "last_fetch": s.last_fetch.and_then(unix_seconds),
        "gvrs": s.view.as_ref().map_or(0, |v| v.gvr_count()),
        "git_version": s.view.as_ref().and_then(|v| v.version.as_ref()).map(|v| v.git_version.as_str()),
    })
}

fn unix_seconds(t: std::time::SystemTime) -> Option<f64> {
    t.duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs_f64())
}

/// GVRs that some seen servers serve and others do not, with the servers that serve each.
fn skew(servers: &[ServerState]) -> Vec<serde_json::Value> {
    use std::collections::BTreeMap;
    let seen: Vec<_> = servers
        .iter()
        .filter_map(|s| s.view.as_ref().map(|v| (s, v)))
        .collect();
    let mut by_gvr: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (s, v) in &seen {
        for gvr in v.gvrs() {
            by_gvr
                .entry(gvr.to_string())
                .or_default()
                .push(s.name.as_str());
        }
    }
    by_gvr
        .into_iter()
        .filter(|(_, by)| by.len() < seen.len())
        .map(|(gvr, mut by)| {
            by.sort_unstable();
            json!({"gvr": gvr, "servers": by})
        })
        .collect()
}

#[cfg(test)]
mod tests;
