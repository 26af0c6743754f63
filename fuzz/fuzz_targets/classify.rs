//! Request classification: any request target hyper accepts, with any method, is classified
//! and routed without panicking, and the routing guarantees hold: a resource the local server
//! serves is never sent to a peer, a request already proxied is served locally, and a
//! non-resource path is the local server's.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mvproxy_core::classify::{RequestInfo, classify};
use mvproxy_core::route::{Route, decide};
use mvproxy_core::upstream::PEER_PROXIED;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let Some((&m, target)) = data.split_first() else {
        return;
    };
    let method = common::method(m);
    let Ok(uri) = http::Uri::try_from(target) else {
        return;
    };
    let info = classify(&method, uri.path(), uri.query());
    if !matches!(info, RequestInfo::NonResource) {
        assert!(info.route_template().is_some(), "{info:?}");
    }
    let snap = common::two_releases();
    let headers = http::HeaderMap::new();
    let route = decide(&info, &method, &headers, snap, |n| n - 1);
    match &info {
        RequestInfo::NonResource => assert!(matches!(route, Route::Local(_)), "{route:?}"),
        RequestInfo::Resource(r) => {
            if snap.local().is_some_and(|l| l.serves(&r.gvr)) {
                assert!(matches!(route, Route::Local(_)), "{r:?} → {route:?}");
            }
            if let Route::Peer(p) = &route {
                assert!(snap.peers_serving(&r.gvr).contains(p), "{r:?} → {p}");
            }
        }
        RequestInfo::Discovery(_) | RequestInfo::OpenApi(_) => {}
    }
    let mut proxied = http::HeaderMap::new();
    proxied.insert(PEER_PROXIED, http::HeaderValue::from_static("true"));
    let route = decide(&info, &method, &proxied, snap, |_| 0);
    assert!(
        matches!(route, Route::Local(_)),
        "already proxied: {info:?} → {route:?}"
    );
});
