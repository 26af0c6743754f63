//! The spans of one request, named and attributed as the README's telemetry contract says.
//!
//! A `SERVER` span per request received (its parent is the client's `traceparent`), and a
//! `CLIENT` span per upstream attempt, whose context is what the upstream receives. Attributes
//! follow the OpenTelemetry HTTP conventions plus the GVR and the routing decision, all of low
//! cardinality. Cache lookups and merges are events on the server span, not spans of their own.
//! Everything here is plain `tracing`; the telemetry crate turns it into OpenTelemetry. Spans
//! and events use the span-only target: log lines never carry them, so without an exporter
//! no layer wants them and they cost next to nothing.

use http::{Method, StatusCode, Uri};
use mvproxy_telemetry::metrics::values;
use mvproxy_telemetry::propagation;
use mvproxy_telemetry::setup::SPAN_EVENTS;
use tracing::Span;
use tracing::field::Empty;

use crate::classify::RequestInfo;
use crate::discovery::ServerName;
use crate::error::ProxyError;
use crate::route::Route;

/// `{method} {route}`, with the templated route (or just the method for non-resource paths).
fn span_name(method: &Method, info: &RequestInfo) -> String {
    match info.route_template() {
        Some(route) => format!("{method} {route}"),
        None => method.to_string(),
    }
}

/// The `SERVER` span of a request received on `listen`, child of the client's trace context.
pub fn server(
    method: &Method,
    uri: &Uri,
    info: &RequestInfo,
    server_id: &ServerName,
    listen: std::net::SocketAddr,
    headers: &http::HeaderMap,
) -> Span {
    let span = tracing::info_span!(
        target: SPAN_EVENTS,
        "request",
        otel.name = %span_name(method, info),
        otel.kind = "server",
        otel.status_code = Empty,
        error.type = Empty,
        http.request.method = %method,
        url.path = %uri.path(),
        http.response.status_code = Empty,
        server.address = %listen.ip(),
        server.port = listen.port(),
        k8s.api.group = Empty,
        k8s.api.version = Empty,
        k8s.api.resource = Empty,
        k8s.namespace.name = Empty,
        mvproxy.route = Empty,
        mvproxy.reason = Empty,
        mvproxy.peer = Empty,
        mvproxy.server_id = %server_id,
    );
    if let RequestInfo::Resource(r) = info {
        span.record("k8s.api.group", r.gvr.group.as_str());
        span.record("k8s.api.version", r.gvr.version.as_str());
        span.record("k8s.api.resource", r.gvr.resource.as_str());
        if let Some(ns) = &r.namespace {
            span.record("k8s.namespace.name", ns.as_str());
        }
    }
    propagation::set_parent(&span, headers);
    span
}

/// Records the decision on the server span.
pub fn decided(span: &Span, route: &Route) {
    span.record("mvproxy.route", route.kind());
    span.record("mvproxy.reason", route.reason());
    if let Route::Peer(p) = route {
        span.record("mvproxy.peer", p.as_str());
    }
}

/// The `CLIENT` span of one upstream attempt; inject its context into the upstream request.
pub fn client(
    server: &Span,
    method: &Method,
    info: &RequestInfo,
    upstream: &Uri,
    peer: Option<&ServerName>,
) -> Span {
    let port = crate::forward::port_of(upstream);
    let span = tracing::info_span!(
        target: SPAN_EVENTS,
        parent: server,
        "upstream",
        otel.name = %span_name(method, info),
        otel.kind = "client",
        otel.status_code = Empty,
        error.type = Empty,
        http.request.method = %method,
        http.response.status_code = Empty,
        server.address = upstream.host().unwrap_or_default(),
        server.port = port,
        mvproxy.peer = Empty,
    );
    if let Some(p) = peer {
        span.record("mvproxy.peer", p.as_str());
    }
    span
}

/// Records a response on a span; `error_from` is the lowest status that marks it failed
/// (500 on the server side, 400 on the client side, as the HTTP conventions say).
pub fn responded(span: &Span, status: StatusCode, error_from: u16) {
    span.record("http.response.status_code", status.as_u16());
    if status.as_u16() >= error_from {
        span.record("otel.status_code", "error");
    }
}

/// Marks a span failed by `e`, with an `exception` event.
pub fn failed(span: &Span, e: &ProxyError) {
    span.record("otel.status_code", "error");
    span.record("error.type", e.reason());
    let message = e.to_string();
    tracing::event!(target: SPAN_EVENTS, parent: span, tracing::Level::ERROR, exception.message = message.as_str(), "exception");
}

/// A span event: a routing-index lookup.
pub fn lookup_event(span: &Span, hit: bool, micros: u128) {
    tracing::info!(target: SPAN_EVENTS, parent: span, result = values::result(hit), duration_us = micros as u64, "discovery.lookup");
}

/// A span event: the merged `/apis` served from cache or rebuilt.
pub fn merge_event(span: &Span, hit: bool, micros: u128) {
    tracing::info!(target: SPAN_EVENTS, parent: span, result = values::result(hit), duration_us = micros as u64, "discovery.merge");
}
