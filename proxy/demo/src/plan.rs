//! The rehearsal's timeline, and what each request should meet at each point of it.
//!
//! A rolling upgrade of three nodes has five phases: all old, then each node upgraded in
//! turn, then all new. Upgrading a node has two segments: while it restarts (the load
//! balancer has taken it out of rotation, its API server is stopped, its peers still know its
//! last surface), then with it back on the new release. Each segment is one [`ClusterState`].
//!
//! The state decides, for every request, what mvproxy must do with it — from the discovery
//! documents of the servers alone ([`ClusterState::expect`]). That is the counterfactual the
//! report counts as "false 404s avoided": a request that the load balancer sent to a server
//! lacking its GVR while another server serves it would have been a `404 Not Found` without
//! mvproxy. The runner then checks every answer and mvproxy's own metrics against it.

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use serde::Serialize;

use super::catalog::{self, Release};
use mvproxy_core::classify::Gvr;
use mvproxy_core::discovery::side::{self, Side, Surface};

/// Number of control-plane nodes.
pub(crate) const NODES: usize = 3;

/// Share of an upgrade phase spent with the node down (the rest: back on the new release).
const RESTART_SHARE: f64 = 0.4;

/// `apiserver-1` … `apiserver-3`.
pub(crate) fn node_name(node: usize) -> String {
    format!("apiserver-{}", node + 1)
}

/// One node as a segment sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeState {
    /// The release it runs, or last ran while it is down.
    pub(crate) release: Release,
    /// Serving and in the load balancer's rotation. A node that is down is also out of
    /// rotation, as kube-apiserver's failing `/readyz` takes it out of a real one.
    pub(crate) up: bool,
}

/// Every node's state during one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClusterState {
    pub(crate) nodes: [NodeState; NODES],
}

/// Where a request must end up, judged from the servers' discovery documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Expect {
    /// The picked server serves the GVR.
    Local,
    /// The picked server lacks the GVR and an up server serves it: without mvproxy a false
    /// 404; with it, forwarded to a peer.
    Reroute,
    /// The picked server lacks the GVR and only servers that are down serve it: without
    /// mvproxy a false 404; with it, a retryable 503.
    PeersDown,
    /// No server serves the GVR (a client of the other release): a true 404, passed through.
    TrueNotFound,
    /// `GET /apis`: answered by mvproxy from the merged discovery.
    Discovery,
}

impl Expect {
    /// Whether, without mvproxy, the client would have got a false 404.
    pub(crate) fn false_404(self) -> bool {
        matches!(self, Self::Reroute | Self::PeersDown)
    }
}

/// The surfaces of both releases, from the rendered discovery documents.
#[derive(Debug, Clone)]
pub(crate) struct Surfaces {
    old: BTreeSet<Gvr>,
    new: BTreeSet<Gvr>,
    /// The same, as the skew's judgement takes them.
    old_set: HashSet<Gvr>,
    new_set: HashSet<Gvr>,
}

impl Surfaces {
    pub(crate) fn new() -> Self {
        let (old, new) = (
            catalog::surface(Release::Old),
            catalog::surface(Release::New),
        );
        Self {
            old_set: old.iter().cloned().collect(),
            new_set: new.iter().cloned().collect(),
            old,
            new,
        }
    }

    /// Whether a server of `release` lists `gvr` in its discovery.
    pub(crate) fn serves(&self, release: Release, gvr: &Gvr) -> bool {
        match release {
            Release::Old => self.old.contains(gvr),
            Release::New => self.new.contains(gvr),
        }
    }
}

impl Default for Surfaces {
    fn default() -> Self {
        Self::new()
    }
}

impl ClusterState {
    fn all(release: Release) -> Self {
        Self {
            nodes: [NodeState { release, up: true }; NODES],
        }
    }

    /// The nodes in the load balancer's rotation.
    pub(crate) fn in_rotation(&self) -> Vec<usize> {
        (0..NODES).filter(|&n| self.nodes[n].up).collect()
    }

    /// What a request for `gvr` that the load balancer sent to `picked` must meet: checked
    /// against the discovery of the picked server, then of the others.
    pub(crate) fn expect(&self, surfaces: &Surfaces, picked: usize, gvr: &Gvr) -> Expect {
        if surfaces.serves(self.nodes[picked].release, gvr) {
            return Expect::Local;
        }
        let capable: Vec<NodeState> = (0..NODES)
            .filter(|&n| n != picked)
            .map(|n| self.nodes[n])
            .filter(|s| surfaces.serves(s.release, gvr))
            .collect();
        if capable.is_empty() {
            Expect::TrueNotFound
        } else if capable.iter().any(|s| s.up) {
            Expect::Reroute
        } else {
            Expect::PeersDown
        }
    }

    /// Whether the GVR is served by some node (up, or down with a last-known surface).
    pub(crate) fn served(&self, surfaces: &Surfaces, gvr: &Gvr) -> bool {
        self.nodes.iter().any(|s| surfaces.serves(s.release, gvr))
    }

    /// GVRs served by some nodes and not by others, with the nodes that serve each: what
    /// `/debug/discovery` calls the skew.
    pub(crate) fn skew(&self, surfaces: &Surfaces) -> Vec<(Gvr, Vec<usize>)> {
        let all: BTreeSet<&Gvr> = surfaces.old.union(&surfaces.new).collect();
        all.into_iter()
            .filter_map(|gvr| {
                let by: Vec<usize> = (0..NODES)
                    .filter(|&n| surfaces.serves(self.nodes[n].release, gvr))
                    .collect();
                (!by.is_empty() && by.len() < NODES).then(|| (gvr.clone(), by))
            })
            .collect()
    }

    /// Which side of the skew serves `gvr` (`None` outside the skew), judged as mvproxy judges
    /// it from the servers' `/version`: every node counts, a node that is down with its
    /// last-known surface and release.
    pub(crate) fn side(&self, surfaces: &Surfaces, gvr: &Gvr) -> Option<Side> {
        let servers: Vec<Surface<'_>> = self
            .nodes
            .iter()
            .map(|n| Surface {
                release: side::Release::from_version_info(n.release.git_version(), "", ""),
                gvrs: match n.release {
                    Release::Old => &surfaces.old_set,
                    Release::New => &surfaces.new_set,
                },
            })
            .collect();
        side::judge(gvr, &servers)
    }

    /// Whether both releases are serving at once.
    pub(crate) fn mixed(&self) -> bool {
        let up = || self.nodes.iter().filter(|s| s.up);
        up().any(|s| s.release == Release::Old) && up().any(|s| s.release == Release::New)
    }

    /// `1.34 1.31 (1.31, down)`-style summary.
    pub(crate) fn describe(&self) -> String {
        self.nodes
            .iter()
            .map(|s| {
                if s.up {
                    s.release.version().to_owned()
                } else {
                    "down".to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// What happens during a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SegmentKind {
    /// Every node serving.
    Steady,
    /// One node out of rotation, its API server stopped, to be restarted on the new release.
    Restart,
}

/// One segment of a phase.
#[derive(Debug, Clone)]
pub(crate) struct Segment {
    pub(crate) kind: SegmentKind,
    pub(crate) state: ClusterState,
    pub(crate) duration: Duration,
}

/// One phase of the rehearsal.
#[derive(Debug, Clone)]
pub(crate) struct Phase {
    /// `all-old`, `node-1`, …, `all-new`.
    pub(crate) name: String,
    /// A line for people.
    pub(crate) title: String,
    pub(crate) segments: Vec<Segment>,
}

/// The five phases, `total` split evenly between them.
pub(crate) fn phases(total: Duration) -> Vec<Phase> {
    let each = total / 5;
    let restart = each.mul_f64(RESTART_SHARE);
    let steady = each.saturating_sub(restart);
    let mut state = ClusterState::all(Release::Old);
    let mut out = vec![Phase {
        name: "all-old".to_owned(),
        title: format!("every node on {}", Release::Old.version()),
        segments: vec![Segment {
            kind: SegmentKind::Steady,
            state,
            duration: each,
        }],
    }];
    for node in 0..NODES {
        let mut down = state;
        down.nodes[node].up = false;
        state.nodes[node] = NodeState {
            release: Release::New,
            up: true,
        };
        out.push(Phase {
            name: format!("node-{}", node + 1),
            title: format!(
                "{} drained, stopped, restarted on {}",
                node_name(node),
                Release::New.version()
            ),
            segments: vec![
                Segment {
                    kind: SegmentKind::Restart,
                    state: down,
                    duration: restart,
                },
                Segment {
                    kind: SegmentKind::Steady,
                    state,
                    duration: steady,
                },
            ],
        });
    }
    out.push(Phase {
        name: "all-new".to_owned(),
        title: format!("every node on {}", Release::New.version()),
        segments: vec![Segment {
            kind: SegmentKind::Steady,
            state,
            duration: each,
        }],
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_phases_from_all_old_to_all_new() {
        let p = phases(Duration::from_secs(25));
        let names: Vec<_> = p.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["all-old", "node-1", "node-2", "node-3", "all-new"]);
        let total: Duration = p.iter().flat_map(|p| &p.segments).map(|s| s.duration).sum();
        assert_eq!(total, Duration::from_secs(25));
        assert_eq!(p[2].segments[0].state.describe(), "1.34 down 1.31");
        assert_eq!(p[2].segments[1].state.describe(), "1.34 1.34 1.31");
        assert!(!p[0].segments[0].state.mixed() && !p[4].segments[0].state.mixed());
        assert!(p[1].segments[1].state.mixed() && p[2].segments[1].state.mixed());
    }

    #[test]
    fn expectations_follow_the_discovery_documents() {
        let s = Surfaces::new();
        let p = phases(Duration::from_secs(5));
        let pods = Gvr::new("", "v1", "pods");
        let new_only = Gvr::new("resource.k8s.io", "v1beta2", "resourceclaims");
        let old_only = Gvr::new("flowcontrol.apiserver.k8s.io", "v1beta3", "flowschemas");
        let all_old = p[0].segments[0].state;
        assert_eq!(all_old.expect(&s, 0, &pods), Expect::Local);
        assert_eq!(all_old.expect(&s, 1, &new_only), Expect::TrueNotFound);
        let node1 = p[1].segments[1].state;
        assert_eq!(node1.expect(&s, 1, &new_only), Expect::Reroute);
        assert_eq!(node1.expect(&s, 0, &old_only), Expect::Reroute);
        assert_eq!(node1.expect(&s, 0, &new_only), Expect::Local);
        // Node 3 restarting: the last server of 1.31 is down, so its APIs get 503s.
        let node3_down = p[3].segments[0].state;
        assert_eq!(node3_down.expect(&s, 0, &old_only), Expect::PeersDown);
        assert_eq!(node3_down.in_rotation(), vec![0, 1]);
        let all_new = p[4].segments[0].state;
        assert_eq!(all_new.expect(&s, 2, &old_only), Expect::TrueNotFound);
        assert!(all_new.skew(&s).is_empty());
        assert_eq!(all_new.side(&s, &old_only), None);
        assert_eq!(node1.side(&s, &old_only), Some(Side::OldOnly));
        assert_eq!(node1.side(&s, &new_only), Some(Side::NewOnly));
        assert_eq!(node1.side(&s, &pods), None);
        assert_eq!(node3_down.side(&s, &old_only), Some(Side::OldOnly));
        assert_eq!(p[1].segments[0].state.side(&s, &old_only), None);
        assert_eq!(node1.skew(&s).len(), 28);
    }
}
