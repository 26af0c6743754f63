//! What several targets share: a two-release snapshot built from the discovery fixtures
//! (local 1.34, peer 1.31, both up), the HTTP methods, and splitting an input into parts.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

use mvproxy_core::discovery::snapshot::{ServerState, ServerView, Snapshot};
use mvproxy_core::discovery::types::ApiGroupDiscoveryList;
use mvproxy_core::plumbing::ServerName;

const APIS_134: &str =
    include_str!("../../fixtures/discovery/kube-apiserver-1.34-dev/aggregated_v2.json");
const APIS_131: &str =
    include_str!("../../fixtures/discovery/kube-apiserver-1.31-dev/aggregated_v2.json");

pub const LOCAL: &str = "apiserver-2";
pub const PEER: &str = "apiserver-1";

pub const METHODS: [&str; 9] = [
    "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "CONNECT", "WATCH",
];

/// The method an input's first byte names (an extension method among them).
pub fn method(b: u8) -> http::Method {
    let m = METHODS[usize::from(b) % METHODS.len()];
    http::Method::from_bytes(m.as_bytes()).unwrap_or(http::Method::GET)
}

/// A server that has been fetched, with `apis` as its `/apis` (its core group is `/api`'s
/// `v1` of the same release: taken from the document's "" group if any).
pub fn server(name: &str, local: bool, apis: ApiGroupDiscoveryList) -> ServerState {
    let (core, named): (Vec<_>, Vec<_>) = apis.items.into_iter().partition(|g| g.name().is_empty());
    let mut s = ServerState::new(ServerName::from(name), format!("http://{name}"), local);
    s.up = true;
    s.attempted = true;
    s.view = Some(Arc::new(ServerView::new(core, named, None)));
    s
}

pub fn snapshot(servers: Vec<ServerState>) -> Snapshot {
    Snapshot::build(servers, &BTreeSet::new(), BTreeMap::new(), true)
}

/// Local 1.34 and a 1.31 peer, both up, built once.
pub fn two_releases() -> &'static Snapshot {
    static SNAP: OnceLock<Snapshot> = OnceLock::new();
    SNAP.get_or_init(|| {
        let parse = |s: &str| serde_json::from_str::<ApiGroupDiscoveryList>(s).expect("fixture");
        snapshot(vec![
            server(LOCAL, true, parse(APIS_134)),
            server(PEER, false, parse(APIS_131)),
        ])
    })
}

/// `data` split at each NUL byte (documents never contain one).
pub fn parts(data: &[u8]) -> Vec<&[u8]> {
    data.split(|b| *b == 0).collect()
}
