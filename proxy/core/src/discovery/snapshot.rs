//! The routing snapshot: what every server serves, as one immutable value.
//!
//! Requests read it without locks (an `Arc` load) while refreshes build a new one and swap it
//! in whole, so a lookup never waits on a fetch. Everything a routing decision or a discovery
//! response needs is precomputed here: the local GVR set, a `Gvr → peers` index, which peers
//! are up or have never been seen, and (lazily, once per snapshot) the merged `/apis`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::BuildHasherDefault;
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime};

use bytes::Bytes;

use super::failure::RefreshError;
use super::group_docs::{GroupDocs, Groups};
use super::legacy;
use super::merge::{self, Merged};
use super::types::{ApiGroupDiscovery, ApiGroupDiscoveryList};
pub use super::view::{GroupVersion, ServerView};
use crate::classify::Gvr;
use crate::discovery::side::{self, Side, Surface};
use crate::plumbing::ServerName;
use crate::upstream::Upstream;

/// One server's state as the refresher knows it.
#[derive(Debug, Clone)]
pub struct ServerState {
    /// The server's name.
    pub name: ServerName,
    /// Its URL.
    pub url: String,
    /// Whether it is the local server.
    pub local: bool,
    /// The last fetch succeeded.
    pub up: bool,
    /// Why the last fetch failed (`None` after a success), in words only where it is shown.
    pub error: Option<Arc<RefreshError>>,
    /// When it was last fetched.
    pub last_fetch: Option<SystemTime>,
    /// The last good view; `None` until a fetch has succeeded once. A server that goes down
    /// keeps it, so that what only it served gets a 503 and not a false 404.
    pub view: Option<Arc<ServerView>>,
    /// At least one fetch has completed, successfully or not.
    pub attempted: bool,
    /// A request forwarded to it failed to reach it or timed out, and no probe of its
    /// discovery has succeeded since ([`crate::discovery::Cache::suspect`]); `up` is false.
    pub suspect: bool,
    /// When `error` happened: the latest failure, a request's or a probe's.
    pub error_at: Option<SystemTime>,
    /// While `suspect`: the request's failure that made it so, and when. `error` then says why
    /// it is still excluded (the latest probe's failure, say a document over the size limit),
    /// which may not be why it was first (a request that had no answer).
    pub suspected_by: Option<(Arc<RefreshError>, SystemTime)>,
}

impl ServerState {
    /// The `gitVersion` of the server's `/version` as last read with its discovery (kept over
    /// a failed read of an unchanged surface, see the refresh loop).
    pub fn git_version(&self) -> Option<&str> {
        self.view
            .as_ref()
            .and_then(|v| v.version.as_ref())
            .map(|v| v.git_version.as_str())
    }

    /// `up`, `suspect` (a request to it failed; being probed) or `down` (its discovery could
    /// not be read), as `/debug/discovery` shows it.
    pub fn health(&self) -> &'static str {
        if self.up {
            "up"
        } else if self.suspect {
            "suspect"
        } else {
            "down"
        }
    }

    /// A server not fetched yet.
    pub fn new(name: ServerName, url: String, local: bool) -> Self {
        Self {
            name,
            url,
            local,
            up: false,
            error: None,
            last_fetch: None,
            view: None,
            attempted: false,
            suspect: false,
            error_at: None,
            suspected_by: None,
        }
    }
}

/// A peer as the request path sees it.
#[derive(Debug)]
pub struct PeerEntry {
    /// Its last fetch succeeded.
    pub up: bool,
    /// Why its last fetch failed.
    pub error: Option<Arc<RefreshError>>,
    /// The view after group-version exclusion; `None` if never fetched.
    pub view: Option<ServerView>,
}

/// The merged `/apis` documents, built once per snapshot on first use.
#[derive(Debug)]
pub struct MergedApis {
    /// Aggregated v2 body and its quoted ETag.
    pub aggregated: Bytes,
    /// Its quoted `ETag`.
    pub etag: String,
    /// Legacy `APIGroupList` body, or `None` when the merge changed nothing (serve local's own).
    pub legacy: Option<Bytes>,
    /// Build time, for the merge latency histogram.
    pub took: std::time::Duration,
}

/// Who serves one GVR: the routing index's entry.
#[derive(Debug, Default)]
pub struct Serving {
    /// The local server lists it.
    pub local: bool,
    /// Peers whose view (after exclusion) lists it.
    pub peers: Vec<ServerName>,
    /// Those of `peers` that are up (fixed per snapshot, as their state is).
    pub up: Vec<ServerName>,
}

/// The routing index's hash: FxHash's multiply-rotate, word by word, instead of SipHash.
/// Its keys come from the servers' discovery documents, never from clients (whose paths
/// are only looked up), so flooding it with colliding keys is not open to a client; and a
/// lookup is on every request.
#[derive(Default)]
pub struct GvrHasher(u64);

impl std::hash::Hasher for GvrHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(c);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl GvrHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// Everything a request needs to be routed, immutable.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Every server, local first, as fetched (for `/debug/discovery` and `/readyz`).
    pub servers: Vec<ServerState>,
    local: Option<Arc<ServerView>>,
    peers: BTreeMap<ServerName, PeerEntry>,
    index: HashMap<Gvr, Serving, BuildHasherDefault<GvrHasher>>,
    excluded: BTreeSet<GroupVersion>,
    local_name: ServerName,
    upstreams: BTreeMap<ServerName, Upstream>,
    peers_synced: bool,
    merged: OnceLock<Arc<MergedApis>>,
    group_docs: OnceLock<Arc<GroupDocs>>,
    /// The side of every GVR not served by every server seen (`crate::skew`).
    skew: HashMap<Gvr, Side>,
}

impl Snapshot {
    /// Builds the snapshot from the servers' states. `recently_excluded` holds
    /// group-versions that left the local extension set less than the grace period ago.
    /// `upstreams` reaches each peer; `peers_synced` says the peer source has reported once.
    pub fn build(
        servers: Vec<ServerState>,
        recently_excluded: &BTreeSet<GroupVersion>,
        upstreams: BTreeMap<ServerName, Upstream>,
        peers_synced: bool,
    ) -> Self {
        let local_state = servers.iter().find(|s| s.local);
        let local = local_state.and_then(|s| s.view.clone());
        let local_name = local_state.map(|s| s.name.clone()).unwrap_or_default();
        let mut excluded: BTreeSet<GroupVersion> = recently_excluded.clone();
        if let Some(l) = &local {
            excluded.extend(l.extension_gvs());
        }
        let mut peers = BTreeMap::new();
        let mut index: HashMap<Gvr, Serving, BuildHasherDefault<GvrHasher>> = HashMap::default();
        if let Some(l) = &local {
            for gvr in l.gvrs() {
                index.entry(gvr.clone()).or_default().local = true;
            }
        }
        for s in servers.iter().filter(|s| !s.local) {
            let view = s.view.as_ref().map(|v| v.without(&excluded));
            if let Some(v) = &view {
                for gvr in v.gvrs() {
                    let serving = index.entry(gvr.clone()).or_default();
                    serving.peers.push(s.name.clone());
                    if s.up {
                        serving.up.push(s.name.clone());
                    }
                }
            }
            peers.insert(
                s.name.clone(),
                PeerEntry {
                    up: s.up,
                    error: s.error.clone(),
                    view,
                },
            );
        }
        let surfaces: Vec<Surface<'_>> = servers
            .iter()
            .filter_map(|s| s.view.as_ref())
            .map(|v| Surface {
                release: v.version.as_ref().and_then(|v| v.release),
                gvrs: &v.gvrs,
            })
            .collect();
        let skew = side::sides(&surfaces);
        Self {
            servers,
            local,
            peers,
            index,
            excluded,
            local_name,
            upstreams,
            peers_synced,
            merged: OnceLock::new(),
            group_docs: OnceLock::new(),
            skew,
        }
    }

    /// Which side of the skew serves `gvr`; `None` when every server seen, or none, serves it.
    pub fn skew_side(&self, gvr: &Gvr) -> Option<Side> {
        if self.skew.is_empty() {
            return None;
        }
        self.skew.get(gvr).copied()
    }

    /// The local server's discovery has been fetched at least once.
    pub fn synced(&self) -> bool {
        self.local.is_some()
    }

    /// The peer set is known and every server in it has been fetched once or marked down
    /// (what `/readyz` waits for).
    pub fn ready(&self) -> bool {
        self.peers_synced && !self.servers.is_empty() && self.servers.iter().all(|s| s.attempted)
    }

    /// How to reach a peer.
    pub fn upstream(&self, peer: &ServerName) -> Option<&Upstream> {
        self.upstreams.get(peer)
    }

    /// The local view, once fetched.
    pub fn local(&self) -> Option<&ServerView> {
        self.local.as_deref()
    }

    /// Peers whose view (after exclusion) lists the resource, in name order.
    pub fn peers_serving(&self, gvr: &Gvr) -> &[ServerName] {
        self.index
            .get(gvr)
            .map(|s| s.peers.as_slice())
            .unwrap_or(&[])
    }

    /// Who serves the resource, in one lookup (the routing decision's); `None` when no
    /// server does.
    pub fn serving(&self, gvr: &Gvr) -> Option<&Serving> {
        self.index.get(gvr)
    }

    /// Peers that serve the group, or the group-version if `version` is given.
    pub fn peers_serving_gv(&self, group: &str, version: Option<&str>) -> Vec<ServerName> {
        self.peers
            .iter()
            .filter(|(_, p)| {
                p.view.as_ref().is_some_and(|v| match version {
                    Some(ver) => v.serves_gv(group, ver),
                    None => v.serves_group(group),
                })
            })
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Every peer's entry, in name order.
    pub fn peers(&self) -> impl Iterator<Item = (&ServerName, &PeerEntry)> {
        self.peers.iter()
    }

    /// A peer's entry.
    pub fn peer(&self, name: &ServerName) -> Option<&PeerEntry> {
        self.peers.get(name)
    }

    /// The first peer whose surface has never been fetched, with its last error.
    pub fn unseen_peer(&self) -> Option<(&ServerName, Option<&RefreshError>)> {
        self.peers
            .iter()
            .find(|(_, p)| p.view.is_none())
            .map(|(n, p)| (n, p.error.as_deref()))
    }

    /// Group-versions kept local-only.
    pub fn excluded(&self) -> &BTreeSet<GroupVersion> {
        &self.excluded
    }

    /// The merged `/apis`, and whether it came from the cache (`true`) or was built now.
    /// `None` until local discovery has been fetched.
    pub fn merged(&self) -> Option<(Arc<MergedApis>, bool)> {
        let local = self.local.as_ref()?;
        Some(once_per_snapshot(&self.merged, || self.build_merged(local)))
    }

    /// The merged legacy documents of single groups and group-versions
    /// ([`super::group_docs`]), and whether they came from the cache (`true`) or were built
    /// now. `None` until local discovery has been fetched.
    pub fn group_docs(&self) -> Option<(Arc<GroupDocs>, bool)> {
        let local = self.local.as_ref()?;
        Some(once_per_snapshot(&self.group_docs, || {
            let peers: Vec<Groups<'_>> = self
                .peers
                .iter()
                .filter_map(|(n, p)| {
                    p.view.as_ref().map(|v| Groups {
                        id: n.as_str(),
                        core: &v.core,
                        apis: &v.apis,
                    })
                })
                .collect();
            let own = Groups {
                id: self.local_name.as_str(),
                core: &local.core,
                apis: &local.apis,
            };
            GroupDocs::build(own, &peers)
        }))
    }

    fn build_merged(&self, local: &ServerView) -> MergedApis {
        let start = Instant::now();
        let peers: Vec<(&str, &[ApiGroupDiscovery])> = self
            .peers
            .iter()
            .filter_map(|(n, p)| p.view.as_ref().map(|v| (n.as_str(), v.apis.as_slice())))
            .collect();
        let (aggregated, etag, legacy) =
            match merge::merge(self.local_name.as_str(), &local.apis, &peers) {
                Merged::Unchanged => {
                    let (body, etag) = match &local.apis_raw {
                        Some(raw) => (raw.clone(), merge::etag_of(raw)),
                        None => {
                            let (b, e) = merge::encode_with_etag(&ApiGroupDiscoveryList::v2(
                                local.apis.clone(),
                            ));
                            (Bytes::from(b), e)
                        }
                    };
                    (body, etag, None)
                }
                Merged::Changed(items) => {
                    let legacy =
                        serde_json::to_vec(&legacy::group_list(&items)).unwrap_or_default();
                    let (b, e) = merge::encode_with_etag(&ApiGroupDiscoveryList::v2(items));
                    (Bytes::from(b), e, Some(Bytes::from(legacy)))
                }
            };
        MergedApis {
            aggregated,
            etag,
            legacy,
            took: start.elapsed(),
        }
    }
}

/// What `cell` holds, built by `build` on first use, and whether it was there already (`true`,
/// a cache hit) or built by this call.
fn once_per_snapshot<T>(cell: &OnceLock<Arc<T>>, build: impl FnOnce() -> T) -> (Arc<T>, bool) {
    if let Some(v) = cell.get() {
        return (v.clone(), true);
    }
    let mut built = false;
    let v = cell
        .get_or_init(|| {
            built = true;
            Arc::new(build())
        })
        .clone();
    (v, !built)
}

#[cfg(test)]
mod tests;
