//! `mvproxy_undecodable_objects_total{group, version, resource, server_release}`: objects one
//! release stored that a server of another release cannot decode.
//!
//! A release that drops an alpha version (kube-apiserver 1.37 dropped
//! `scheduling.k8s.io/v1alpha2`) cannot read what an older server stored at it in the shared
//! etcd: every list of the resource through it fails with `500`, whatever version is asked
//! for, and its controllers never finish with those objects. No routing fixes storage, so
//! mvproxy counts the failures to say which stored versions must be deleted or migrated
//! before the server that cannot read them takes over.
//!
//! `group` and `version` are the stored group-version the server named (checked to be a
//! plausible group-version, cut to a fixed length), `resource` the requested GVR's resource,
//! counted only when some server serves that GVR, and `server_release` the release
//! (`major.minor`) of the server that answered, or [`UNKNOWN_RELEASE`]: all bounded by the
//! servers. The family has its own module so that the families' module, near its size limit,
//! changes by one field and one registration.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::Declared;

/// `server_release` of a server whose `/version` could not be read.
pub const UNKNOWN_RELEASE: &str = "unknown";

/// `mvproxy_undecodable_objects_total` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UndecodableLabels {
    /// The `group` label: the stored group the server cannot decode (`""`: core).
    pub group: String,
    /// The `version` label: the stored version the server cannot decode.
    pub version: String,
    /// The `resource` label: the resource of the request that failed.
    pub resource: String,
    /// The `server_release` label: the release of the server that could not decode it.
    pub server_release: String,
}

/// Registers `family` as `undecodable_objects` in `r` (the `mvproxy`-prefixed registry),
/// declared from the first scrape.
pub(super) fn register(r: &mut Registry, family: &Family<UndecodableLabels, Counter>) {
    r.register(
        "undecodable_objects",
        "Responses (500) in which an API server said it cannot decode an object stored in etcd at a group-version it does not know, by that stored group-version, the resource requested and the release of the server",
        Declared(family.clone()),
    );
}

#[cfg(test)]
mod tests {
    use super::super::{Metrics, encode};
    use super::*;

    #[test]
    fn the_family_is_declared_at_once_and_counts_per_stored_version_and_release() {
        let mut registry = Registry::default();
        let m = Metrics::register(&mut registry);
        let (text, _) = encode(&registry, false).unwrap();
        assert!(
            text.contains("# TYPE mvproxy_undecodable_objects_total counter\n"),
            "{text}"
        );
        m.undecodable_objects
            .get_or_create(&UndecodableLabels {
                group: "scheduling.k8s.io".into(),
                version: "v1alpha2".into(),
                resource: "podgroups".into(),
                server_release: "1.37".into(),
            })
            .inc();
        let (text, _) = encode(&registry, false).unwrap();
        let line = "mvproxy_undecodable_objects_total{group=\"scheduling.k8s.io\",version=\"v1alpha2\",resource=\"podgroups\",server_release=\"1.37\"} 1";
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}
