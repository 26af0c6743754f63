//! Setup the benches share, so each measures the same documents built the same way: release
//! discovery documents from `fixtures/discovery/`, and a server's state as the refresher
//! leaves it after a good fetch.

// Each bench includes this module and uses part of it.
#![allow(dead_code)]

use std::sync::Arc;

use mvproxy_core::discovery::types::{ApiGroupDiscovery, ApiGroupDiscoveryList};
use mvproxy_core::discovery::{ServerState, ServerView};

/// The groups of the aggregated document at `path` under `fixtures/discovery/`.
pub fn fixture(path: &str) -> Vec<ApiGroupDiscovery> {
    let full = format!(
        "{}/../../fixtures/discovery/{path}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("read {full}: {e}"));
    serde_json::from_str::<ApiGroupDiscoveryList>(&text)
        .unwrap_or_else(|e| panic!("decode {full}: {e}"))
        .items
}

/// A server's view of `apis` (named groups only).
pub fn view(apis: Vec<ApiGroupDiscovery>) -> ServerView {
    ServerView::new(Vec::new(), apis, None)
}

/// `name` fetched and up, serving `view`.
pub fn state(name: &str, local: bool, view: ServerView) -> ServerState {
    let mut s = ServerState::new(name.into(), format!("http://{name}"), local);
    s.view = Some(Arc::new(view));
    s.up = true;
    s.attempted = true;
    s
}
