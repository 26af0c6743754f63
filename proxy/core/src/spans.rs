//! The spans of one request, named and attributed as the README's telemetry contract says.
//!
//! A `SERVER` span per request received (its parent is the client's `traceparent`), and a
//! `CLIENT` span per upstream attempt, whose context is what the upstream receives. Attributes
//! follow the OpenTelemetry HTTP conventions plus the GVR and the routing decision, all of low
//! cardinality. Cache lookups and merges are events on the server span, not spans of their own.
//! The spans are [`RequestSpan`]s, started through the OpenTelemetry API: without an exporter
//! they are empty, and attributes and events are built only for a span the sampler kept, so an
//! unsampled request costs the sampler's decision and no more.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use std::net::SocketAddr;

use http::{Method, StatusCode, Uri, Version};
use mvproxy_telemetry::metrics::values;
use mvproxy_telemetry::trace::{KeyValue, RequestSpan, StringValue, Tracer, Value};

use crate::classify::RequestInfo;
use crate::error::ProxyError;
use crate::plumbing::ServerName;
use crate::route::Route;

/// `{method} {route}`, with the templated route (or just the method for non-resource paths).
/// Both parts come from closed sets for the standard methods (the classifier's route
/// templates are `'static`), so each name is formatted once per process and then shared;
/// only an extension method's name is formatted per span.
fn span_name(method: &Method, info: &RequestInfo) -> Cow<'static, str> {
    let route = info.route_template();
    let Some(m) = standard_method(method) else {
        return Cow::Owned(match route {
            Some(route) => format!("{method} {route}"),
            None => method.to_string(),
        });
    };
    let Some(route) = route else {
        return Cow::Borrowed(m);
    };
    // Keyed by the two `'static` strings' addresses: at most 9 methods × the templates.
    static NAMES: OnceLock<RwLock<HashMap<(usize, usize), &'static str>>> = OnceLock::new();
    let names = NAMES.get_or_init(Default::default);
    let key = (m.as_ptr() as usize, route.as_ptr() as usize);
    if let Some(name) = names
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key)
    {
        return Cow::Borrowed(name);
    }
    let mut names = names.write().unwrap_or_else(PoisonError::into_inner);
    let name = *names
        .entry(key)
        .or_insert_with(|| Box::leak(format!("{m} {route}").into_boxed_str()));
    Cow::Borrowed(name)
}

/// The method's name as a `'static` string, for the methods HTTP defines.
pub(crate) fn standard_method(method: &Method) -> Option<&'static str> {
    Some(match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => return None,
    })
}

/// A method as an attribute value: shared for the standard ones, copied otherwise.
fn method_value(method: &Method) -> Value {
    match standard_method(method) {
        Some(m) => Value::from(m),
        None => Value::from(method.as_str().to_owned()),
    }
}

/// The attribute values of the listener that are the same on every server span, built once.
#[derive(Debug, Clone)]
pub(crate) struct ListenerAttributes {
    address: Value,
    port: Value,
    server_id: Value,
    /// `url.scheme`: `https` when the listener serves TLS.
    scheme: &'static str,
}

impl ListenerAttributes {
    pub(crate) fn new(listen: std::net::SocketAddr, server_id: &ServerName, tls: bool) -> Self {
        Self {
            address: Value::from(StringValue::from(Arc::<str>::from(listen.ip().to_string()))),
            port: Value::I64(i64::from(listen.port())),
            server_id: Value::from(StringValue::from(server_id.shared())),
            scheme: if tls { "https" } else { "http" },
        }
    }
}

/// `network.protocol.version` of an HTTP version, as the HTTP conventions write it.
fn protocol_version(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 => "0.9",
        Version::HTTP_10 => "1.0",
        Version::HTTP_2 => "2",
        Version::HTTP_3 => "3",
        _ => "1.1",
    }
}

/// What a request's server span says about it beyond its path: the HTTP version, and the
/// client's address when it came over a socket (a test's request has none).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arrival {
    pub(crate) version: Version,
    pub(crate) client: Option<SocketAddr>,
}

/// The `SERVER` span of a request received on `listen`, child of the client's trace context.
pub(crate) fn server(
    tracer: &Tracer,
    method: &Method,
    uri: &Uri,
    info: &RequestInfo,
    listener: &ListenerAttributes,
    headers: &http::HeaderMap,
    arrival: Arrival,
) -> RequestSpan {
    let span = RequestSpan::server(tracer, headers, || span_name(method, info));
    if span.is_recording() {
        let mut attrs = Vec::with_capacity(16);
        attrs.extend([
            KeyValue::new("http.request.method", method_value(method)),
            KeyValue::new("url.path", uri.path().to_owned()),
            KeyValue::new("url.scheme", listener.scheme),
            KeyValue::new(
                "network.protocol.version",
                protocol_version(arrival.version),
            ),
            KeyValue::new("server.address", listener.address.clone()),
            KeyValue::new("server.port", listener.port.clone()),
            KeyValue::new("mvproxy.server_id", listener.server_id.clone()),
        ]);
        if let Some(client) = arrival.client {
            attrs.push(KeyValue::new("client.address", client.ip().to_string()));
            attrs.push(KeyValue::new("client.port", i64::from(client.port())));
        }
        // Not one byte more than the client sent, and only valid text (a header value is
        // bounded by the listener's header limits).
        if let Some(agent) = headers
            .get(http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
        {
            attrs.push(KeyValue::new("user_agent.original", agent.to_owned()));
        }
        // The low-cardinality path template (OpenTelemetry HTTP semantic conventions'
        // `http.route`), the one in the span's name.
        if let Some(route) = info.route_template() {
            attrs.push(KeyValue::new("http.route", route));
        }
        if let RequestInfo::Resource(r) = info {
            // The Kubernetes verb (get, list, watch, create, …), as kube-apiserver derives it.
            if !r.verb.is_empty() {
                attrs.push(KeyValue::new("k8s.api.verb", r.verb));
            }
            attrs.push(KeyValue::new(
                "k8s.api.group",
                r.gvr.group.as_str().to_owned(),
            ));
            attrs.push(KeyValue::new(
                "k8s.api.version",
                r.gvr.version.as_str().to_owned(),
            ));
            attrs.push(KeyValue::new(
                "k8s.api.resource",
                r.gvr.resource.as_str().to_owned(),
            ));
            if let Some(ns) = &r.namespace {
                attrs.push(KeyValue::new("k8s.namespace.name", ns.as_str().to_owned()));
            }
        }
        span.set_attributes(attrs);
    }
    span
}

/// Records the decision on the server span.
pub(crate) fn decided(span: &RequestSpan, route: &Route) {
    if !span.is_recording() {
        return;
    }
    span.set_attributes([
        KeyValue::new("mvproxy.route", route.kind()),
        KeyValue::new("mvproxy.reason", route.reason()),
    ]);
    if let Route::Peer(p) = route {
        span.set_attributes([KeyValue::new("mvproxy.peer", StringValue::from(p.shared()))]);
    }
}

/// The `CLIENT` span of one upstream attempt; inject its context into the upstream request.
pub(crate) fn client(
    server: &RequestSpan,
    method: &Method,
    info: &RequestInfo,
    upstream: &Uri,
    path_and_query: &str,
    peer: Option<&ServerName>,
) -> RequestSpan {
    let span = server.client(|| span_name(method, info));
    if span.is_recording() {
        let mut attrs = Vec::with_capacity(5);
        attrs.extend([
            KeyValue::new("http.request.method", method_value(method)),
            // The upstream's base (`scheme://authority`, no path) and the request's path
            // and query as sent.
            KeyValue::new(
                "url.full",
                format!(
                    "{}{path_and_query}",
                    upstream.to_string().trim_end_matches('/')
                ),
            ),
            KeyValue::new(
                "server.address",
                upstream.host().unwrap_or_default().to_owned(),
            ),
            KeyValue::new("server.port", i64::from(crate::plumbing::port_of(upstream))),
        ]);
        if let Some(p) = peer {
            attrs.push(KeyValue::new("mvproxy.peer", StringValue::from(p.shared())));
        }
        span.set_attributes(attrs);
    }
    span
}

/// The span of a watch's stream, child of its server span: from the response headers to the
/// watch's end, named `watch {route}` (`crate::watch_end` sets the events relayed and why it
/// ended). Empty unless the server span records.
pub(crate) fn watch(server: &RequestSpan, info: &RequestInfo) -> RequestSpan {
    if !server.is_recording() {
        return RequestSpan::none();
    }
    server.internal(|| match info.route_template() {
        Some(route) => Cow::Owned(format!("watch {route}")),
        None => Cow::Borrowed("watch"),
    })
}

/// Records a response on a span; `error_from` is the lowest status that marks it failed
/// (500 on the server side, 400 on the client side, as the HTTP conventions say).
pub(crate) fn responded(span: &RequestSpan, status: StatusCode, error_from: u16) {
    if !span.is_recording() {
        return;
    }
    span.set_attributes([KeyValue::new(
        "http.response.status_code",
        i64::from(status.as_u16()),
    )]);
    if status.as_u16() >= error_from {
        span.set_error();
    }
}

/// Marks a span failed by `e`, with an `exception` event.
pub(crate) fn failed(span: &RequestSpan, e: &ProxyError) {
    if !span.is_recording() {
        return;
    }
    span.set_error();
    span.set_attributes([KeyValue::new("error.type", e.reason())]);
    span.add_event(
        "exception",
        vec![KeyValue::new("exception.message", e.to_string())],
    );
}

/// A span event: a routing-index lookup.
pub(crate) fn lookup_event(span: &RequestSpan, hit: bool, micros: u128) {
    event(span, "discovery.lookup", hit, micros);
}

/// A span event: the merged `/apis` served from cache or rebuilt.
pub(crate) fn merge_event(span: &RequestSpan, hit: bool, micros: u128) {
    event(span, "discovery.merge", hit, micros);
}

fn event(span: &RequestSpan, name: &'static str, hit: bool, micros: u128) {
    if span.is_recording() {
        span.add_event(
            name,
            vec![
                KeyValue::new("result", values::result(hit)),
                KeyValue::new("duration_us", i64::try_from(micros).unwrap_or(i64::MAX)),
            ],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::classify;

    /// README: "a `SERVER` span named `{method} {route}` with a templated route": names
    /// carry no object name, namespace or query, so they stay few.
    #[test]
    fn span_names_are_the_method_and_the_templated_route() {
        let cases = [
            (
                "GET",
                "/api/v1/namespaces/default/pods",
                "GET /api/{version}/namespaces/{namespace}/{resource}",
            ),
            (
                "DELETE",
                "/apis/apps/v1/namespaces/kube-system/deployments/coredns",
                "DELETE /apis/{group}/{version}/namespaces/{namespace}/{resource}/{name}",
            ),
            (
                "PUT",
                "/api/v1/nodes/n1/status",
                "PUT /api/{version}/{resource}/{name}/{subresource}",
            ),
            ("GET", "/apis", "GET /apis"),
            ("GET", "/apis/apps/v1", "GET /apis/{group}/{version}"),
            ("GET", "/healthz", "GET"),
            // an extension method: formatted for the span, never kept
            ("PURGE", "/api/v1/pods", "PURGE /api/{version}/{resource}"),
            ("PURGE", "/healthz", "PURGE"),
        ];
        for (method, path, want) in cases {
            let method: Method = method.parse().unwrap();
            let info = classify(&method, path, None);
            assert_eq!(span_name(&method, &info), want, "{path}");
            // the same name again: a standard method's is the one formatted the first time
            let (first, again) = (span_name(&method, &info), span_name(&method, &info));
            let shared = matches!((&first, &again), (Cow::Borrowed(a), Cow::Borrowed(b)) if std::ptr::eq(*a, *b));
            assert_eq!(
                shared,
                standard_method(&method).is_some(),
                "{method} {path}"
            );
        }
    }
}
