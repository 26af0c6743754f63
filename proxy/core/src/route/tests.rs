//! One table row per rule of `decide`, in upstream's order.

use std::collections::BTreeSet;
use std::sync::Arc;

use http::{HeaderMap, HeaderValue, Method};

use super::*;
use crate::classify::classify;
use crate::discovery::{ServerState, ServerView};
use crate::testkit::{fetch_failed, view};

struct Server {
    name: &'static str,
    local: bool,
    up: bool,
    view: Option<Arc<ServerView>>,
}

fn snapshot(servers: Vec<Server>) -> Snapshot {
    let states = servers
        .into_iter()
        .map(|s| {
            let mut st = ServerState::new(s.name.into(), format!("http://{}", s.name), s.local);
            st.up = s.up;
            st.attempted = true;
            st.error = (!s.up).then(|| Arc::new(fetch_failed(s.name, "connection refused")));
            st.view = s.view;
            st
        })
        .collect();
    Snapshot::build(states, &BTreeSet::new(), Default::default(), true)
}

fn local(gvrs: &[(&str, &str, &str)]) -> Server {
    Server {
        name: "apiserver-a",
        local: true,
        up: true,
        view: Some(view(gvrs)),
    }
}

fn peer(name: &'static str, up: bool, gvrs: &[(&str, &str, &str)]) -> Server {
    Server {
        name,
        local: false,
        up,
        view: Some(view(gvrs)),
    }
}

fn route(snap: &Snapshot, method: Method, path: &str, headers: &[(&str, &str)]) -> Route {
    let (path, query) = match path.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path, None),
    };
    let mut h = HeaderMap::new();
    for (k, v) in headers {
        h.insert(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    decide(&classify(&method, path, query), &method, &h, snap, |_| 0)
}

const PODS: (&str, &str, &str) = ("", "v1", "pods");
const DEPLOY: (&str, &str, &str) = ("apps", "v1", "deployments");
const CLAIMS: (&str, &str, &str) = ("resource.k8s.io", "v1beta2", "resourceclaims");
const FLOWS: (&str, &str, &str) = ("flowcontrol.apiserver.k8s.io", "v1beta3", "flowschemas");

fn two_servers() -> Snapshot {
    snapshot(vec![
        local(&[PODS, DEPLOY, CLAIMS]),
        peer("apiserver-b", true, &[PODS, DEPLOY, FLOWS]),
    ])
}

#[test]
fn non_resource_goes_local() {
    let s = two_servers();
    for p in [
        "/healthz",
        "/version",
        "/openapi/v3/version",
        "/metrics",
        "/",
    ] {
        assert_eq!(
            route(&s, Method::GET, p, &[]),
            Route::Local(LocalReason::NonResource),
            "{p}"
        );
    }
}

#[test]
fn openapi_across_the_skew_is_merged_or_routed_by_group_version() {
    let s = two_servers();
    assert_eq!(
        route(&s, Method::GET, "/openapi/v3", &[]),
        Route::OpenApi(crate::route::openapi::Merged::V3Index)
    );
    assert_eq!(
        route(
            &s,
            Method::GET,
            "/openapi/v3/apis/flowcontrol.apiserver.k8s.io/v1beta3",
            &[]
        ),
        Route::Peer("apiserver-b".into())
    );
    assert_eq!(
        route(
            &s,
            Method::GET,
            "/openapi/v3/apis/resource.k8s.io/v1beta2",
            &[]
        ),
        Route::Local(LocalReason::ServedLocally)
    );
}

#[test]
fn already_proxied_goes_local_even_for_a_peer_only_resource() {
    let s = two_servers();
    let p = "/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas";
    assert_eq!(
        route(&s, Method::GET, p, &[(PEER_PROXIED, "true")]),
        Route::Local(LocalReason::AlreadyProxied)
    );
    // only the exact value "true" counts, as upstream
    assert_eq!(
        route(&s, Method::GET, p, &[(PEER_PROXIED, "TRUE")]),
        Route::Peer("apiserver-b".into())
    );
}

#[test]
fn not_synced_goes_local() {
    let s = snapshot(vec![
        Server {
            name: "apiserver-a",
            local: true,
            up: false,
            view: None,
        },
        peer("apiserver-b", true, &[FLOWS]),
    ]);
    assert_eq!(
        route(
            &s,
            Method::GET,
            "/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas",
            &[]
        ),
        Route::Local(LocalReason::NotSynced)
    );
}

#[test]
fn served_locally_never_leaves_even_if_a_peer_serves_it_too() {
    let s = two_servers();
    for p in [
        "/api/v1/namespaces/default/pods",
        "/apis/apps/v1/namespaces/x/deployments/y/scale",
    ] {
        assert_eq!(
            route(&s, Method::GET, p, &[]),
            Route::Local(LocalReason::ServedLocally),
            "{p}"
        );
    }
}

#[test]
fn served_by_no_peer_goes_local_for_its_own_404() {
    let s = two_servers();
    assert_eq!(
        route(&s, Method::GET, "/apis/example.com/v1/widgets", &[]),
        Route::Local(LocalReason::NoPeer)
    );
}

#[test]
fn peer_only_resource_goes_to_the_peer_whatever_the_subresource_or_verb() {
    let s = two_servers();
    for (m, p) in [
        (
            Method::GET,
            "/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas",
        ),
        (
            Method::GET,
            "/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas/x/status",
        ),
        (
            Method::DELETE,
            "/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas/x",
        ),
        (
            Method::GET,
            "/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas?watch=true",
        ),
    ] {
        assert_eq!(
            route(&s, m, p, &[]),
            Route::Peer("apiserver-b".into()),
            "{p}"
        );
    }
}

#[test]
fn peer_choice_is_among_capable_peers_that_are_up() {
    let s = snapshot(vec![
        local(&[PODS]),
        peer("apiserver-b", true, &[FLOWS]),
        peer("apiserver-c", false, &[FLOWS]),
        peer("apiserver-d", true, &[FLOWS]),
    ]);
    let info = classify(
        &Method::GET,
        "/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas",
        None,
    );
    let mut offered = 0;
    let r = decide(&info, &Method::GET, &HeaderMap::new(), &s, |n| {
        offered = n;
        1
    });
    assert_eq!(offered, 2, "only the two peers that are up are offered");
    assert_eq!(r, Route::Peer("apiserver-d".into()));
}

#[test]
fn every_capable_peer_down_is_a_503_never_a_404() {
    let s = snapshot(vec![local(&[PODS]), peer("apiserver-b", false, &[FLOWS])]);
    match route(
        &s,
        Method::GET,
        "/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas",
        &[],
    ) {
        Route::Unavailable(e @ ProxyError::PeersDown { .. }) => {
            assert_eq!(e.status(), http::StatusCode::SERVICE_UNAVAILABLE);
            // the peer's last fetch failure, in words
            assert!(
                e.to_string()
                    .contains("apiserver-b could not be reached: connection refused"),
                "{e}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn unknown_gvr_while_a_peer_was_never_seen_is_a_503_naming_it() {
    let s = snapshot(vec![
        local(&[PODS]),
        Server {
            name: "apiserver-b",
            local: false,
            up: false,
            view: None,
        },
    ]);
    match route(&s, Method::GET, "/apis/example.com/v1/widgets", &[]) {
        Route::Unavailable(ProxyError::SurfaceUnknown { peer, cause, .. }) => {
            assert_eq!(peer.as_str(), "apiserver-b");
            assert_eq!(
                cause,
                "GET /api: apiserver-b could not be reached: connection refused"
            );
        }
        other => panic!("{other:?}"),
    }
    // but what local serves is still served
    assert_eq!(
        route(&s, Method::GET, "/api/v1/pods", &[]),
        Route::Local(LocalReason::ServedLocally)
    );
}

#[test]
fn local_crd_group_versions_are_never_routed_to_peers() {
    // local serves example.com/v1 from a CRD (not a built-in group); a peer advertises
    // another resource in the same group-version: upstream's exclusion keeps it local.
    let s = snapshot(vec![
        local(&[PODS, ("example.com", "v1", "gadgets")]),
        peer(
            "apiserver-b",
            true,
            &[
                ("example.com", "v1", "widgets"),
                ("example.com", "v2", "widgets"),
            ],
        ),
    ]);
    assert_eq!(
        route(&s, Method::GET, "/apis/example.com/v1/widgets", &[]),
        Route::Local(LocalReason::NoPeer)
    );
    // a group-version local does not serve is not excluded
    assert_eq!(
        route(&s, Method::GET, "/apis/example.com/v2/widgets", &[]),
        Route::Peer("apiserver-b".into())
    );
}

#[test]
fn discovery_routes() {
    let s = two_servers();
    let v2 =
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    let nopeer =
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer";
    let v2beta1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], Route);
    let core_v1 = Route::Discovery(MergedDoc::GroupVersion {
        group: String::new(),
        version: "v1".into(),
    });
    let apps_v1 = Route::Discovery(MergedDoc::GroupVersion {
        group: "apps".into(),
        version: "v1".into(),
    });
    let cases: &[Case<'_>] = &[
        (
            "/apis",
            &[("accept", v2)],
            Route::Discovery(MergedDoc::Apis(MergedFormat::Aggregated)),
        ),
        (
            "/apis",
            &[("accept", "application/json")],
            Route::Discovery(MergedDoc::Apis(MergedFormat::Legacy)),
        ),
        (
            "/apis",
            &[("accept", nopeer)],
            Route::Local(LocalReason::NonResource),
        ),
        (
            "/apis",
            &[("accept", v2beta1)],
            Route::Local(LocalReason::NonResource),
        ),
        (
            "/apis",
            &[("accept", v2), (PEER_PROXIED, "true")],
            Route::Local(LocalReason::AlreadyProxied),
        ),
        (
            "/api",
            &[("accept", v2)],
            Route::Local(LocalReason::NonResource),
        ),
        // Served here and by the peer: the merged legacy documents.
        ("/api/v1", &[], core_v1.clone()),
        (
            "/api/v1",
            &[("accept", "application/json")],
            core_v1.clone(),
        ),
        (
            "/api/v1",
            &[("accept", "application/json;profile=nopeer")],
            Route::Local(LocalReason::NonResource),
        ),
        // an Accept mvproxy cannot render: the local server's own
        (
            "/api/v1",
            &[("accept", "application/vnd.kubernetes.protobuf")],
            Route::Local(LocalReason::NonResource),
        ),
        // client-go with protobuf first and */* after it takes JSON
        (
            "/apis/apps/v1",
            &[("accept", "application/vnd.kubernetes.protobuf, */*")],
            apps_v1.clone(),
        ),
        (
            "/apis/apps",
            &[],
            Route::Discovery(MergedDoc::Group("apps".into())),
        ),
        (
            "/apis/apps/v1",
            &[("accept", "application/json;profile=nopeer")],
            Route::Local(LocalReason::ServedLocally),
        ),
        (
            "/apis/flowcontrol.apiserver.k8s.io",
            &[],
            Route::Peer("apiserver-b".into()),
        ),
        (
            "/apis/flowcontrol.apiserver.k8s.io/v1beta3",
            &[],
            Route::Peer("apiserver-b".into()),
        ),
        (
            "/apis/resource.k8s.io/v1beta2",
            &[],
            Route::Local(LocalReason::ServedLocally),
        ),
        (
            "/apis/example.com/v1",
            &[],
            Route::Local(LocalReason::NoPeer),
        ),
    ];
    for (path, headers, want) in cases {
        assert_eq!(
            &route(&s, Method::GET, path, headers),
            want,
            "{path} {headers:?}"
        );
    }
    // Only a GET is answered from the merge.
    assert_eq!(
        route(&s, Method::HEAD, "/apis/apps/v1", &[]),
        Route::Local(LocalReason::ServedLocally)
    );
}
