//! Keeping every server's view fresh, and publishing the routing snapshot.
//!
//! One task per server fetches its discovery: on an interval, right after a lookup misses, and
//! with exponential backoff while it fails. A single task per server means at most one fetch
//! in flight per server whatever the load; wake-ups that arrive during a fetch coalesce into
//! one more. A failed fetch marks the server down but keeps its last-known view (a request
//! that only it served gets a 503, not a false 404).
//!
//! Writers serialise on a mutex that the request path never takes; readers load the current
//! [`Snapshot`] from an `ArcSwap`. A new snapshot is published only when something routing
//! depends on changed, so the merged `/apis` built lazily in a snapshot stays cached until then.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use mvproxy_telemetry::metrics::{Metrics, PeerLabels, RerouteLabels, ServerLabels, TypeLabels};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::fetch::fetch;
use super::snapshot;
use super::snapshot::{GroupVersion, ServerState, ServerView, Snapshot};
use crate::forward::Upstream;

/// How long a group-version that stopped being local-only stays excluded (upstream's default).
pub const EXCLUSION_GRACE: Duration = Duration::from_secs(5 * 60);
/// First retry delay after a failed fetch; doubles up to the refresh interval.
const BACKOFF_START: Duration = Duration::from_millis(500);
/// Least time between two miss-triggered fetches of one server.
const MISS_REFRESH_GAP: Duration = Duration::from_secs(1);

/// Timing of the refresher.
#[derive(Debug, Clone, Copy)]
pub struct RefreshSettings {
    pub interval: Duration,
    /// Largest discovery document read (`--max-discovery-document-bytes`).
    pub max_document_bytes: usize,
}

struct Server {
    upstream: Upstream,
    local: bool,
    wake: Notify,
}

struct State {
    servers: Vec<ServerState>,
    /// Group-versions that left the local extension set, and when.
    left_extension: BTreeMap<GroupVersion, Instant>,
    local_extension: BTreeSet<GroupVersion>,
}

/// The discovery cache: the published snapshot and the tasks that keep it fresh.
pub struct Cache {
    snapshot: ArcSwap<Snapshot>,
    state: Mutex<State>,
    servers: Vec<Server>,
    /// Signalled after every publish (tests and `/readyz` waiters use it).
    published: Notify,
    metrics: Arc<Metrics>,
    settings: RefreshSettings,
}

impl Cache {
    /// A cache for the local server and its peers; nothing is fetched until [`Cache::run`].
    pub fn new(
        local: Upstream,
        peers: Vec<Upstream>,
        settings: RefreshSettings,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let mut states = Vec::new();
        let mut servers = Vec::new();
        for (up, is_local) in
            std::iter::once((local, true)).chain(peers.into_iter().map(|p| (p, false)))
        {
            states.push(ServerState::new(
                up.name.clone(),
                up.base.to_string(),
                is_local,
            ));
            servers.push(Server {
                upstream: up,
                local: is_local,
                wake: Notify::new(),
            });
        }
        let snapshot = Snapshot::build(states.clone(), &BTreeSet::new());
        Arc::new(Self {
            snapshot: ArcSwap::from_pointee(snapshot),
            state: Mutex::new(State {
                servers: states,
                left_extension: BTreeMap::new(),
                local_extension: BTreeSet::new(),
            }),
            servers,
            published: Notify::new(),
            metrics,
            settings,
        })
    }

    /// The current snapshot (a lock-free load).
    pub fn load(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    /// Every server's state, for `/debug/discovery`.
    pub fn servers(&self) -> Vec<ServerState> {
        self.lock().servers.clone()
    }

    /// A lookup found no server for a GVR: refetch everyone soon (coalesced per server).
    pub fn on_miss(&self) {
        for s in &self.servers {
            s.wake.notify_one();
        }
    }

    /// Waits until the next snapshot is published.
    pub async fn changed(&self) {
        self.published.notified().await;
    }

    /// Runs one refresher per server until `shutdown` resolves.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tasks = JoinSet::new();
        for i in 0..self.servers.len() {
            let cache = self.clone();
            let shutdown = shutdown.clone();
            tasks.spawn(async move {
                tokio::select! {
                    () = cache.refresh_loop(i) => {}
                    () = shutdown.cancelled() => {}
                }
            });
        }
        while tasks.join_next().await.is_some() {}
    }

    async fn refresh_loop(&self, i: usize) {
        let server = &self.servers[i];
        let mut failures: u32 = 0;
        loop {
            let started = Instant::now();
            let result = fetch(
                &server.upstream,
                self.settings.max_document_bytes,
                &|status| self.observe_fetch(i, status),
            )
            .await;
            let elapsed = started.elapsed();
            self.metrics
                .peer_fetch_duration
                .get_or_create(&PeerLabels {
                    peer: server.upstream.name.to_string(),
                })
                .observe(elapsed.as_secs_f64());
            let delay = match &result {
                Ok(_) => {
                    failures = 0;
                    self.settings.interval
                }
                Err(e) => {
                    tracing::warn!(server = %server.upstream.name, url = %server.upstream.base, cause = %e, "discovery fetch failed");
                    self.metrics
                        .peer_discovery_sync_errors
                        .get_or_create(&TypeLabels { r#type: e.kind })
                        .inc();
                    failures = failures.saturating_add(1);
                    backoff(failures, self.settings.interval)
                }
            };
            self.record(i, result.map_err(|e| e.message));
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = server.wake.notified() => {
                    tokio::time::sleep(MISS_REFRESH_GAP.saturating_sub(started.elapsed())).await;
                }
            }
        }
    }

    /// Upstream counts each discovery request to a peer in the rerouted-requests family, with
    /// empty group, version and resource (mvp-spec §1.7); the local server's are not.
    fn observe_fetch(&self, i: usize, status: http::StatusCode) {
        if self.servers[i].local {
            return;
        }
        self.metrics
            .rerouted_requests
            .get_or_create(&RerouteLabels {
                code: status.as_u16(),
                group: String::new(),
                version: String::new(),
                resource: String::new(),
            })
            .inc();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave State half-updated in a way that matters
        // more than stopping discovery altogether would.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records a fetch result and publishes a new snapshot if routing changed.
    fn record(&self, i: usize, result: Result<ServerView, String>) {
        let mut state = self.lock();
        let now = SystemTime::now();
        let s = &mut state.servers[i];
        let was = (s.up, s.attempted, s.error.clone());
        s.attempted = true;
        s.last_fetch = Some(now);
        let mut changed = false;
        match result {
            Ok(view) => {
                s.up = true;
                s.error = None;
                let same = s.view.as_ref().is_some_and(|old| {
                    old.core == view.core && old.apis == view.apis && old.apis_raw == view.apis_raw
                });
                if !same {
                    s.view = Some(Arc::new(view));
                    changed = true;
                }
            }
            Err(cause) => {
                s.up = false;
                s.error = Some(cause);
            }
        }
        changed |= was != (s.up, s.attempted, s.error.clone());
        let name = s.name.clone();
        let up = s.up;
        let count = s.view.as_ref().map_or(0, |v| v.gvr_count());
        let is_local = s.local;
        self.metrics
            .discovery_resources
            .get_or_create(&ServerLabels {
                server: name.to_string(),
            })
            .set(count as i64);
        if !is_local {
            self.metrics
                .peer_up
                .get_or_create(&PeerLabels {
                    peer: name.to_string(),
                })
                .set(i64::from(up));
        }
        if is_local {
            changed |= update_exclusions(&mut state);
        }
        if changed {
            self.publish(&state);
        }
    }

    fn publish(&self, state: &State) {
        let recent: BTreeSet<GroupVersion> = state.left_extension.keys().cloned().collect();
        let snap = snapshot::Snapshot::build(state.servers.clone(), &recent);
        self.snapshot.store(Arc::new(snap));
        self.published.notify_waiters();
    }
}

/// Tracks group-versions that stopped being local extensions, for the exclusion grace period.
/// Returns whether the set of recently-left group-versions changed.
fn update_exclusions(state: &mut State) -> bool {
    let now = Instant::now();
    let current: BTreeSet<GroupVersion> = state
        .servers
        .iter()
        .find(|s| s.local)
        .and_then(|s| s.view.as_ref())
        .map(|v| v.extension_gvs().collect())
        .unwrap_or_default();
    let before = state.left_extension.len();
    for gv in state.local_extension.difference(&current) {
        state.left_extension.insert(gv.clone(), now);
    }
    state
        .left_extension
        .retain(|gv, since| !current.contains(gv) && now.duration_since(*since) < EXCLUSION_GRACE);
    let changed = before != state.left_extension.len() || state.local_extension != current;
    state.local_extension = current;
    changed
}

fn backoff(failures: u32, cap: Duration) -> Duration {
    let exp = BACKOFF_START.saturating_mul(1u32 << failures.saturating_sub(1).min(16));
    exp.min(cap.max(BACKOFF_START))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_interval() {
        let cap = Duration::from_secs(30);
        let got: Vec<_> = (1..=8).map(|n| backoff(n, cap).as_millis()).collect();
        assert_eq!(got, [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]);
        assert_eq!(backoff(1000, cap), cap);
    }
}
