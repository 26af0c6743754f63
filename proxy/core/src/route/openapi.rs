//! Where an OpenAPI request goes, as a pure function over the snapshot.
//!
//! A group-version's document follows the rules of a resource request of that group-version
//! (`crate::route`): local when the local server serves it, else a random capable peer that
//! is up, `503` when all are down or a peer was never seen, the local server's `404` when
//! nobody serves it. The index and `/openapi/v2` are answered by mvproxy only when some
//! group-version is served by peers alone; otherwise the local server's own documents are
//! exactly the merged ones.

use http::Method;

use super::{LocalReason, Route, choose_up, unseen_or_no_peer};
use crate::classify::openapi::{DocPath, OpenApiPath};
use crate::discovery::Snapshot;
use crate::plumbing::ServerName;

/// A document mvproxy answers with itself (the `Route::OpenApi` payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merged {
    /// `GET /openapi/v3`, the index.
    V3Index,
    /// `GET /openapi/v2`.
    V2,
}

/// Decides an OpenAPI request (neither already proxied nor before the first sync: the
/// caller checked both, as for every request).
pub fn decide(
    path: &OpenApiPath,
    method: &Method,
    snap: &Snapshot,
    pick: impl FnOnce(usize) -> usize,
) -> Route {
    if method != Method::GET && method != Method::HEAD {
        return Route::Local(LocalReason::NonResource);
    }
    let merged = |doc| {
        if peer_only(snap) {
            Route::OpenApi(doc)
        } else {
            Route::Local(LocalReason::NonResource)
        }
    };
    match path {
        OpenApiPath::V2 if method == Method::GET => merged(Merged::V2),
        OpenApiPath::V3Index if method == Method::GET => merged(Merged::V3Index),
        OpenApiPath::V2 | OpenApiPath::V3Index => Route::Local(LocalReason::NonResource),
        OpenApiPath::V3Doc(doc) => decide_doc(doc, snap, pick),
    }
}

fn decide_doc(doc: &DocPath, snap: &Snapshot, pick: impl FnOnce(usize) -> usize) -> Route {
    let Some(local) = snap.local() else {
        return Route::Local(LocalReason::NotSynced);
    };
    let (group, version) = doc.group_version();
    if local.serves_gv_or_group(group, version) {
        return Route::Local(LocalReason::ServedLocally);
    }
    let capable = snap.peers_serving_gv(group, version);
    if capable.is_empty() {
        return unseen_or_no_peer(what(group, version), snap);
    }
    choose_up(what(group, version), &capable, snap, pick)
}

fn what(group: &str, version: Option<&str>) -> String {
    let gv = match (group, version) {
        ("", Some(v)) => v.to_owned(),
        (g, Some(v)) => format!("{g}/{v}"),
        (g, None) => g.to_owned(),
    };
    format!("OpenAPI of {gv}")
}

/// Whether some peer serves a group-version the local server does not (after the
/// CRD/APIService exclusion): only then do the merged documents differ from the local ones.
pub fn peer_only(snap: &Snapshot) -> bool {
    !peer_only_gvs(snap).is_empty()
}

/// Every group-version only peers serve, with the first of them (in name order) that does.
pub fn peer_only_gvs(snap: &Snapshot) -> Vec<(DocPath, ServerName)> {
    let Some(local) = snap.local() else {
        return Vec::new();
    };
    let mut out: Vec<(DocPath, ServerName)> = Vec::new();
    for (name, entry) in snap.peers() {
        let Some(view) = &entry.view else { continue };
        for g in view.core.iter().chain(&view.apis) {
            for v in &g.versions {
                if local.serves_gv(g.name(), &v.version) {
                    continue;
                }
                let doc = if g.name().is_empty() {
                    DocPath::Core {
                        version: v.version.clone(),
                    }
                } else {
                    DocPath::GroupVersion {
                        group: g.name().to_owned(),
                        version: v.version.clone(),
                    }
                };
                if !out.iter().any(|(d, _)| d == &doc) {
                    out.push((doc, name.clone()));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::ServerState;
    use crate::error::ProxyError;
    use crate::testkit::view;
    use std::collections::{BTreeMap, BTreeSet};

    fn snapshot(peer_up: bool, peer_seen: bool) -> Snapshot {
        let mut local = ServerState::new("a".into(), "http://a".into(), true);
        local.view = Some(view(&[("", "v1", "pods"), ("apps", "v1", "deployments")]));
        local.up = true;
        local.attempted = true;
        let mut peer = ServerState::new("b".into(), "http://b".into(), false);
        if peer_seen {
            peer.view = Some(view(&[
                ("", "v1", "pods"),
                ("apps", "v1", "deployments"),
                ("scheduling.k8s.io", "v1alpha2", "workloads"),
            ]));
        }
        peer.up = peer_up;
        peer.attempted = true;
        Snapshot::build(vec![local, peer], &BTreeSet::new(), BTreeMap::new(), true)
    }

    fn doc(p: &str) -> OpenApiPath {
        OpenApiPath::parse(p).expect("an OpenAPI path")
    }

    #[test]
    fn a_group_version_only_a_peer_serves_goes_to_that_peer() {
        let snap = snapshot(true, true);
        let gv = doc("/openapi/v3/apis/scheduling.k8s.io/v1alpha2");
        assert_eq!(
            decide(&gv, &Method::GET, &snap, |_| 0),
            Route::Peer("b".into())
        );
        let group = doc("/openapi/v3/apis/scheduling.k8s.io");
        assert_eq!(
            decide(&group, &Method::GET, &snap, |_| 0),
            Route::Peer("b".into())
        );
    }

    #[test]
    fn what_the_local_server_serves_stays_local() {
        let snap = snapshot(true, true);
        for p in [
            "/openapi/v3/apis/apps/v1",
            "/openapi/v3/api/v1",
            "/openapi/v3/apis/apps",
        ] {
            assert_eq!(
                decide(&doc(p), &Method::GET, &snap, |_| 0),
                Route::Local(LocalReason::ServedLocally),
                "{p}"
            );
        }
        assert_eq!(
            decide(
                &doc("/openapi/v3/apis/nobody.example/v1"),
                &Method::GET,
                &snap,
                |_| 0
            ),
            Route::Local(LocalReason::NoPeer)
        );
    }

    #[test]
    fn a_peer_that_is_down_or_unseen_is_a_503_not_a_404() {
        let down = snapshot(false, true);
        let gv = doc("/openapi/v3/apis/scheduling.k8s.io/v1alpha2");
        assert!(matches!(
            decide(&gv, &Method::GET, &down, |_| 0),
            Route::Unavailable(ProxyError::PeersDown { .. })
        ));
        let unseen = snapshot(false, false);
        assert!(matches!(
            decide(&gv, &Method::GET, &unseen, |_| 0),
            Route::Unavailable(ProxyError::SurfaceUnknown { .. })
        ));
    }

    #[test]
    fn the_index_and_v2_are_merged_only_across_a_skew() {
        let skew = snapshot(true, true);
        assert_eq!(
            decide(&OpenApiPath::V3Index, &Method::GET, &skew, |_| 0),
            Route::OpenApi(Merged::V3Index)
        );
        assert_eq!(
            decide(&OpenApiPath::V2, &Method::GET, &skew, |_| 0),
            Route::OpenApi(Merged::V2)
        );
        assert_eq!(
            decide(&OpenApiPath::V2, &Method::POST, &skew, |_| 0),
            Route::Local(LocalReason::NonResource)
        );
        assert_eq!(
            peer_only_gvs(&skew),
            vec![(
                DocPath::GroupVersion {
                    group: "scheduling.k8s.io".into(),
                    version: "v1alpha2".into()
                },
                ServerName::from("b")
            )]
        );
        let unseen = snapshot(true, false);
        assert_eq!(
            decide(&OpenApiPath::V3Index, &Method::GET, &unseen, |_| 0),
            Route::Local(LocalReason::NonResource)
        );
    }
}
