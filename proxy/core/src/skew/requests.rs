//! `mvproxy_client_requests_total` on the request path, at the cost of a hash.
//!
//! Every resource request is counted under its client's name, and naming a client costs a
//! parse of its `User-Agent`, the client registry's lock, and a label built and hashed for the
//! family: about 4 500 instructions, 4 % of a request (`bench/PERF_NOTES.md`, thirteenth
//! round). A client sends the same `User-Agent` (and is the same user) request after request,
//! so once named, its counters are kept per pair of those header values: its next request
//! costs a hash of their bytes, a read lock and an atomic add (nothing is cloned: each
//! reference count taken and dropped would be two locked instructions more, bench/PERF_NOTES.md,
//! thirty-eighth round). The cache holds at most
//! [`MAX_CACHED`] pairs; requests of pairs past it take the slow path, and are counted all the
//! same.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use http::HeaderValue;
use mvproxy_telemetry::metrics::client_requests::{ClientRequestLabels, VERBS, WATCH};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// Pairs of `User-Agent` and user kept at most.
pub const MAX_CACHED: usize = 1024;

/// The header values a client is named from: `User-Agent`, and the authenticated user.
pub(super) type Sender = (Option<HeaderValue>, Option<HeaderValue>);

/// A named client's label, and its counter per verb (made on the verb's first request, so a
/// client has series only for the verbs it used).
#[derive(Debug)]
struct Named {
    client: Arc<str>,
    counters: [OnceLock<Counter>; VERBS.len()],
}

impl Named {
    fn count(
        &self,
        verb: &'static str,
        family: &Family<ClientRequestLabels, Counter>,
    ) -> Option<Arc<str>> {
        let i = VERBS
            .iter()
            .position(|v| *v == verb)
            .unwrap_or(VERBS.len() - 1);
        self.counters[i]
            .get_or_init(|| {
                family
                    .get_or_create(&ClientRequestLabels {
                        client: self.client.to_string(),
                        verb: VERBS[i],
                    })
                    .clone()
            })
            .inc();
        (verb == WATCH).then(|| self.client.clone())
    }
}

/// The counters of named senders.
#[derive(Debug, Default)]
pub(super) struct RequestCounters {
    named: RwLock<HashMap<Sender, Arc<Named>, foldhash::fast::RandomState>>,
}

impl RequestCounters {
    /// Counts one request of `verb` (one of [`VERBS`]) from `sender` in `family`, naming the
    /// client with `name` the first time; returns the client's name for a watch (the label of
    /// its `mvproxy_client_watches_open`).
    pub(super) fn count(
        &self,
        sender: &Sender,
        verb: &'static str,
        family: &Family<ClientRequestLabels, Counter>,
        name: impl FnOnce() -> Arc<str>,
    ) -> Option<Arc<str>> {
        // Counted under the read lock: the sender's entry is not cloned out of it.
        if let Some(named) = self
            .named
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(sender)
        {
            return named.count(verb, family);
        }
        let named = Arc::new(Named {
            client: name(),
            counters: Default::default(),
        });
        let mut map = self.named.write().unwrap_or_else(PoisonError::into_inner);
        let named = if map.len() < MAX_CACHED {
            map.entry(sender.clone()).or_insert(named)
        } else {
            &named
        };
        named.count(verb, family)
    }

    /// Pairs cached.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.named
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sender(agent: &str) -> Sender {
        (Some(HeaderValue::from_str(agent).unwrap()), None)
    }

    #[test]
    fn a_sender_is_named_once_and_counted_per_verb() {
        let family = Family::<ClientRequestLabels, Counter>::default();
        let counters = RequestCounters::default();
        let mut named = 0;
        for verb in ["get", "get", "list", "update", "watch"] {
            let client = counters.count(&sender("kubelet/v1.36.3"), verb, &family, || {
                named += 1;
                Arc::from("kubelet")
            });
            // Only a watch's name is wanted (its gauge's label).
            assert_eq!(client.as_deref(), (verb == "watch").then_some("kubelet"));
        }
        assert_eq!(named, 1);
        let value = |verb: &'static str| {
            family
                .get_or_create(&ClientRequestLabels {
                    client: "kubelet".into(),
                    verb,
                })
                .get()
        };
        assert_eq!(
            (value("get"), value("list"), value("update"), value("watch")),
            (2, 1, 1, 1)
        );
        // the same agent as another user is another sender, named again
        let other = (
            Some(HeaderValue::from_static("kubelet/v1.36.3")),
            Some(HeaderValue::from_static("system:node:n1")),
        );
        counters.count(&other, "get", &family, || Arc::from("kubelet"));
        assert_eq!(counters.len(), 2);
        assert_eq!(value("get"), 3);
    }

    #[test]
    fn past_the_bound_senders_are_still_counted_but_not_kept() {
        let family = Family::<ClientRequestLabels, Counter>::default();
        let counters = RequestCounters::default();
        for i in 0..MAX_CACHED + 10 {
            counters.count(&sender(&format!("storm-{i}/v1")), "list", &family, || {
                Arc::from("other")
            });
        }
        assert_eq!(counters.len(), MAX_CACHED);
        let total = family
            .get_or_create(&ClientRequestLabels {
                client: "other".into(),
                verb: "list",
            })
            .get();
        assert_eq!(total, (MAX_CACHED + 10) as u64);
    }
}
