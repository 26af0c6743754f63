//! Every label value mvproxy writes that says *why* or *where*, in one place: the modules that
//! count use these constants, and the dashboards and rules (deploy/, dashboards/) match them.

/// `route` of `mvproxy_requests_total` and the `mvproxy.route` span attribute.
pub const ROUTE_LOCAL: &str = "local";
/// Sent to a peer.
pub const ROUTE_PEER: &str = "peer";
/// Merged discovery, answered by mvproxy.
pub const ROUTE_DISCOVERY: &str = "discovery";

/// `reason` of `mvproxy_requests_total` (the `mvproxy.reason` span attribute).
pub const REASON_NON_RESOURCE: &str = "non_resource";
/// A peer already proxied it.
pub const REASON_ALREADY_PROXIED: &str = "already_proxied";
/// Discovery not synced yet.
pub const REASON_NOT_SYNCED: &str = "not_synced";
/// The local server serves the GVR.
pub const REASON_SERVED_LOCALLY: &str = "served_locally";
/// No server serves the GVR.
pub const REASON_NO_PEER: &str = "no_peer";
/// Only peers serve the GVR.
pub const REASON_PEER_ONLY: &str = "peer_only";

/// `type` of `mvproxy_peer_proxy_errors_total` (upstream's values): no capable peer could
/// be chosen or reached by name.
pub const ENDPOINT_RESOLUTION: &str = "endpoint_resolution";
/// `type` of `mvproxy_peer_proxy_errors_total` and `mvproxy_local_proxy_errors_total`:
/// the hop failed (connect, TLS, no answer in time).
pub const PROXY_TRANSPORT: &str = "proxy_transport";
/// Every `type` of `mvproxy_peer_proxy_errors_total`.
pub const PEER_PROXY_ERROR_TYPES: [&str; 2] = [ENDPOINT_RESOLUTION, PROXY_TRANSPORT];
/// Every `type` of `mvproxy_local_proxy_errors_total`.
pub const LOCAL_PROXY_ERROR_TYPES: [&str; 1] = [PROXY_TRANSPORT];

/// `protocol` of `mvproxy_upstream_replays_total`: HTTP/1.1.
pub const HTTP1: &str = "http1";
/// HTTP/2.
pub const HTTP2: &str = "http2";
/// `upstream` of `mvproxy_upstream_replays_total`: the local API server.
pub const UPSTREAM_LOCAL: &str = "local";
/// A peer.
pub const UPSTREAM_PEER: &str = "peer";

/// `type` of `mvproxy_peer_discovery_sync_errors_total`: a server's host name did not
/// resolve.
pub const HOSTPORT_RESOLUTION: &str = "hostport_resolution";
/// A server's discovery documents could not be fetched or read.
pub const FETCH_DISCOVERY: &str = "fetch_discovery";
/// Listing or watching the identity Leases (the lease peer source) failed.
pub const LEASE_LIST: &str = "lease_list";
/// Listing or watching the `kubernetes` EndpointSlices (that peer source) failed.
pub const ENDPOINTSLICE_LIST: &str = "endpointslice_list";
/// Every `type` of `mvproxy_peer_discovery_sync_errors_total`.
pub const SYNC_ERROR_TYPES: [&str; 4] = [
    HOSTPORT_RESOLUTION,
    FETCH_DISCOVERY,
    LEASE_LIST,
    ENDPOINTSLICE_LIST,
];

/// `result` of the lookup and merge families.
pub const HIT: &str = "hit";
/// Not found, or rebuilt.
pub const MISS: &str = "miss";

/// `document` of the OpenAPI merge families: the merged `/openapi/v3` index.
pub const OPENAPI_V3_INDEX: &str = "v3_index";
/// The merged `/openapi/v2` as JSON.
pub const OPENAPI_V2_JSON: &str = "v2_json";
/// The merged `/openapi/v2` as protobuf (gnostic's `openapi.v2.Document`).
pub const OPENAPI_V2_PROTOBUF: &str = "v2_protobuf";
/// Every `document` of the OpenAPI merge families.
pub const OPENAPI_DOCUMENTS: [&str; 3] = [OPENAPI_V3_INDEX, OPENAPI_V2_JSON, OPENAPI_V2_PROTOBUF];

/// `document` of `mvproxy_discovery_document_merges_total`: the legacy `APIGroup` of
/// `/apis/{group}`.
pub const DISCOVERY_API_GROUP: &str = "apigroup";
/// The legacy `APIResourceList` of `/apis/{group}/{version}` or `/api/{version}`.
pub const DISCOVERY_API_RESOURCE_LIST: &str = "apiresourcelist";
/// Every `document` of `mvproxy_discovery_document_merges_total`.
pub const DISCOVERY_DOCUMENTS: [&str; 2] = [DISCOVERY_API_GROUP, DISCOVERY_API_RESOURCE_LIST];

/// `availability` of `mvproxy_target_missing_requests_total`: the target release cannot
/// serve the GVR whatever its configuration.
pub const AVAILABILITY_NEVER: &str = "never";
/// The target release serves it only once turned on (`--runtime-config`, feature gates).
pub const AVAILABILITY_OFF_BY_DEFAULT: &str = "off_by_default";

/// `hit` or `miss`.
pub fn result(hit: bool) -> &'static str {
    if hit { HIT } else { MISS }
}
