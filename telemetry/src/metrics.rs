//! The Prometheus metric families of the telemetry contract (docs/telemetry.md, "Metrics"), and their exposition.
//!
//! Names are public interface: dashboards, alert rules and upstream's own dashboards (the
//! `apiserver_*` peer-proxy families, kept under the `mvproxy_` prefix) depend on them. The
//! registry is built here and passed around in an `Arc`, never global, so a test can run
//! several proxies in one process. Label values that say *why* are `&'static str` constants.

pub mod client_requests;
mod handles;
pub mod undecodable;
pub mod values;

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::exemplar::HistogramWithExemplars;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use handles::{HandleCache, cached, key};

/// Request-latency buckets, equal to the collector's span-metrics buckets (seconds).
pub const REQUEST_BUCKETS: [f64; 9] = [0.005, 0.01, 0.015, 0.03, 0.05, 0.1, 0.3, 0.5, 1.0];
/// Cache lookups and merges take microseconds: sub-millisecond buckets, then the request ones.
pub const FAST_BUCKETS: [f64; 15] = [
    0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.005, 0.01, 0.03,
    0.05, 0.1, 0.5, 1.0,
];
/// Discovery fetches cross the network and may take seconds.
pub const FETCH_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.015, 0.03, 0.05, 0.1, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// `mvproxy_rerouted_request_total` labels (upstream's).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RerouteLabels {
    /// The `code` label.
    pub code: u16,
    /// The `group` label.
    pub group: String,
    /// The `version` label.
    pub version: String,
    /// The `resource` label.
    pub resource: String,
}

/// `mvproxy_peer_proxy_errors_total` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerErrorLabels {
    /// The `type` label.
    pub r#type: &'static str,
    /// The `group` label.
    pub group: String,
    /// The `version` label.
    pub version: String,
    /// The `resource` label.
    pub resource: String,
}

/// `type` label alone.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TypeLabels {
    /// The `type` label.
    pub r#type: &'static str,
}

/// `mvproxy_requests_total` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The `route` label.
    pub route: &'static str,
    /// The `reason` label.
    pub reason: &'static str,
    /// The `peer` label.
    pub peer: String,
    /// The `code` label.
    pub code: u16,
    /// The `method` label.
    pub method: &'static str,
}

/// `mvproxy_request_duration_seconds` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// The `route` label.
    pub route: &'static str,
    /// The `peer` label.
    pub peer: String,
}

/// `result` = `hit` | `miss`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// The `result` label.
    pub result: &'static str,
}

/// Labels of `mvproxy_upstream_replays_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReplayLabels {
    /// `local` or `peer`.
    pub upstream: &'static str,
    /// `http1` or `http2`.
    pub protocol: &'static str,
}

/// `document` and `result` of `mvproxy_openapi_merges_total` and
/// `mvproxy_discovery_document_merges_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpenApiMergeLabels {
    /// The `document` label (`values::OPENAPI_DOCUMENTS` or `values::DISCOVERY_DOCUMENTS`).
    pub document: &'static str,
    /// The `result` label: `hit` from the snapshot's cache, `miss` when fetched and merged.
    pub result: &'static str,
}

/// `document` label alone.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DocumentLabels {
    /// The `document` label (`values::OPENAPI_DOCUMENTS`).
    pub document: &'static str,
}

/// `peer` label alone.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerLabels {
    /// The `peer` label.
    pub peer: String,
}

/// `server` label alone.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServerLabels {
    /// The `server` label.
    pub server: String,
}

/// Label values of `side` in `mvproxy_skew_requests_total`: which servers serve the GVR of a
/// request that not every server serves, judged from each server's `/version`.
pub mod side {
    /// Only servers older than the newest release serve it: the request breaks once the
    /// upgrade completes.
    pub const OLD_ONLY: &str = "old_only";
    /// Only servers of the newest release serve it: the request breaks on a rollback.
    pub const NEW_ONLY: &str = "new_only";
    /// Some servers of one release serve it and others of the same release do not (a
    /// feature gate, `--runtime-config`, or a single release with uneven surfaces).
    pub const PARTIAL: &str = "partial";
    /// Some server's release is unknown (its `/version` could not be read).
    pub const UNKNOWN: &str = "unknown";
}

/// The `client` of every agent past the tracked-clients bound (`--max-tracked-clients`).
pub const OTHER_CLIENT: &str = "other";

/// `mvproxy_skew_requests_total` labels. `client` is a bounded name derived from the
/// `User-Agent` (never the raw header), `side` one of [`side`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SkewLabels {
    /// The `client` label.
    pub client: String,
    /// The `group` label.
    pub group: String,
    /// The `version` label.
    pub version: String,
    /// The `resource` label.
    pub resource: String,
    /// The `side` label.
    pub side: &'static str,
}

/// `mvproxy_target_missing_requests_total` labels: a request for a GVR the target release
/// (`--target-release`, `--target-discovery`) does not serve. `client` as in [`SkewLabels`];
/// `target` the release (`1.36`), the target's `gitVersion`, or `custom`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TargetMissingLabels {
    /// The `client` label.
    pub client: String,
    /// The `group` label.
    pub group: String,
    /// The `version` label.
    pub version: String,
    /// The `resource` label.
    pub resource: String,
    /// The `target` label.
    pub target: String,
    /// The `availability` label: `never` (the target cannot serve it whatever its
    /// configuration) or `off_by_default` (it can, once turned on).
    pub availability: &'static str,
}

/// `mvproxy_server_info` labels: a server and the `gitVersion` its `/version` reports (cut to
/// 64 characters where it is read), so a dashboard can mark each server's version change.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServerInfoLabels {
    /// The `server` label (as in `mvproxy_discovery_resources`).
    pub server: String,
    /// The `git_version` label.
    pub git_version: String,
}

/// `target` label alone (`mvproxy_target_info`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TargetLabels {
    /// The `target` label.
    pub target: String,
}

/// `mvproxy_deprecated_requests_total` labels: a request the API server answered with a
/// deprecation warning. `client` as in [`SkewLabels`]; group, version and resource as the client
/// requested them; `removed_in` the release the warning names (`1.25`), or
/// [`REMOVED_IN_UNKNOWN`] when it names none.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeprecatedLabels {
    /// The `client` label.
    pub client: String,
    /// The `group` label.
    pub group: String,
    /// The `version` label.
    pub version: String,
    /// The `resource` label.
    pub resource: String,
    /// The `removed_in` label.
    pub removed_in: String,
}

/// `removed_in` of a deprecation warning that names no release of removal.
pub const REMOVED_IN_UNKNOWN: &str = "unknown";

/// `mvproxy_deletions_waiting_total` labels: an object a `DELETE` left pending on a finalizer
/// that only another release's kube-controller-manager removes. `release` names the releases
/// whose controller-manager removes it (`1.36+`); every value comes from a fixed catalog.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeletionWaitingLabels {
    /// The `group` label.
    pub group: String,
    /// The `version` label.
    pub version: String,
    /// The `resource` label.
    pub resource: String,
    /// The `finalizer` label.
    pub finalizer: &'static str,
    /// The `release` label.
    pub release: String,
}

/// Exemplar labels: the trace that a latency observation came from.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TraceLabels {
    /// The `trace_id` label.
    pub trace_id: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;
type ExemplarHistogramFamily<L> =
    Family<L, HistogramWithExemplars<TraceLabels>, fn() -> HistogramWithExemplars<TraceLabels>>;

fn request_histogram() -> HistogramWithExemplars<TraceLabels> {
    HistogramWithExemplars::new(REQUEST_BUCKETS.into_iter())
}

fn fast_histogram() -> Histogram {
    Histogram::new(FAST_BUCKETS)
}

fn fetch_histogram() -> Histogram {
    Histogram::new(FETCH_BUCKETS)
}

/// Every family of the contract.
#[derive(Debug)]
pub struct Metrics {
    /// `mvproxy_rerouted_request_total`: requests a peer answered.
    pub rerouted_requests: Family<RerouteLabels, Counter>,
    /// `mvproxy_peer_proxy_errors_total`: requests that could not go to a peer.
    pub peer_proxy_errors: Family<PeerErrorLabels, Counter>,
    /// `mvproxy_peer_discovery_sync_errors_total`: failed syncs of peer discovery.
    pub peer_discovery_sync_errors: Family<TypeLabels, Counter>,
    /// Failures talking to the local API server (mvproxy answers 503/504 itself): not peer
    /// errors, so not in `peer_proxy_errors`.
    pub local_proxy_errors: Family<TypeLabels, Counter>,
    /// `mvproxy_discovery_nopeer_requests_total`: `profile=nopeer` discovery requests.
    pub discovery_nopeer_requests: Counter,
    /// `mvproxy_requests_total`: every request, by route, reason, peer, code and method.
    pub requests: Family<RequestLabels, Counter>,
    /// Carries the sampled trace id of an observation as an exemplar (OpenMetrics only).
    pub request_duration: ExemplarHistogramFamily<RouteLabels>,
    /// `mvproxy_discovery_cache_lookups_total`: routing-index lookups, hit or miss.
    pub cache_lookups: Family<ResultLabels, Counter>,
    /// `mvproxy_discovery_cache_lookup_duration_seconds`.
    pub cache_lookup_duration: HistogramFamily<ResultLabels>,
    /// `mvproxy_discovery_merges_total`: merged `/apis` served, from the snapshot or rebuilt.
    pub merges: Family<ResultLabels, Counter>,
    /// `mvproxy_discovery_merge_duration_seconds`.
    pub merge_duration: Histogram,
    /// `mvproxy_discovery_document_merges_total`: merged legacy documents of one group or
    /// group-version served, by document, from the snapshot's cache or built.
    pub document_merges: Family<OpenApiMergeLabels, Counter>,
    /// `mvproxy_openapi_merges_total`: merged OpenAPI documents served, by document, from
    /// the snapshot's cache or fetched and merged.
    pub openapi_merges: Family<OpenApiMergeLabels, Counter>,
    /// `mvproxy_openapi_merge_duration_seconds`: fetching the servers' documents and merging
    /// them, by document.
    pub openapi_merge_duration: HistogramFamily<DocumentLabels>,
    /// `mvproxy_peer_discovery_fetch_duration_seconds`.
    pub peer_fetch_duration: HistogramFamily<PeerLabels>,
    /// `mvproxy_peer_up`: 1 if the last discovery fetch of the peer succeeded.
    pub peer_up: Family<PeerLabels, Gauge>,
    /// `mvproxy_discovery_resources`: GVRs each server serves.
    pub discovery_resources: Family<ServerLabels, Gauge>,
    /// `mvproxy_server_info`: 1 per server, labelled with the `gitVersion` it last reported.
    pub server_info: Family<ServerInfoLabels, Gauge>,
    /// Requests for a GVR not every server serves, by client and side of the skew.
    pub skew_requests: Family<SkewLabels, Counter>,
    /// Requests for a GVR the target release does not serve, by client.
    pub target_missing_requests: Family<TargetMissingLabels, Counter>,
    /// `mvproxy_target_info`: 1 for the target release this proxy judges requests against,
    /// from the start (absent without a target).
    pub target_info: Family<TargetLabels, Gauge>,
    /// Requests answered with a deprecation warning, by client and release of removal.
    pub deprecated_requests: Family<DeprecatedLabels, Counter>,
    /// Objects a `DELETE` left waiting on a controller of another release, by finalizer.
    pub deletions_waiting: Family<DeletionWaitingLabels, Counter>,
    /// Requests sent to an upstream a second time (the first attempt was written and not
    /// processed), by upstream and protocol.
    pub upstream_replays: Family<ReplayLabels, Counter>,
    /// Resource requests received and watches open, by client (`mvproxy_client_*`).
    pub client_requests: client_requests::ClientRequests,
    /// `mvproxy_undecodable_objects_total`: stored objects a server cannot decode.
    pub undecodable_objects: Family<undecodable::UndecodableLabels, Counter>,
    /// Handles of the series every request touches.
    handles: HandleCache,
}

impl Metrics {
    /// Creates the families and registers them under `mvproxy_` in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            rerouted_requests: Family::default(),
            peer_proxy_errors: Family::default(),
            peer_discovery_sync_errors: Family::default(),
            local_proxy_errors: Family::default(),
            discovery_nopeer_requests: Counter::default(),
            requests: Family::default(),
            request_duration: Family::new_with_constructor(request_histogram),
            cache_lookups: Family::default(),
            cache_lookup_duration: Family::new_with_constructor(fast_histogram),
            merges: Family::default(),
            merge_duration: fast_histogram(),
            document_merges: Family::default(),
            openapi_merges: Family::default(),
            openapi_merge_duration: Family::new_with_constructor(fetch_histogram),
            peer_fetch_duration: Family::new_with_constructor(fetch_histogram),
            peer_up: Family::default(),
            discovery_resources: Family::default(),
            server_info: Family::default(),
            skew_requests: Family::default(),
            target_missing_requests: Family::default(),
            target_info: Family::default(),
            deprecated_requests: Family::default(),
            deletions_waiting: Family::default(),
            upstream_replays: Family::default(),
            client_requests: client_requests::ClientRequests::default(),
            undecodable_objects: Family::default(),
            handles: HandleCache::default(),
        };
        let r = registry.sub_registry_with_prefix("mvproxy");
        r.register(
            "rerouted_request",
            "Requests forwarded to a peer API server, by final status code and GVR",
            Declared(m.rerouted_requests.clone()),
        );
        r.register(
            "peer_proxy_errors",
            "Requests that could not be forwarded to a peer, by error type and GVR",
            Declared(m.peer_proxy_errors.clone()),
        );
        r.register(
            "peer_discovery_sync_errors",
            "Failed syncs of peer discovery, by error type",
            Declared(m.peer_discovery_sync_errors.clone()),
        );
        r.register(
            "local_proxy_errors",
            "Requests that could not be forwarded to the local API server, by error type",
            Declared(m.local_proxy_errors.clone()),
        );
        r.register(
            "discovery_nopeer_requests",
            "Discovery requests that asked for the local server only (profile=nopeer)",
            m.discovery_nopeer_requests.clone(),
        );
        r.register(
            "requests",
            "Requests received, by route, reason, peer, status code and method",
            Declared(m.requests.clone()),
        );
        r.register_with_unit(
            "request_duration",
            "Time from request received to response headers sent, by route and peer",
            Unit::Seconds,
            Declared(m.request_duration.clone()),
        );
        r.register(
            "discovery_cache_lookups",
            "Routing-index lookups of a GVR: hit when some server serves it, miss otherwise",
            Declared(m.cache_lookups.clone()),
        );
        r.register_with_unit(
            "discovery_cache_lookup_duration",
            "Time of one routing-index lookup",
            Unit::Seconds,
            Declared(m.cache_lookup_duration.clone()),
        );
        r.register(
            "discovery_merges",
            "Merged /apis documents served: hit from cache, miss when rebuilt",
            Declared(m.merges.clone()),
        );
        r.register_with_unit(
            "discovery_merge_duration",
            "Time to rebuild the merged /apis document",
            Unit::Seconds,
            m.merge_duration.clone(),
        );
        r.register(
            "discovery_document_merges",
            "Merged legacy discovery documents of one group (apigroup) or group-version (apiresourcelist) served: hit from the snapshot's cache, miss when built",
            Declared(m.document_merges.clone()),
        );
        r.register(
            "openapi_merges",
            "Merged OpenAPI documents (/openapi/v3, /openapi/v2) served: hit from the snapshot's cache, miss when fetched and merged",
            Declared(m.openapi_merges.clone()),
        );
        r.register_with_unit(
            "openapi_merge_duration",
            "Time to fetch the servers' OpenAPI documents and merge them",
            Unit::Seconds,
            Declared(m.openapi_merge_duration.clone()),
        );
        r.register_with_unit(
            "peer_discovery_fetch_duration",
            "Time to fetch one server's discovery (/api and /apis)",
            Unit::Seconds,
            Declared(m.peer_fetch_duration.clone()),
        );
        r.register(
            "peer_up",
            "1 if the last discovery fetch of the server succeeded",
            Declared(m.peer_up.clone()),
        );
        r.register(
            "discovery_resources",
            "GVRs each server serves, as last fetched",
            Declared(m.discovery_resources.clone()),
        );
        r.register(
            "server_info",
            "1 per server, labelled with the gitVersion its /version last reported",
            Declared(m.server_info.clone()),
        );
        // Counters whose label values are all known start at 0, so a family is on /metrics
        // (with its TYPE line) from the first scrape and increase() sees its first error.
        for ty in values::SYNC_ERROR_TYPES {
            let _ = m
                .peer_discovery_sync_errors
                .get_or_create(&TypeLabels { r#type: ty });
        }
        for ty in values::LOCAL_PROXY_ERROR_TYPES {
            let _ = m
                .local_proxy_errors
                .get_or_create(&TypeLabels { r#type: ty });
        }
        for result in [values::HIT, values::MISS] {
            let _ = m.cache_lookups.get_or_create(&ResultLabels { result });
            let _ = m
                .cache_lookup_duration
                .get_or_create(&ResultLabels { result });
            let _ = m.merges.get_or_create(&ResultLabels { result });
            for document in values::OPENAPI_DOCUMENTS {
                let _ = m
                    .openapi_merges
                    .get_or_create(&OpenApiMergeLabels { document, result });
            }
            for document in values::DISCOVERY_DOCUMENTS {
                let _ = m
                    .document_merges
                    .get_or_create(&OpenApiMergeLabels { document, result });
            }
        }
        // No GVR: what a peer error of a GVR no server is known to serve counts under.
        for ty in [values::ENDPOINT_RESOLUTION, values::PROXY_TRANSPORT] {
            let _ = m.peer_proxy_errors.get_or_create(&PeerErrorLabels {
                r#type: ty,
                group: String::new(),
                version: String::new(),
                resource: String::new(),
            });
        }
        // The local routes' latency has no peer.
        for route in [values::ROUTE_LOCAL, values::ROUTE_DISCOVERY] {
            let _ = m.request_duration.get_or_create(&RouteLabels {
                route,
                peer: String::new(),
            });
        }
        r.register(
            "skew_requests",
            "Requests for a GVR that not every server serves, by client (from the User-Agent), GVR and side of the skew",
            Declared(m.skew_requests.clone()),
        );
        r.register(
            "target_missing_requests",
            "Requests for a GVR the target release does not serve, by client (from the User-Agent), GVR and target",
            Declared(m.target_missing_requests.clone()),
        );
        r.register(
            "target_info",
            "1 for the target release requests are judged against (--target-release, --target-discovery)",
            Declared(m.target_info.clone()),
        );
        r.register(
            "deprecated_requests",
            "Requests an API server answered with a deprecation warning, by client, GVR as requested and the release that removes it",
            Declared(m.deprecated_requests.clone()),
        );
        r.register(
            "deletions_waiting",
            "Objects a DELETE left pending on a finalizer that only a kube-controller-manager of another release removes, by GVR, finalizer and the releases that remove it",
            Declared(m.deletions_waiting.clone()),
        );
        r.register(
            "upstream_replays",
            "Requests sent to an upstream a second time because the first attempt was not processed (a reused HTTP/1.1 connection closed before any answer, an HTTP/2 GOAWAY or REFUSED_STREAM), by upstream (local, peer) and protocol",
            Declared(m.upstream_replays.clone()),
        );
        for upstream in [values::UPSTREAM_LOCAL, values::UPSTREAM_PEER] {
            for protocol in [values::HTTP1, values::HTTP2] {
                let _ = m
                    .upstream_replays
                    .get_or_create(&ReplayLabels { upstream, protocol });
            }
        }
        client_requests::register(r, &m.client_requests);
        undecodable::register(r, &m.undecodable_objects);
        m
    }

    /// The counter of replays to `upstream` (`local` or `peer`) over `protocol`, for the
    /// upstream's connection pools.
    pub fn replays(&self, upstream: &'static str, protocol: &'static str) -> Counter {
        self.upstream_replays
            .get_or_create(&ReplayLabels { upstream, protocol })
            .clone()
    }

    /// Counts a request in `mvproxy_requests_total`.
    pub fn count_request(
        &self,
        route: &'static str,
        reason: &'static str,
        peer: &str,
        code: u16,
        method: &'static str,
    ) {
        let labels = || RequestLabels {
            route,
            reason,
            peer: peer.to_owned(),
            code,
            method,
        };
        if !peer.is_empty() {
            self.requests.get_or_create(&labels()).inc();
            return;
        }
        cached(
            &self.handles.requests,
            key(route, reason, method, code),
            || self.requests.get_or_create(&labels()).clone(),
            Counter::inc,
        );
    }

    /// Observes a request's duration in `mvproxy_request_duration_seconds`, with the sampled
    /// trace as exemplar.
    pub fn observe_request(
        &self,
        route: &'static str,
        peer: &str,
        seconds: f64,
        exemplar: Option<TraceLabels>,
    ) {
        let labels = || RouteLabels {
            route,
            peer: peer.to_owned(),
        };
        if !peer.is_empty() {
            self.request_duration
                .get_or_create(&labels())
                .observe(seconds, exemplar, None);
            return;
        }
        cached(
            &self.handles.durations,
            key(route, "", "", 0),
            || self.request_duration.get_or_create(&labels()).clone(),
            |duration| duration.observe(seconds, exemplar, None),
        );
    }

    /// Counts a routing-index lookup (`hit` or not) and observes how long it took.
    pub fn observe_lookup(&self, hit: bool, seconds: f64) {
        let lookups = self.handles.lookups.get_or_init(|| {
            [values::HIT, values::MISS].map(|result| {
                let labels = ResultLabels { result };
                (
                    self.cache_lookups.get_or_create(&labels).clone(),
                    self.cache_lookup_duration.get_or_create(&labels).clone(),
                )
            })
        });
        let (count, duration) = &lookups[usize::from(!hit)];
        count.inc();
        duration.observe(seconds);
    }

    /// Drops every series labelled with `peer` (it left the peer set): its up gauge, its
    /// fetch-latency histogram, its GVR count and its version (`git_version`, the one last
    /// set with [`Metrics::set_server_version`]).
    pub fn forget_peer(&self, peer: &str, git_version: Option<&str>) {
        let labels = PeerLabels {
            peer: peer.to_owned(),
        };
        self.peer_up.remove(&labels);
        self.peer_fetch_duration.remove(&labels);
        self.discovery_resources.remove(&ServerLabels {
            server: peer.to_owned(),
        });
        self.set_server_version(peer, git_version, None);
    }

    /// Moves `server`'s `mvproxy_server_info` series from `was` to `now` (`gitVersion`s):
    /// the old one goes, so each server has at most one, and a version change shows as one
    /// series ending and another starting.
    pub fn set_server_version(&self, server: &str, was: Option<&str>, now: Option<&str>) {
        let labels = |git_version: &str| ServerInfoLabels {
            server: server.to_owned(),
            git_version: git_version.to_owned(),
        };
        if was != now
            && let Some(was) = was
        {
            self.server_info.remove(&labels(was));
        }
        if let Some(now) = now {
            self.server_info.get_or_create(&labels(now)).set(1);
        }
    }
}

/// A family on `/metrics` from the first scrape, with its `HELP` and `TYPE` lines, before it
/// has a series. prometheus-client leaves out a family without series (its `Family` says it is
/// empty, and the registry's encoder skips empty metrics: prometheus-client 0.26,
/// <https://github.com/prometheus/client_rust>, `src/registry.rs` and `src/metrics/family.rs`);
/// a family of client-named series (`mvproxy_skew_requests_total`) or of one made on first
/// use would then appear only after it. Both formats allow a family without samples
/// (OpenMetrics: "A MetricFamily MAY have zero Metrics",
/// <https://github.com/prometheus/OpenMetrics/blob/main/specification/OpenMetrics.md>).
#[derive(Debug)]
struct Declared<M>(M);

impl<M: EncodeMetric> EncodeMetric for Declared<M> {
    fn encode(&self, encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }
}

/// `Content-Type` of the classic Prometheus text format.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
/// `Content-Type` of OpenMetrics text.
pub const OPENMETRICS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Encodes the registry: OpenMetrics when `openmetrics`, else the classic text format.
pub fn encode(
    registry: &Registry,
    openmetrics: bool,
) -> Result<(String, &'static str), std::fmt::Error> {
    let mut out = String::new();
    if openmetrics {
        prometheus_client::encoding::text::encode(&mut out, registry)?;
        Ok((out, OPENMETRICS_TEXT))
    } else {
        prometheus_client::encoding::prometheus_text::encode(&mut out, registry)?;
        Ok((out, PROMETHEUS_TEXT))
    }
}

#[cfg(test)]
mod tests;
