//! Keeping every server's view fresh, and publishing the routing snapshot.
//!
//! One task per server fetches its discovery: on an interval, right after a lookup misses, when
//! the peer set changes, and with exponential backoff while it fails. A single task per server means at most one fetch
//! in flight per server whatever the load; wake-ups that arrive during a fetch coalesce into
//! one more. A failed fetch marks the server down but keeps its last-known view (a request
//! that only it served gets a 503, not a false 404); its GVRs are forgotten only when it leaves
//! the peer set, which a peer source ([`crate::peers`]) reports through [`Cache::set_peers`].
//!
//! Writers serialise on a mutex that the request path never takes; readers load the current
//! [`Snapshot`] from an `ArcSwap`. A new snapshot is published only when something routing
//! depends on changed, so the merged `/apis` built lazily in a snapshot stays cached until then.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use http::Uri;
use mvproxy_telemetry::metrics::{Metrics, PeerLabels, RerouteLabels, ServerLabels, TypeLabels};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub use super::failure::RefreshError;
use super::fetch::fetch;
use super::snapshot::{GroupVersion, ServerState, ServerView, Snapshot};
use crate::error::{ProxyError, TransportFailure};
use crate::plumbing::ServerName;
use crate::upstream::{Upstream, UpstreamError};

/// How long a group-version that stopped being local-only stays excluded (upstream's default).
pub const EXCLUSION_GRACE: Duration = Duration::from_secs(5 * 60);
/// First retry delay after a failed fetch (a probe of a server that is down or suspect);
/// doubles up to [`BACKOFF_MAX`] or the refresh interval, whichever is shorter.
const BACKOFF_START: Duration = Duration::from_millis(500);
/// Longest delay between two probes of a server that is down or suspect: it is used again
/// within this long of answering.
pub const BACKOFF_MAX: Duration = Duration::from_secs(4);
/// Least time between two miss-triggered fetches of one server.
const MISS_REFRESH_GAP: Duration = Duration::from_secs(1);

/// Timing of the refresher.
#[derive(Debug, Clone, Copy)]
pub struct RefreshSettings {
    /// Between refreshes of each server.
    pub interval: Duration,
    /// Largest discovery document read (`--max-discovery-document-bytes`).
    pub max_document_bytes: usize,
}

/// A peer as a peer source reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerSpec {
    /// The peer's server name.
    pub name: ServerName,
    /// Where it is reached.
    pub url: Uri,
    /// Changes when the peer restarts (a lease's holder identity); a change triggers a refetch.
    pub generation: String,
}

/// Builds the client for a peer.
pub type UpstreamFactory =
    Box<dyn Fn(&ServerName, &Uri) -> Result<Upstream, UpstreamError> + Send + Sync>;

/// A server being refreshed: how to reach it, how to wake its task, how to stop it.
struct Member {
    upstream: Upstream,
    local: bool,
    generation: String,
    wake: Arc<Notify>,
    stop: CancellationToken,
}

struct State {
    /// Local first, then peers in name order.
    servers: Vec<ServerState>,
    members: BTreeMap<ServerName, Member>,
    /// The local server's extension group-versions, and those that recently left the set.
    exclusions: Exclusions,
    /// The peer source has reported its set at least once.
    peers_synced: bool,
    /// Set once [`Cache::run`] started: members added later get their task at once.
    shutdown: Option<CancellationToken>,
}

/// The discovery cache: the published snapshot and the tasks that keep it fresh.
pub struct Cache {
    snapshot: ArcSwap<Snapshot>,
    state: Mutex<State>,
    /// Every member's wake-up, readable without the state lock (a miss is on the request path).
    wakes: ArcSwap<Vec<Arc<Notify>>>,
    new_upstream: UpstreamFactory,
    metrics: Arc<Metrics>,
    settings: RefreshSettings,
    clock: Clock,
}

/// Where the refresher reads the time: [`Instant::now`] in production, a hand-moved clock in
/// tests of the exclusion grace.
pub type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

impl Cache {
    /// A cache for the local server; peers come from [`Cache::set_peers`]. Nothing is fetched
    /// until [`Cache::run`].
    pub fn new(
        local: Upstream,
        new_upstream: UpstreamFactory,
        settings: RefreshSettings,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        Self::with_clock(
            local,
            new_upstream,
            settings,
            metrics,
            Arc::new(Instant::now),
        )
    }

    /// [`Cache::new`] reading the time from `clock`.
    pub fn with_clock(
        local: Upstream,
        new_upstream: UpstreamFactory,
        settings: RefreshSettings,
        metrics: Arc<Metrics>,
        clock: Clock,
    ) -> Arc<Self> {
        let servers = vec![ServerState::new(
            local.name.clone(),
            local.base.to_string(),
            true,
        )];
        let mut members = BTreeMap::new();
        members.insert(
            local.name.clone(),
            Member {
                upstream: local,
                local: true,
                generation: String::new(),
                wake: Arc::new(Notify::new()),
                stop: CancellationToken::new(),
            },
        );
        let state = State {
            servers,
            members,
            exclusions: Exclusions::default(),
            peers_synced: false,
            shutdown: None,
        };
        let snapshot = build(&state);
        let wakes = wakes(&state);
        Arc::new(Self {
            snapshot: ArcSwap::from_pointee(snapshot),
            state: Mutex::new(state),
            wakes: ArcSwap::from_pointee(wakes),
            new_upstream,
            metrics,
            settings,
            clock,
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
        for wake in self.wakes.load().iter() {
            wake.notify_one();
        }
    }

    /// A request forwarded to peer `name` failed in a way that says the peer, not the
    /// request, is the problem (it could not be reached, or did not answer in time): it is
    /// marked suspect at once, so the next requests go to another server that serves what
    /// they ask for, and its refresher is woken to probe it (with backoff while it fails).
    /// The first successful probe brings it back. The local server is never marked: it has no
    /// replacement, and its own failures are answered as they come.
    pub fn suspect(&self, name: &ServerName, cause: &ProxyError) {
        let mut state = self.lock();
        let Some(s) = state.servers.iter_mut().find(|s| &s.name == name) else {
            return;
        };
        if s.local || s.suspect {
            return;
        }
        tracing::warn!(peer = %name, %cause, "peer marked suspect: not chosen while another server serves what is asked, until a probe of its discovery succeeds");
        let (error, now) = (
            Arc::new(RefreshError::Request(cause.clone())),
            SystemTime::now(),
        );
        s.up = false;
        s.suspect = true;
        s.error = Some(error.clone());
        s.error_at = Some(now);
        s.suspected_by = Some((error, now));
        self.metrics
            .peer_up
            .get_or_create(&PeerLabels {
                peer: name.to_string(),
            })
            .set(0);
        self.publish(&state);
        if let Some(m) = state.members.get(name) {
            m.wake.notify_one();
        }
    }

    /// The failure that made `name` suspect, while it is.
    fn suspected_by(&self, name: &ServerName) -> Option<Arc<RefreshError>> {
        let state = self.lock();
        let s = state.servers.iter().find(|s| &s.name == name)?;
        s.suspected_by.as_ref().map(|(e, _)| e.clone())
    }

    /// Replaces the peer set. A peer that left is forgotten with its GVRs; one that joined,
    /// moved or restarted is fetched at once. The first call marks the peer source synced.
    pub fn set_peers(self: &Arc<Self>, peers: Vec<PeerSpec>) {
        let mut state = self.lock();
        let wanted: BTreeMap<ServerName, PeerSpec> =
            peers.into_iter().map(|p| (p.name.clone(), p)).collect();
        let mut changed = !state.peers_synced;
        state.peers_synced = true;

        let gone: Vec<ServerName> = state
            .members
            .iter()
            .filter(|(name, m)| {
                !m.local && wanted.get(*name).is_none_or(|p| p.url != m.upstream.base)
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in gone {
            if let Some(m) = state.members.remove(&name) {
                m.stop.cancel();
            }
            let git_version = state
                .servers
                .iter()
                .find(|s| s.name == name)
                .and_then(ServerState::git_version)
                .map(str::to_owned);
            state.servers.retain(|s| s.name != name);
            self.forget_series(&name, git_version.as_deref());
            tracing::info!(peer = %name, "peer left");
            changed = true;
        }
        for (name, spec) in wanted {
            if let Some(m) = state.members.get_mut(&name) {
                if m.generation != spec.generation {
                    m.generation = spec.generation;
                    m.wake.notify_one();
                }
                continue;
            }
            let upstream = match (self.new_upstream)(&name, &spec.url) {
                Ok(u) => u,
                Err(why) => {
                    tracing::warn!(peer = %name, url = %spec.url, %why, "peer ignored");
                    continue;
                }
            };
            // A connection to it given up on an unanswered PING marks it, even when only
            // watches were on it (no request fails that would).
            let cache = Arc::downgrade(self);
            let peer = name.clone();
            upstream.on_connection_hung(move |cause| {
                if let Some(cache) = cache.upgrade() {
                    let error = ProxyError::Transport {
                        upstream: peer.clone(),
                        failure: TransportFailure::Other,
                        cause,
                        written: false,
                    };
                    cache.suspect(&peer, &error);
                }
            });
            tracing::info!(peer = %name, url = %spec.url, "peer joined");
            state
                .servers
                .push(ServerState::new(name.clone(), spec.url.to_string(), false));
            state.servers[1..].sort_by(|a, b| a.name.cmp(&b.name));
            let member = Member {
                upstream,
                local: false,
                generation: spec.generation,
                wake: Arc::new(Notify::new()),
                stop: CancellationToken::new(),
            };
            if let Some(shutdown) = state.shutdown.clone() {
                self.spawn(&member, shutdown);
            }
            state.members.insert(name, member);
            changed = true;
        }
        if changed {
            self.publish(&state);
        }
    }

    /// Runs one refresher per server until `shutdown` is cancelled.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        {
            let mut state = self.lock();
            state.shutdown = Some(shutdown.clone());
            for m in state.members.values() {
                self.spawn(m, shutdown.clone());
            }
        }
        shutdown.cancelled().await;
    }

    fn spawn(self: &Arc<Self>, member: &Member, shutdown: CancellationToken) {
        let cache = self.clone();
        let upstream = member.upstream.clone();
        let wake = member.wake.clone();
        let stop = member.stop.clone();
        let local = member.local;
        tokio::spawn(async move {
            tokio::select! {
                () = cache.refresh_loop(upstream, local, wake) => {}
                () = stop.cancelled() => {}
                () = shutdown.cancelled() => {}
            }
        });
    }

    async fn refresh_loop(&self, upstream: Upstream, local: bool, wake: Arc<Notify>) {
        let name = upstream.name.clone();
        let mut failures: u32 = 0;
        loop {
            let started = Instant::now();
            let result = fetch(&upstream, self.settings.max_document_bytes, &|status| {
                self.observe_fetch(local, status)
            })
            .await;
            let took = started.elapsed();
            let delay = match &result {
                Ok(_) => {
                    failures = 0;
                    self.settings.interval
                }
                Err(e) => {
                    match self.suspected_by(&name) {
                        Some(first) => {
                            tracing::warn!(server = %name, url = %upstream.base, cause = %e, suspected_by = %first, "discovery probe of a suspect server failed");
                        }
                        None => {
                            tracing::warn!(server = %name, url = %upstream.base, cause = %e, "discovery fetch failed");
                        }
                    }
                    self.metrics
                        .peer_discovery_sync_errors
                        .get_or_create(&TypeLabels { r#type: e.kind() })
                        .inc();
                    failures = failures.saturating_add(1);
                    backoff(failures, self.settings.interval.min(BACKOFF_MAX))
                }
            };
            self.record(&name, took, result.map_err(RefreshError::from));
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = wake.notified() => {
                    tokio::time::sleep(MISS_REFRESH_GAP.saturating_sub(started.elapsed())).await;
                }
            }
        }
    }

    /// Upstream counts each discovery request to a peer in the rerouted-requests family, with
    /// empty group, version and resource (k8s.io/apiserver kubernetes-1.36.0,
    /// `pkg/util/peerproxy/metrics/metrics.go`); the local server's are not.
    fn observe_fetch(&self, local: bool, status: http::StatusCode) {
        if local {
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

    /// Every per-peer series goes with the peer (under the state lock, which `record` also
    /// holds, so a fetch that ends meanwhile cannot bring one back).
    fn forget_series(&self, name: &ServerName, git_version: Option<&str>) {
        self.metrics.forget_peer(&name.to_string(), git_version);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave State half-updated in a way that matters
        // more than stopping discovery altogether would.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records a fetch result and publishes a new snapshot if routing changed. A result for
    /// a peer that has left meanwhile is dropped.
    fn record(&self, name: &ServerName, took: Duration, result: Result<ServerView, RefreshError>) {
        let mut state = self.lock();
        let Some(s) = state.servers.iter_mut().find(|s| &s.name == name) else {
            return;
        };
        self.metrics
            .peer_fetch_duration
            .get_or_create(&PeerLabels {
                peer: name.to_string(),
            })
            .observe(took.as_secs_f64());
        // The snapshot shows the error, so one that reads differently is a change; the same
        // failure again (a server still refusing connections) is not.
        let shown = |s: &ServerState| s.error.as_ref().map(ToString::to_string);
        let was = (s.up, s.attempted, shown(s));
        let was_version = s.git_version().map(str::to_owned);
        s.attempted = true;
        s.last_fetch = Some(SystemTime::now());
        let mut changed = false;
        match result {
            Ok(mut view) => {
                s.up = true;
                s.suspect = false;
                s.error = None;
                s.error_at = None;
                s.suspected_by = None;
                // `/version` is read after the discovery documents, and a failure there leaves
                // the release unknown (`fetch::version`). When it fails but the surface is the
                // one already known, the server's release is kept: a restart in between (the
                // surface read from the old process, `/version` refused), or a one-off
                // failure, must not turn every side of the skew to `unknown`, and a server
                // that then stays down keeps this view and release until it is back.
                if view.version.is_none()
                    && let Some(old) = &s.view
                    && old.core == view.core
                    && old.apis == view.apis
                {
                    view.version.clone_from(&old.version);
                }
                let same = s.view.as_ref().is_some_and(|old| {
                    old.core == view.core
                        && old.apis == view.apis
                        && old.apis_raw == view.apis_raw
                        && old.version == view.version
                });
                if !same {
                    s.view = Some(Arc::new(view));
                    changed = true;
                }
            }
            // A failed probe keeps a suspect server suspect until one succeeds; its error is
            // the probe's, beside the request's failure that made it suspect (`suspected_by`).
            Err(cause) => {
                s.up = false;
                s.error = Some(Arc::new(cause));
                s.error_at = s.last_fetch;
            }
        }
        changed |= was != (s.up, s.attempted, shown(s));
        self.metrics
            .set_server_version(name.as_str(), was_version.as_deref(), s.git_version());
        let (up, is_local) = (s.up, s.local);
        let count = s.view.as_ref().map_or(0, |v| v.gvr_count());
        self.metrics
            .discovery_resources
            .get_or_create(&ServerLabels {
                server: name.to_string(),
            })
            .set(count as i64);
        if is_local {
            let current = local_extension_gvs(&state);
            changed |= state.exclusions.update(current, (self.clock)());
        } else {
            self.metrics
                .peer_up
                .get_or_create(&PeerLabels {
                    peer: name.to_string(),
                })
                .set(i64::from(up));
        }
        if changed {
            self.publish(&state);
        }
    }

    /// [`Cache::record`] for the crate's tests, which feed fetch results by hand.
    #[cfg(test)]
    pub(crate) fn record_for_test(
        &self,
        name: &ServerName,
        result: Result<ServerView, RefreshError>,
    ) {
        self.record(name, Duration::ZERO, result);
    }

    fn publish(&self, state: &State) {
        self.wakes.store(Arc::new(wakes(state)));
        self.snapshot.store(Arc::new(build(state)));
    }
}

fn wakes(state: &State) -> Vec<Arc<Notify>> {
    state.members.values().map(|m| m.wake.clone()).collect()
}

fn build(state: &State) -> Snapshot {
    let recent: BTreeSet<GroupVersion> = state.exclusions.left.keys().cloned().collect();
    let upstreams = state
        .members
        .iter()
        .filter(|(_, m)| !m.local)
        .map(|(n, m)| (n.clone(), m.upstream.clone()))
        .collect();
    Snapshot::build(
        state.servers.clone(),
        &recent,
        upstreams,
        state.peers_synced,
    )
}

/// The local server's extension group-versions (CRDs, APIServices) as last fetched.
fn local_extension_gvs(state: &State) -> BTreeSet<GroupVersion> {
    state
        .servers
        .iter()
        .find(|s| s.local)
        .and_then(|s| s.view.as_ref())
        .map(|v| v.extension_gvs().collect())
        .unwrap_or_default()
}

/// The exclusion grace: a group-version that stops being a local extension keeps peers from
/// serving it for [`EXCLUSION_GRACE`], so a CRD being deleted and recreated is not routed to a
/// peer's copy meanwhile.
#[derive(Debug, Default)]
struct Exclusions {
    /// The local extension group-versions at the last update.
    local: BTreeSet<GroupVersion>,
    /// Group-versions that left `local`, and when.
    left: BTreeMap<GroupVersion, Instant>,
}

impl Exclusions {
    /// Takes the local server's `current` extensions at `now`; returns whether the extension
    /// set or the recently-left set changed.
    fn update(&mut self, current: BTreeSet<GroupVersion>, now: Instant) -> bool {
        let before = self.left.len();
        for gv in self.local.difference(&current) {
            self.left.insert(gv.clone(), now);
        }
        self.left.retain(|gv, since| {
            !current.contains(gv) && now.duration_since(*since) < EXCLUSION_GRACE
        });
        let changed = before != self.left.len() || self.local != current;
        self.local = current;
        changed
    }
}

fn backoff(failures: u32, cap: Duration) -> Duration {
    let exp = BACKOFF_START.saturating_mul(1u32 << failures.saturating_sub(1).min(16));
    exp.min(cap.max(BACKOFF_START))
}

#[cfg(test)]
mod tests;
