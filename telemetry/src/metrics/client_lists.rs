//! `mvproxy_client_list_requests_total{client, verb}`: list and watch requests per client, and
//! `mvproxy_client_watches_open{client}`: the watches each client holds open through this proxy.
//!
//! A rolling upgrade restarts API servers one by one; every watch on a restarted server
//! breaks, and a client whose informers then relist instead of resuming from their
//! `resourceVersion` floods the remaining servers with lists (a relist storm). Counting lists
//! and watches per client, before, during and after each step, is how a rehearsal through
//! mvproxy shows it caused none, and which client would be the one to storm. The watches open
//! are what a proxy holds for each client (a connection's stream and its buffers each): after a
//! restart each client should be back at its level before it, no higher (a client that opens
//! watches and never closes them leaks them) and no lower (informers that did not resume).
//!
//! `client` is the bounded name of `mvproxy_skew_requests_total` (the program from the
//! `User-Agent`, with its ServiceAccount when it carries one, at most
//! `--max-tracked-clients` names, then [`OTHER_CLIENT`](super::OTHER_CLIENT)), resolved by the
//! same registry, so one client has one label value in every family; `verb` is [`LIST`] or
//! [`WATCH`], the kube verb of the request. The family has its own module so that the
//! families' module, near its size limit, changes by one field and one registration.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::Declared;

/// `verb` of a list request (`GET` of a collection).
pub const LIST: &str = "list";
/// `verb` of a watch request (`?watch=true`, or the deprecated `/watch/` prefix).
pub const WATCH: &str = "watch";
/// Every `verb` of `mvproxy_client_list_requests_total`.
pub const VERBS: [&str; 2] = [LIST, WATCH];

/// The `verb` label of a request with kube verb `kube_verb`, or `None` for every verb this
/// family does not count (get, create, update, patch, delete, …).
pub fn verb(kube_verb: &str) -> Option<&'static str> {
    match kube_verb {
        "list" => Some(LIST),
        "watch" => Some(WATCH),
        _ => None,
    }
}

/// `mvproxy_client_list_requests_total` labels. `client` as in
/// [`SkewLabels`](super::SkewLabels), `verb` one of [`VERBS`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClientListLabels {
    /// The `client` label.
    pub client: String,
    /// The `verb` label.
    pub verb: &'static str,
}

/// `mvproxy_client_watches_open` labels: `client` as in [`ClientListLabels`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClientWatchLabels {
    /// The `client` label.
    pub client: String,
}

/// The families of this module.
#[derive(Debug, Default)]
pub struct ClientReads {
    /// `mvproxy_client_list_requests_total`: list and watch requests, by client and verb.
    pub requests: Family<ClientListLabels, Counter>,
    /// `mvproxy_client_watches_open`: watches answered `200` whose response is still open.
    pub watches_open: Family<ClientWatchLabels, Gauge>,
}

/// Registers `reads` as `client_list_requests` and `client_watches_open` in `r` (the
/// `mvproxy`-prefixed registry), declared from the first scrape: their series are named by
/// clients, so none exists before one.
pub(super) fn register(r: &mut Registry, reads: &ClientReads) {
    r.register(
        "client_list_requests",
        "List and watch requests received, by client (from the User-Agent, as mvproxy_skew_requests_total names it) and verb; counted on arrival by the proxy the client talked to",
        Declared(reads.requests.clone()),
    );
    r.register(
        "client_watches_open",
        "Watches open through this proxy, by client (as mvproxy_client_list_requests_total names it): answered 200 and not yet ended by the server, the client or a broken connection",
        Declared(reads.watches_open.clone()),
    );
}

#[cfg(test)]
mod tests {
    use super::super::{Metrics, encode};
    use super::*;

    #[test]
    fn the_family_is_declared_at_once_and_counts_per_client_and_verb() {
        let mut registry = Registry::default();
        let m = Metrics::register(&mut registry);
        let (text, _) = encode(&registry, false).unwrap();
        for declared in [
            "# TYPE mvproxy_client_list_requests_total counter\n",
            "# TYPE mvproxy_client_watches_open gauge\n",
        ] {
            assert!(text.contains(declared), "{text}");
        }
        assert_eq!(verb("get"), None);
        assert_eq!(verb("deletecollection"), None);
        for kube_verb in ["list", "list", "watch"] {
            let verb = verb(kube_verb).unwrap();
            m.client_reads
                .requests
                .get_or_create(&ClientListLabels {
                    client: "kubectl".into(),
                    verb,
                })
                .inc();
        }
        let (text, _) = encode(&registry, false).unwrap();
        for line in [
            "mvproxy_client_list_requests_total{client=\"kubectl\",verb=\"list\"} 2",
            "mvproxy_client_list_requests_total{client=\"kubectl\",verb=\"watch\"} 1",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }
}
