//! Request paths and `Accept` values the tests share, named by what the two-release control
//! plane (`cluster.rs`: stand-ins of 1.34, `apiserver-a`, and 1.31, `apiserver-b`) serves.

/// Served by both releases: a proxy sends it to its local API server.
pub const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";
/// Served by both releases: a proxy sends it to its local API server.
pub const PODS: &str = "/api/v1/namespaces/default/pods";
/// Only 1.31 (`apiserver-b`) serves this GVR: from proxy A it takes the peer hop.
pub const OLD_ONLY: &str =
    "/apis/resource.k8s.io/v1alpha3/namespaces/default/podschedulingcontexts";
/// Only 1.34 (`apiserver-a`) serves this GVR: from proxy B it takes the peer hop.
pub const NEW_ONLY: &str = "/apis/coordination.k8s.io/v1beta1/namespaces/default/leasecandidates";

/// `Accept` for aggregated discovery (v2), as kubectl sends it: the merged document.
pub const V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
/// `Accept` for aggregated discovery's `nopeer` profile: the local server's document only.
pub const NOPEER: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer";
