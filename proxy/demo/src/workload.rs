//! The client workload: what controllers and kubectl send during an upgrade, planned up front.
//!
//! Every request of the run is decided before the first one is sent, from the seed alone: its
//! time, the proxy the load balancer picks (uniformly among the nodes in rotation), the verb
//! (list, get, watch, create, or a `GET /apis` discovery refresh) and the GVR. So the same
//! seed gives the same request sequence, which `--plan-only` prints and the report
//! fingerprints, and the counterfactual of each request ([`Expect`]) is fixed before any
//! answer comes back. The random numbers are SplitMix64, written here, so that a seed's
//! sequence cannot change with a dependency upgrade.
//!
//! The mix is weighted toward the GVRs every release serves and controllers hammer (pods,
//! leases, endpointslices, …); the GVRs only one release serves get enough weight to show
//! what mixed versions do; GVRs that no node serves at that point are still asked for now
//! and then, as a client of the other release would, and must get the true `404`.

use std::fmt::Write as _;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::catalog::{self, ApiResource};
use super::plan::{Expect, Phase, SegmentKind, Surfaces, node_name};
use mvproxy_core::discovery::side::Side;

/// GVRs that controllers and kubectl use most, as `group/version/resource` (core: `v1/…`).
const HOT: &[&str] = &[
    "v1/pods",
    "v1/configmaps",
    "v1/secrets",
    "v1/services",
    "v1/endpoints",
    "v1/events",
    "v1/nodes",
    "v1/namespaces",
    "v1/serviceaccounts",
    "apps/v1/deployments",
    "apps/v1/replicasets",
    "apps/v1/daemonsets",
    "apps/v1/statefulsets",
    "batch/v1/jobs",
    "coordination.k8s.io/v1/leases",
    "discovery.k8s.io/v1/endpointslices",
    "events.k8s.io/v1/events",
];
const WEIGHT_HOT: u64 = 12;
const WEIGHT_COMMON: u64 = 2;
/// A GVR only one release serves, while some node serves it.
const WEIGHT_SKEWED: u64 = 4;
/// A GVR no node serves at that point.
const WEIGHT_UNSERVED: u64 = 1;
/// Percent of requests that are `GET /apis` discovery refreshes.
const DISCOVERY_PERCENT: u64 = 3;
/// Verb weights among the verbs a resource allows.
const VERBS: &[(Verb, u64)] = &[
    (Verb::List, 35),
    (Verb::Get, 35),
    (Verb::Watch, 10),
    (Verb::Create, 20),
];
/// Namespace of every namespaced request.
pub(crate) const NAMESPACE: &str = "default";
/// Objects every server holds for every resource it serves, so gets find them.
pub(crate) const SEEDED: u64 = 2;

/// The name of seeded object `n` (creates use `demo-{seq}`, so they never collide).
pub(crate) fn seeded_name(n: u64) -> String {
    format!("seed-{n}")
}
/// Server-side bound on a watch (the client leaves after the first event anyway).
const WATCH_TIMEOUT_SECONDS: u32 = 2;

/// SplitMix64 (Steele, Lea and Flood): tiny, fast and fixed forever.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (`n > 0`), by multiply-shift (no modulo bias worth naming).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n.max(1))) >> 64) as u64
    }
}

/// What a request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Verb {
    List,
    Get,
    Watch,
    Create,
    /// `GET /apis`, aggregated v2, revalidated with the last `ETag` like kubectl's cache.
    Discovery,
}

impl Verb {
    fn as_str(self) -> &'static str {
        match self {
            Self::List => "list",
            Self::Get => "get",
            Self::Watch => "watch",
            Self::Create => "create",
            Self::Discovery => "discovery",
        }
    }
}

/// The simulated clients, each with a `User-Agent` as its real counterpart writes it (see
/// [`mvproxy_core::skew::agent`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Agent {
    /// kubectl: discovery, gets and creates.
    Kubectl,
    /// kube-controller-manager's garbage collector: lists and watches of every resource, as
    /// its own ServiceAccount (`--use-service-account-credentials`).
    ControllerManager,
    /// An operator still on `flowcontrol.apiserver.k8s.io/v1beta3`, which 1.32 removed.
    Operator,
}

/// The group-version the operator uses, served by 1.31 and not by 1.34.
pub(crate) const OPERATOR_GROUP_VERSION: (&str, &str) = ("flowcontrol.apiserver.k8s.io", "v1beta3");

impl Agent {
    /// Every agent, in report order.
    pub(crate) const ALL: [Agent; 3] = [Agent::Kubectl, Agent::ControllerManager, Agent::Operator];

    /// The `User-Agent` it sends.
    pub(crate) fn user_agent(self) -> &'static str {
        match self {
            Self::Kubectl => "kubectl/v1.31.0 (linux/amd64) kubernetes/9edcffc",
            Self::ControllerManager => {
                "kube-controller-manager/v1.31.0 (linux/amd64) kubernetes/9edcffc/system:serviceaccount:kube-system:generic-garbage-collector"
            }
            Self::Operator => "flowschema-tuner/v0.4.2 (linux/amd64) kubernetes/$Format",
        }
    }

    /// The `client` label mvproxy gives it.
    pub(crate) fn client(self) -> String {
        mvproxy_core::skew::agent::parse(self.user_agent().as_bytes()).client()
    }

    /// Who sends a request: a function of the request alone, so the seed's sequence is
    /// unchanged. The operator sends everything on its group-version; kubectl the discovery,
    /// gets and creates; the controller manager the lists and watches.
    pub(crate) fn of(verb: Verb, resource: Option<&ApiResource>) -> Agent {
        if let Some(r) = resource
            && (r.gvr.group.as_str(), r.gvr.version.as_str()) == OPERATOR_GROUP_VERSION
        {
            return Agent::Operator;
        }
        match verb {
            Verb::List | Verb::Watch => Agent::ControllerManager,
            Verb::Get | Verb::Create | Verb::Discovery => Agent::Kubectl,
        }
    }
}

/// One planned request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Request {
    /// Position in the whole run, from 0.
    pub(crate) seq: u64,
    /// When to send it, from the start of its segment.
    pub(crate) at: Duration,
    /// The node (its proxy) the load balancer picked.
    pub(crate) node: usize,
    pub(crate) verb: Verb,
    /// Index into [`Workload::resources`]; `None` for discovery.
    pub(crate) resource: Option<usize>,
    /// What it must meet, from the discovery documents (see [`super::plan`]).
    pub(crate) expect: Expect,
    /// The side of the skew its GVR is on, if it is in the skew: what mvproxy must count in
    /// `mvproxy_skew_requests_total`.
    pub(crate) skew: Option<Side>,
}

/// The whole run's requests, per phase and segment.
#[derive(Debug, Clone)]
pub(crate) struct Workload {
    pub(crate) seed: u64,
    pub(crate) rate: u32,
    /// Every resource of either release (see [`catalog::resources`]).
    pub(crate) resources: Vec<ApiResource>,
    /// `requests[phase][segment]`, in sending order.
    pub(crate) requests: Vec<Vec<Vec<Request>>>,
}

/// Plans every request of `phases` at `rate` requests per second.
pub(crate) fn generate(phases: &[Phase], surfaces: &Surfaces, seed: u64, rate: u32) -> Workload {
    let resources = catalog::resources();
    let mut rng = Rng::new(seed);
    let mut seq = 0u64;
    let rate = rate.max(1);
    let requests = phases
        .iter()
        .map(|phase| {
            phase
                .segments
                .iter()
                .map(|segment| {
                    let state = segment.state;
                    let weights: Vec<u64> = resources
                        .iter()
                        .map(|r| weight(r, state.served(surfaces, &r.gvr)))
                        .collect();
                    let total: u64 = weights.iter().sum();
                    let rotation = state.in_rotation();
                    if rotation.is_empty() || total == 0 {
                        return Vec::new();
                    }
                    let count = (segment.duration.as_secs_f64() * f64::from(rate)).round() as u64;
                    (0..count)
                        .map(|i| {
                            let at = Duration::from_secs_f64(i as f64 / f64::from(rate));
                            let node = rotation[rng.below(rotation.len() as u64) as usize];
                            let request = if rng.below(100) < DISCOVERY_PERCENT {
                                Request {
                                    seq,
                                    at,
                                    node,
                                    verb: Verb::Discovery,
                                    resource: None,
                                    expect: Expect::Discovery,
                                    skew: None,
                                }
                            } else {
                                let r = pick(&weights, rng.below(total));
                                let verb = verb(&resources[r], &mut rng);
                                Request {
                                    seq,
                                    at,
                                    node,
                                    verb,
                                    resource: Some(r),
                                    expect: state.expect(surfaces, node, &resources[r].gvr),
                                    skew: state.side(surfaces, &resources[r].gvr),
                                }
                            };
                            seq += 1;
                            request
                        })
                        .collect()
                })
                .collect()
        })
        .collect();
    Workload {
        seed,
        rate,
        resources,
        requests,
    }
}

fn weight(r: &ApiResource, served_now: bool) -> u64 {
    if !served_now {
        WEIGHT_UNSERVED
    } else if HOT.contains(&r.gvr.to_string().as_str()) {
        WEIGHT_HOT
    } else if r.old && r.new {
        WEIGHT_COMMON
    } else {
        WEIGHT_SKEWED
    }
}

/// The index whose cumulative weight first exceeds `x`.
fn pick(weights: &[u64], mut x: u64) -> usize {
    for (i, w) in weights.iter().enumerate() {
        if x < *w {
            return i;
        }
        x -= w;
    }
    weights.len().saturating_sub(1)
}

fn verb(r: &ApiResource, rng: &mut Rng) -> Verb {
    let allowed: Vec<(Verb, u64)> = VERBS
        .iter()
        .copied()
        .filter(|(v, _)| r.allows(v.as_str()))
        .collect();
    let total: u64 = allowed.iter().map(|(_, w)| w).sum();
    if total == 0 {
        return Verb::Create;
    }
    let weights: Vec<u64> = allowed.iter().map(|(_, w)| *w).collect();
    allowed[pick(&weights, rng.below(total))].0
}

impl Request {
    /// The client that sends it.
    pub(crate) fn agent(&self, resources: &[ApiResource]) -> Agent {
        Agent::of(self.verb, self.resource.and_then(|i| resources.get(i)))
    }

    pub(crate) fn method(&self) -> Method {
        match self.verb {
            Verb::Create => Method::POST,
            _ => Method::GET,
        }
    }

    /// Path and query, as sent to the proxy.
    pub(crate) fn path(&self, resources: &[ApiResource]) -> String {
        let Some(r) = self.resource.and_then(|i| resources.get(i)) else {
            return "/apis".to_owned();
        };
        let collection = collection_path(r);
        match self.verb {
            Verb::Get => format!("{collection}/{}", seeded_name(self.seq % SEEDED)),
            Verb::Watch => {
                format!("{collection}?watch=true&timeoutSeconds={WATCH_TIMEOUT_SECONDS}")
            }
            Verb::List | Verb::Create | Verb::Discovery => collection,
        }
    }

    /// The object a create sends.
    pub(crate) fn body(&self, resources: &[ApiResource]) -> Option<Bytes> {
        let r = self.resource.and_then(|i| resources.get(i))?;
        if self.verb != Verb::Create {
            return None;
        }
        let mut metadata = serde_json::json!({ "name": format!("demo-{}", self.seq) });
        if r.namespaced {
            metadata["namespace"] = NAMESPACE.into();
        }
        let object = serde_json::json!({
            "apiVersion": api_version(r),
            "kind": r.kind,
            "metadata": metadata,
        });
        Some(Bytes::from(object.to_string()))
    }
}

/// `/api/v1[/namespaces/default]/pods` or `/apis/{g}/{v}[/namespaces/default]/{r}`.
pub(crate) fn collection_path(r: &ApiResource) -> String {
    let prefix = if r.gvr.group.is_empty() {
        format!("/api/{}", r.gvr.version)
    } else {
        format!("/apis/{}/{}", r.gvr.group, r.gvr.version)
    };
    if r.namespaced {
        format!("{prefix}/namespaces/{NAMESPACE}/{}", r.gvr.resource)
    } else {
        format!("{prefix}/{}", r.gvr.resource)
    }
}

/// `v1` or `group/version`.
pub(crate) fn api_version(r: &ApiResource) -> String {
    if r.gvr.group.is_empty() {
        r.gvr.version.to_string()
    } else {
        format!("{}/{}", r.gvr.group, r.gvr.version)
    }
}

/// One planned request as a JSON line (what `--plan-only` prints).
#[derive(Debug, Serialize)]
pub(crate) struct PlanLine<'a> {
    pub(crate) seq: u64,
    pub(crate) phase: &'a str,
    pub(crate) segment: SegmentKind,
    pub(crate) at_ms: f64,
    pub(crate) node: String,
    pub(crate) method: &'static str,
    pub(crate) path: String,
    pub(crate) verb: Verb,
    pub(crate) expect: Expect,
    /// The `User-Agent` it is sent with.
    pub(crate) user_agent: &'static str,
}

impl Workload {
    /// Number of planned requests.
    pub(crate) fn len(&self) -> usize {
        self.requests.iter().flatten().map(Vec::len).sum()
    }

    /// Every request as a [`PlanLine`], in order.
    pub(crate) fn lines<'a>(
        &'a self,
        phases: &'a [Phase],
    ) -> impl Iterator<Item = PlanLine<'a>> + 'a {
        self.requests
            .iter()
            .zip(phases)
            .flat_map(move |(segments, phase)| {
                segments
                    .iter()
                    .zip(&phase.segments)
                    .flat_map(move |(requests, segment)| {
                        requests.iter().map(move |r| PlanLine {
                            seq: r.seq,
                            phase: &phase.name,
                            segment: segment.kind,
                            at_ms: r.at.as_secs_f64() * 1000.0,
                            node: node_name(r.node),
                            method: if r.method() == Method::POST {
                                "POST"
                            } else {
                                "GET"
                            },
                            path: r.path(&self.resources),
                            verb: r.verb,
                            expect: r.expect,
                            user_agent: r.agent(&self.resources).user_agent(),
                        })
                    })
            })
    }

    /// `sha256:` of the request sequence (position, time, node, method, path): equal for two
    /// runs exactly when they send the same requests.
    pub(crate) fn digest(&self, phases: &[Phase]) -> String {
        let mut hash = Sha256::new();
        let mut line = String::new();
        for l in self.lines(phases) {
            line.clear();
            let _ = writeln!(
                line,
                "{} {} {:?} {:.3} {} {} {}",
                l.seq, l.phase, l.segment, l.at_ms, l.node, l.method, l.path
            );
            hash.update(line.as_bytes());
        }
        let digest = hash.finalize();
        let mut hex = String::with_capacity(7 + 64);
        hex.push_str("sha256:");
        for b in digest {
            let _ = write!(hex, "{b:02x}");
        }
        hex
    }
}

#[cfg(test)]
mod tests {
    use super::super::plan::phases;
    use super::*;

    fn plan(seed: u64) -> (Vec<Phase>, Workload) {
        let p = phases(Duration::from_secs(10));
        let w = generate(&p, &Surfaces::new(), seed, 100);
        (p, w)
    }

    #[test]
    fn same_seed_same_requests_other_seed_other_requests() {
        let (p, a) = plan(1);
        let (_, b) = plan(1);
        let (_, c) = plan(2);
        assert_eq!(a.requests, b.requests);
        assert_eq!(a.digest(&p), b.digest(&p));
        assert_ne!(a.requests, c.requests);
        assert_ne!(a.digest(&p), c.digest(&p));
        assert_eq!(a.len(), 1000);
    }

    #[test]
    fn the_mix_is_weighted_and_follows_the_phases() {
        let (p, w) = plan(7);
        let all: Vec<&Request> = w.requests.iter().flatten().flatten().collect();
        let pods = all
            .iter()
            .filter(|r| {
                r.resource
                    .is_some_and(|i| w.resources[i].gvr.to_string() == "v1/pods")
            })
            .count();
        let selfsubjectreviews = all
            .iter()
            .filter(|r| {
                r.resource.is_some_and(|i| {
                    w.resources[i].gvr.to_string() == "authentication.k8s.io/v1/selfsubjectreviews"
                })
            })
            .count();
        assert!(
            pods > 3 * selfsubjectreviews.max(1),
            "{pods} vs {selfsubjectreviews}"
        );
        // Create-only resources are only created.
        for r in &all {
            if let Some(i) = r.resource {
                assert!(w.resources[i].allows(r.verb.as_str()), "{r:?}");
            }
        }
        // Nobody is sent to a node that is down.
        for (phase, segments) in p.iter().zip(&w.requests) {
            for (segment, requests) in phase.segments.iter().zip(segments) {
                assert!(requests.iter().all(|r| segment.state.nodes[r.node].up));
            }
        }
        // Mixed phases have requests that must be rerouted; homogeneous ones none.
        let reroutes = |phase: usize| {
            w.requests[phase]
                .iter()
                .flatten()
                .filter(|r| r.expect == Expect::Reroute)
                .count()
        };
        assert!(reroutes(1) > 0 && reroutes(2) > 0);
        assert_eq!(reroutes(0) + reroutes(4), 0);
    }

    #[test]
    fn paths_and_bodies() {
        let resources = catalog::resources();
        let idx = |s: &str| {
            resources
                .iter()
                .position(|r| r.gvr.to_string() == s)
                .unwrap()
        };
        let req = |verb, r: &str, seq| Request {
            seq,
            at: Duration::ZERO,
            node: 0,
            verb,
            resource: Some(idx(r)),
            expect: Expect::Local,
            skew: None,
        };
        assert_eq!(
            req(Verb::Get, "v1/pods", 3).path(&resources),
            "/api/v1/namespaces/default/pods/seed-1"
        );
        assert_eq!(
            req(Verb::Watch, "v1/nodes", 3).path(&resources),
            "/api/v1/nodes?watch=true&timeoutSeconds=2"
        );
        assert_eq!(
            req(Verb::List, "apps/v1/deployments", 0).path(&resources),
            "/apis/apps/v1/namespaces/default/deployments"
        );
        let body = req(Verb::Create, "coordination.k8s.io/v1/leases", 9)
            .body(&resources)
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["apiVersion"], "coordination.k8s.io/v1");
        assert_eq!(v["kind"], "Lease");
        assert_eq!(v["metadata"]["name"], "demo-9");
        assert_eq!(v["metadata"]["namespace"], "default");
    }

    #[test]
    fn three_clients_with_realistic_user_agents() {
        let (_, w) = plan(3);
        let all: Vec<&Request> = w.requests.iter().flatten().flatten().collect();
        let mut by = std::collections::BTreeMap::new();
        for r in &all {
            *by.entry(r.agent(&w.resources)).or_insert(0) += 1;
            if r.agent(&w.resources) == Agent::Operator {
                let gvr = &w.resources[r.resource.unwrap()].gvr;
                assert_eq!(gvr.group, "flowcontrol.apiserver.k8s.io");
                assert_eq!(gvr.version, "v1beta3");
            }
        }
        assert!(
            Agent::ALL.iter().all(|a| by.get(a).is_some_and(|n| *n > 0)),
            "{by:?}"
        );
        assert_eq!(Agent::Kubectl.client(), "kubectl");
        assert_eq!(
            Agent::ControllerManager.client(),
            "kube-controller-manager (sa kube-system/generic-garbage-collector)"
        );
        assert_eq!(Agent::Operator.client(), "flowschema-tuner");
        // The operator's group-version is one the upgrade removes.
        let s = Surfaces::new();
        let fs = mvproxy_core::classify::Gvr::new(
            "flowcontrol.apiserver.k8s.io",
            "v1beta3",
            "flowschemas",
        );
        assert!(s.serves(super::super::catalog::Release::Old, &fs));
        assert!(!s.serves(super::super::catalog::Release::New, &fs));
    }
}
