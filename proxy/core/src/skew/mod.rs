//! Clients of the skew, from live traffic: which clients depend on the APIs the skew takes away.
//!
//! An upgrade rehearsal exists to answer "what will break?". mvproxy sees every request and
//! knows which server serves which GVR, so it can answer per client while the rehearsal runs:
//! for each request whose GVR not every server serves, it records who sent it (from the
//! `User-Agent`, [`agent`]) and which side of the skew serves the GVR (from each server's
//! `/version`, [`crate::discovery::side`]), in a bounded registry ([`clients`]) and in
//! `mvproxy_skew_requests_total`. `/debug/clients` on the admin listener shows, per client,
//! the GVRs that break after the upgrade and those that break on a rollback.
//!
//! Each request is counted once, by the proxy the client talked to: a request that arrives
//! over the peer hop (`x-kubernetes-peer-proxied: true`) was counted by the proxy that sent it.
//! A GVR that no server serves is not in the skew and not counted (the client gets the API
//! server's own 404).

pub mod agent;
pub mod clients;

use std::sync::Arc;
use std::time::SystemTime;

use http::HeaderMap;
use http::header::{HeaderName, USER_AGENT};
use mvproxy_telemetry::metrics::{Metrics, SkewLabels};
use serde_json::json;

use crate::classify::RequestInfo;
use crate::discovery::Snapshot;
use crate::route::{LocalReason, Route};
use clients::Clients;

/// The readiness recorder shared by the request path and the admin listener.
#[derive(Debug)]
pub struct SkewClients {
    clients: Clients,
    metrics: Arc<Metrics>,
    /// The front-proxy user header (`--requestheader-username-headers`), read after identity
    /// headers have been rewritten, so it is set only when authenticated.
    user_header: HeaderName,
}

impl SkewClients {
    /// A recorder naming at most `max_clients` clients.
    pub fn new(max_clients: usize, metrics: Arc<Metrics>, user_header: HeaderName) -> Self {
        Self {
            clients: Clients::new(max_clients),
            metrics,
            user_header,
        }
    }

    /// The request path's hook: counts a resource request whose GVR is in the skew of `snap`.
    /// `headers` are the request's after identity rewriting.
    pub fn observe(&self, snap: &Snapshot, info: &RequestInfo, route: &Route, headers: &HeaderMap) {
        let RequestInfo::Resource(req) = info else {
            return;
        };
        if matches!(route, Route::Local(LocalReason::AlreadyProxied)) {
            return;
        }
        let Some(side) = snap.skew_side(&req.gvr) else {
            return;
        };
        let agent = agent::parse(headers.get(USER_AGENT).map_or(&[][..], |v| v.as_bytes()))
            .with_identity(headers.get(&self.user_header).map(|v| v.as_bytes()));
        let client = self
            .clients
            .record(&agent, &req.gvr, side, SystemTime::now());
        self.metrics
            .skew_requests
            .get_or_create(&SkewLabels {
                client: client.to_string(),
                group: req.gvr.group.clone(),
                version: req.gvr.version.clone(),
                resource: req.gvr.resource.clone(),
                side: side.as_str(),
            })
            .inc();
    }

    /// `/debug/clients`: the releases the judgement uses, and every client.
    pub fn report(&self, snap: &Snapshot) -> serde_json::Value {
        let servers: Vec<serde_json::Value> = snap
            .servers
            .iter()
            .map(|s| {
                let version = s.view.as_ref().and_then(|v| v.version.as_ref());
                json!({
                    "id": s.name.as_str(),
                    "git_version": version.map(|v| v.git_version.as_str()),
                    "release": version.and_then(|v| v.release).map(|r| r.to_string()),
                })
            })
            .collect();
        let newest = snap
            .servers
            .iter()
            .filter_map(|s| s.view.as_ref()?.version.as_ref()?.release)
            .max()
            .map(|r| r.to_string());
        json!({
            "newest_release": newest,
            "servers": servers,
            "max_tracked_clients": self.clients.max(),
            "tracked_clients": self.clients.named(),
            "clients": self.clients.report(),
        })
    }
}
