//! Where a request goes: the Mixed Version Proxy decision, as a pure function.
//!
//! The order of checks is upstream's `WrapHandler` (k8s.io/apiserver kubernetes-1.36.0,
//! `pkg/util/peerproxy/peerproxy_handler.go`), first match wins:
//! non-resource → local; already proxied → local (one hop at most); local discovery not yet
//! fetched → local; served locally → local; served by no peer → local, so the client gets the
//! API server's own 404; else a capable peer, chosen uniformly at random among those up.
//! Two deliberate departures keep a false 404 from ever reaching a client (README.md, "Where mvproxy departs from upstream"): when
//! every capable peer is down, or when a peer whose surface was never seen might serve the
//! resource, the answer is a retryable 503.
//!
//! `decide` does no I/O and takes no clock or randomness: the peer choice is injected, so
//! every rule has a table test.

use http::{HeaderMap, Method};
use mvproxy_telemetry::metrics::values;

use crate::classify::{DiscoveryPath, Gvr, RequestInfo};
use crate::discovery::Snapshot;
use crate::discovery::negotiate::{DiscoveryFormat, merged_legacy, negotiate};
use crate::discovery::snapshot::Serving;
use crate::error::ProxyError;
use crate::plumbing::ServerName;
use crate::upstream::PEER_PROXIED;

/// Why a request is served by the local API server (the `mvproxy.reason` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalReason {
    /// Not a resource request.
    NonResource,
    /// A peer already proxied it here.
    AlreadyProxied,
    /// Discovery is not synced yet.
    NotSynced,
    /// The local server serves the GVR.
    ServedLocally,
    /// No server serves the GVR: the local server's own 404.
    NoPeer,
}

impl LocalReason {
    /// The metric and span label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NonResource => values::REASON_NON_RESOURCE,
            Self::AlreadyProxied => values::REASON_ALREADY_PROXIED,
            Self::NotSynced => values::REASON_NOT_SYNCED,
            Self::ServedLocally => values::REASON_SERVED_LOCALLY,
            Self::NoPeer => values::REASON_NO_PEER,
        }
    }
}

/// Which merged `/apis` document mvproxy answers with itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergedFormat {
    /// `apidiscovery.k8s.io/v2` `APIGroupDiscoveryList`.
    Aggregated,
    /// Legacy `APIGroupList` (an extension beyond upstream, for older clients).
    Legacy,
}

/// A discovery document mvproxy answers itself, merged from every server's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergedDoc {
    /// `GET /apis`.
    Apis(MergedFormat),
    /// `GET /apis/{group}`: the legacy `APIGroup` (`crate::discovery::group_docs`).
    Group(String),
    /// `GET /apis/{group}/{version}`, or `/api/{version}` with `group` empty: the legacy
    /// `APIResourceList`.
    GroupVersion {
        /// The group, `""` for core.
        group: String,
        /// The version.
        version: String,
    },
}

/// The decision for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Forward to the local API server.
    Local(LocalReason),
    /// Forward to this peer, the only kind of server that serves the request.
    Peer(ServerName),
    /// Answer with a merged discovery document.
    Discovery(MergedDoc),
    /// Answer with this error; never a false 404.
    Unavailable(ProxyError),
    /// Answer with a merged OpenAPI document (`crate::openapi`).
    OpenApi(openapi::Merged),
}

impl Route {
    /// The `mvproxy.route` label.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Local(_) => values::ROUTE_LOCAL,
            Self::Peer(_) => values::ROUTE_PEER,
            Self::Discovery(_) | Self::OpenApi(_) => values::ROUTE_DISCOVERY,
            Self::Unavailable(_) => values::ROUTE_PEER,
        }
    }

    /// The `mvproxy.reason` label.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Local(r) => r.as_str(),
            Self::Peer(_) | Self::Unavailable(_) => values::REASON_PEER_ONLY,
            Self::Discovery(_) | Self::OpenApi(_) => values::REASON_NON_RESOURCE,
        }
    }
}

/// Decides where the request goes. `pick(n)` returns an index below `n` (uniformly random in
/// production).
pub fn decide(
    info: &RequestInfo,
    method: &Method,
    headers: &HeaderMap,
    snap: &Snapshot,
    pick: impl FnOnce(usize) -> usize,
) -> Route {
    let already_proxied = headers
        .get(PEER_PROXIED)
        .is_some_and(|v| v.as_bytes() == b"true");
    match info {
        RequestInfo::NonResource => Route::Local(LocalReason::NonResource),
        RequestInfo::Discovery(path) => {
            if already_proxied {
                return Route::Local(LocalReason::AlreadyProxied);
            }
            if !snap.synced() {
                return Route::Local(LocalReason::NotSynced);
            }
            if path == &DiscoveryPath::Apis && method != Method::GET {
                return Route::Local(LocalReason::NonResource);
            }
            decide_discovery(path, method == Method::GET, headers, snap, pick)
        }
        RequestInfo::OpenApi(path) => {
            if already_proxied {
                return Route::Local(LocalReason::AlreadyProxied);
            }
            if !snap.synced() {
                return Route::Local(LocalReason::NotSynced);
            }
            openapi::decide(path, method, snap, pick)
        }
        RequestInfo::Resource(req) => {
            if already_proxied {
                return Route::Local(LocalReason::AlreadyProxied);
            }
            if !snap.synced() {
                return Route::Local(LocalReason::NotSynced);
            }
            // One lookup says who serves it: the local server, and which peers are up.
            let serving = snap.serving(&req.gvr);
            if serving.is_some_and(|s| s.local) {
                return Route::Local(LocalReason::ServedLocally);
            }
            decide_peer(&req.gvr, serving, snap, pick)
        }
    }
}

fn decide_peer(
    gvr: &Gvr,
    serving: Option<&Serving>,
    snap: &Snapshot,
    pick: impl FnOnce(usize) -> usize,
) -> Route {
    let capable = serving.map(|s| s.peers.as_slice()).unwrap_or(&[]);
    if capable.is_empty() {
        return unseen_or_no_peer(gvr.to_string(), snap);
    }
    let up = serving.map(|s| s.up.as_slice()).unwrap_or(&[]);
    if up.is_empty() {
        return peers_down(gvr.to_string(), capable, snap);
    }
    let i = pick(up.len()).min(up.len() - 1);
    Route::Peer(up[i].clone())
}

/// Served by no known peer: a `503` while some peer's surface was never seen (it might serve
/// `what`), else the local server's own `404`.
fn unseen_or_no_peer(what: String, snap: &Snapshot) -> Route {
    match snap.unseen_peer() {
        Some((peer, cause)) => Route::Unavailable(ProxyError::SurfaceUnknown {
            gvr: what,
            peer: peer.clone(),
            cause: cause.map_or_else(
                || "discovery not fetched yet".to_owned(),
                ToString::to_string,
            ),
        }),
        None => Route::Local(LocalReason::NoPeer),
    }
}

/// A random one of `capable` that is up, or a `503` naming them (and `what`) when none is.
pub(crate) fn choose_up(
    what: String,
    capable: &[ServerName],
    snap: &Snapshot,
    pick: impl FnOnce(usize) -> usize,
) -> Route {
    let up: Vec<&ServerName> = capable
        .iter()
        .filter(|p| snap.peer(p).is_some_and(|e| e.up))
        .collect();
    if up.is_empty() {
        return peers_down(what, capable, snap);
    }
    let i = pick(up.len()).min(up.len() - 1);
    Route::Peer(up[i].clone())
}

/// No capable peer is up: `503` naming them and the first one's last error.
fn peers_down(what: String, capable: &[ServerName], snap: &Snapshot) -> Route {
    let cause = capable
        .iter()
        .find_map(|p| snap.peer(p).and_then(|e| e.error.as_ref()))
        .map_or_else(|| "marked down".to_owned(), ToString::to_string);
    let peers = capable
        .iter()
        .map(ServerName::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    Route::Unavailable(ProxyError::PeersDown {
        gvr: what,
        peers,
        cause,
    })
}

/// Discovery paths: `/apis` is answered by mvproxy when the client negotiated something it
/// merges; `/apis/{g}`, `/apis/{g}/{v}` and `/api/{v}` that a peer serves too are answered
/// with the merged legacy document, and those that only a peer serves go to that peer (both
/// extensions for legacy clients); everything else is the local server's.
fn decide_discovery(
    path: &DiscoveryPath,
    get: bool,
    headers: &HeaderMap,
    snap: &Snapshot,
    pick: impl FnOnce(usize) -> usize,
) -> Route {
    let local_route = Route::Local(LocalReason::NonResource);
    let Some(local) = snap.local() else {
        return Route::Local(LocalReason::NotSynced);
    };
    let (group, version) = match path {
        DiscoveryPath::Apis => {
            return match negotiate(headers.get(http::header::ACCEPT)) {
                DiscoveryFormat::AggregatedV2 { nopeer: false } => {
                    Route::Discovery(MergedDoc::Apis(MergedFormat::Aggregated))
                }
                DiscoveryFormat::Legacy => Route::Discovery(MergedDoc::Apis(MergedFormat::Legacy)),
                _ => local_route,
            };
        }
        DiscoveryPath::Api => return local_route,
        DiscoveryPath::CoreVersion { version } => {
            if get
                && local.serves_gv("", version)
                && merged_legacy(headers.get(http::header::ACCEPT))
            {
                return Route::Discovery(MergedDoc::GroupVersion {
                    group: String::new(),
                    version: version.clone(),
                });
            }
            return local_route;
        }
        DiscoveryPath::Group { group } => (group, None),
        DiscoveryPath::GroupVersion { group, version } => (group, Some(version.as_str())),
    };
    if local.serves_gv_or_group(group, version) {
        // Served here and by a peer too: the merged document, which the answer replaces by
        // the local server's own when the merge changed nothing of it.
        if get
            && merged_legacy(headers.get(http::header::ACCEPT))
            && !snap.peers_serving_gv(group, version).is_empty()
        {
            return Route::Discovery(match version {
                Some(v) => MergedDoc::GroupVersion {
                    group: group.clone(),
                    version: v.to_owned(),
                },
                None => MergedDoc::Group(group.clone()),
            });
        }
        return Route::Local(LocalReason::ServedLocally);
    }
    let capable = snap.peers_serving_gv(group, version);
    if capable.is_empty() {
        return Route::Local(LocalReason::NoPeer);
    }
    let what = match version {
        Some(v) => format!("{group}/{v}"),
        None => group.clone(),
    };
    choose_up(what, &capable, snap, pick)
}

pub mod openapi;

#[cfg(test)]
mod tests;
