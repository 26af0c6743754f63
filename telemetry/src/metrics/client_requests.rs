//! `mvproxy_client_requests_total{client, verb}`: the resource requests of each client, by
//! verb, and `mvproxy_client_watches_open{client}`: the watches each client holds open through
//! this proxy.
//!
//! A rolling upgrade restarts API servers one by one; every watch on a restarted server
//! breaks, and a client whose informers then relist instead of resuming from their
//! `resourceVersion` floods the remaining servers with lists (a relist storm). Counting every
//! request per client and verb, before, during and after each step, is how a rehearsal through
//! mvproxy shows it caused none, which client would be the one to storm, and what load each
//! client puts on the proxy (nodes' heartbeats are `update`s, controllers' work `create`,
//! `patch` and `delete`). The watches open are what a proxy holds for each client (a
//! connection's stream and its buffers each): after a restart each client should be back at
//! its level before it, no higher (a client that opens watches and never closes them leaks
//! them) and no lower (informers that did not resume).
//!
//! `client` is the bounded name of `mvproxy_skew_requests_total` (the program from the
//! `User-Agent`, with its ServiceAccount when it carries one, at most
//! `--max-tracked-clients` names, then [`OTHER_CLIENT`](super::OTHER_CLIENT)), resolved by the
//! same registry, so one client has one label value in every family; `verb` is the kube verb
//! of the request, one of [`VERBS`]. The families have their own module so that the
//! families' module, near its size limit, changes by one field and one registration.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::Declared;

/// `verb` of a `GET` of one object.
pub const GET: &str = "get";
/// `verb` of a list request (`GET` of a collection).
pub const LIST: &str = "list";
/// `verb` of a watch request (`?watch=true`, or the deprecated `/watch/` prefix).
pub const WATCH: &str = "watch";
/// `verb` of a `POST`.
pub const CREATE: &str = "create";
/// `verb` of a `PUT`.
pub const UPDATE: &str = "update";
/// `verb` of a `PATCH`.
pub const PATCH: &str = "patch";
/// `verb` of a `DELETE` of one object.
pub const DELETE: &str = "delete";
/// `verb` of a `DELETE` of a collection.
pub const DELETECOLLECTION: &str = "deletecollection";
/// `verb` of a request through the `proxy` subresource or the deprecated `/proxy/` prefix.
pub const PROXY: &str = "proxy";
/// `verb` of any other request (a method kube-apiserver gives no verb, such as `OPTIONS`).
pub const OTHER_VERB: &str = "other";
/// Every `verb` of `mvproxy_client_requests_total`.
pub const VERBS: [&str; 10] = [
    GET,
    LIST,
    WATCH,
    CREATE,
    UPDATE,
    PATCH,
    DELETE,
    DELETECOLLECTION,
    PROXY,
    OTHER_VERB,
];

/// The `verb` label of a request with kube verb `kube_verb` (as the request's classification
/// names it, upstream's `RequestInfo.Verb`).
pub fn verb(kube_verb: &str) -> &'static str {
    VERBS
        .iter()
        .find(|v| **v == kube_verb)
        .copied()
        .unwrap_or(OTHER_VERB)
}

/// `mvproxy_client_requests_total` labels. `client` as in
/// [`SkewLabels`](super::SkewLabels), `verb` one of [`VERBS`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClientRequestLabels {
    /// The `client` label.
    pub client: String,
    /// The `verb` label.
    pub verb: &'static str,
}

/// `mvproxy_client_watches_open` labels: `client` as in [`ClientRequestLabels`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClientWatchLabels {
    /// The `client` label.
    pub client: String,
}

/// The families of this module.
#[derive(Debug, Default)]
pub struct ClientRequests {
    /// `mvproxy_client_requests_total`: resource requests, by client and verb.
    pub requests: Family<ClientRequestLabels, Counter>,
    /// `mvproxy_client_watches_open`: watches answered `200` whose response is still open.
    pub watches_open: Family<ClientWatchLabels, Gauge>,
}

/// Registers `families` as `client_requests` and `client_watches_open` in `r` (the
/// `mvproxy`-prefixed registry), declared from the first scrape: their series are named by
/// clients, so none exists before one.
pub(super) fn register(r: &mut Registry, families: &ClientRequests) {
    r.register(
        "client_requests",
        "Resource requests received, by client (from the User-Agent, as mvproxy_skew_requests_total names it) and kube verb; counted on arrival by the proxy the client talked to",
        Declared(families.requests.clone()),
    );
    r.register(
        "client_watches_open",
        "Watches open through this proxy, by client (as mvproxy_client_requests_total names it): answered 200 and not yet ended by the server, the client or a broken connection",
        Declared(families.watches_open.clone()),
    );
}

#[cfg(test)]
mod tests {
    use super::super::{Metrics, encode};
    use super::*;

    #[test]
    fn the_families_are_declared_at_once_and_count_per_client_and_verb() {
        let mut registry = Registry::default();
        let m = Metrics::register(&mut registry);
        let (text, _) = encode(&registry, false).unwrap();
        for declared in [
            "# TYPE mvproxy_client_requests_total counter\n",
            "# TYPE mvproxy_client_watches_open gauge\n",
        ] {
            assert!(text.contains(declared), "{text}");
        }
        for kube_verb in [
            "list",
            "list",
            "watch",
            "get",
            "update",
            "deletecollection",
            "",
        ] {
            m.client_requests
                .requests
                .get_or_create(&ClientRequestLabels {
                    client: "kubectl".into(),
                    verb: verb(kube_verb),
                })
                .inc();
        }
        let (text, _) = encode(&registry, false).unwrap();
        for line in [
            "mvproxy_client_requests_total{client=\"kubectl\",verb=\"list\"} 2",
            "mvproxy_client_requests_total{client=\"kubectl\",verb=\"watch\"} 1",
            "mvproxy_client_requests_total{client=\"kubectl\",verb=\"get\"} 1",
            "mvproxy_client_requests_total{client=\"kubectl\",verb=\"update\"} 1",
            "mvproxy_client_requests_total{client=\"kubectl\",verb=\"deletecollection\"} 1",
            "mvproxy_client_requests_total{client=\"kubectl\",verb=\"other\"} 1",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }

    #[test]
    fn every_verb_kube_apiserver_names_is_its_own_label() {
        for v in VERBS {
            assert_eq!(verb(v), v);
        }
        assert_eq!(verb("escalate"), OTHER_VERB);
    }
}
