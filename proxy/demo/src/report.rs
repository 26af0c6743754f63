//! The report an operator attaches to the change ticket: per segment, per phase and in total,
//! what the clients met, what mvproxy says it did, and whether the two agree.
//!
//! Two sides are counted independently and then compared:
//! - the client's side: every answer, and who gave it (`x-standin-server`: the picked node's
//!   API server, another node's, or none — mvproxy itself), against the counterfactual of
//!   each request computed from the servers' discovery documents ([`super::plan::Expect`]);
//! - mvproxy's side: the deltas of the three proxies' `/metrics` over the same segment.
//!
//! The "false 404s avoided" are the requests the load balancer sent to a server whose
//! discovery lacks the GVR while another server's lists it, and that did not get a 404.
//! mvproxy handles each in one of two ways, both counted by its metrics: it forwards it to a
//! peer (`mvproxy_rerouted_request_total`, any code), or, when every server of that GVR is
//! down, answers a retryable 503 itself (`mvproxy_requests_total{route="peer",peer=""}`). So
//! `false 404s avoided = Σ rerouted_request_total + Σ requests_total{route="peer",peer=""}`
//! must hold exactly, and does because the runner lets each segment's requests finish and
//! every proxy's discovery settle before the next segment (see [`super::run`]).
//!
//! The JSON form is described by `report.schema.json` beside this file.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::catalog::{ApiResource, Release};
use super::metrics::{Scrape, SkewKey};
use super::plan::{Expect, NODES, Phase, SegmentKind, Surfaces, node_name};
use super::run::{Record, SegmentRun, percentile};
use super::workload::{Agent, Verb, Workload};
use mvproxy_core::discovery::side::Side;

mod text;
pub(crate) use text::text;

/// The JSON schema of [`Report`] (`tests/demo.rs` checks real reports against the file).
#[cfg(test)]
const SCHEMA: &str = include_str!("report.schema.json");
/// The `format` field of every report.
pub(crate) const FORMAT: &str = "mvproxy-demo-report/v1";

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    pub(crate) format: &'static str,
    pub(crate) mvproxy_version: &'static str,
    pub(crate) releases: Releases,
    pub(crate) nodes: Vec<NodeInfo>,
    pub(crate) workload: WorkloadInfo,
    /// Ctrl-C cut the run short: the numbers cover what ran.
    pub(crate) interrupted: bool,
    pub(crate) wall_seconds: f64,
    /// Time spent between segments, bringing nodes to the next state (not traffic time).
    pub(crate) settle_seconds: f64,
    pub(crate) phases: Vec<PhaseReport>,
    pub(crate) total: Counts,
    pub(crate) skew: Vec<SkewRow>,
    /// The clients that depend on the skew, as `mvproxy_skew_requests_total` counts them.
    pub(crate) readiness: Readiness,
    /// The prediction the proxies made during `all-old`, told the new release as their target,
    /// beside what the clients met after the upgrade.
    pub(crate) before_upgrade: BeforeUpgrade,
    /// Every check of every segment, phase and the total held.
    pub(crate) reconciled: bool,
}

/// Who would break: the simulated clients that used GVRs on one side of the skew.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Readiness {
    /// Clients that used APIs the new release does not serve (`side="old_only"`): these
    /// requests fail once the upgrade completes.
    pub(crate) breaks_after_upgrade: Vec<ClientApis>,
    /// Clients that used APIs only the new release serves (`side="new_only"`): these requests
    /// fail on a rollback.
    pub(crate) breaks_on_rollback: Vec<ClientApis>,
}

/// Before the upgrade: which clients the new release will break, as mvproxy counted them with
/// every node still on the old release (`mvproxy_target_missing_requests_total`), and what
/// happened to the same clients and GVRs once every node ran the new release.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct BeforeUpgrade {
    /// The `target` label: the new release's `gitVersion`.
    pub(crate) target: String,
    /// One row per client and GVR predicted to break or found broken.
    pub(crate) rows: Vec<Prediction>,
    /// mvproxy counted, during `all-old`, exactly the requests whose GVR the new release does
    /// not serve; and every row sent both before and after the upgrade broke exactly when
    /// predicted. A row not sent in one of the two phases cannot be judged and is not.
    pub(crate) held: bool,
}

/// One client and GVR: predicted during `all-old`, met during `all-new`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Prediction {
    /// The `client` label.
    pub(crate) client: String,
    pub(crate) gvr: String,
    /// Requests the client sent during `all-old`.
    pub(crate) sent_before: u64,
    /// Of those, counted by the proxies as missing on the target.
    pub(crate) predicted: u64,
    /// Of those, answered 404 (a GVR nothing served yet, an object not there).
    pub(crate) not_found_before: u64,
    /// Requests the client sent during `all-new`.
    pub(crate) sent_after: u64,
    /// Of those, answered 404.
    pub(crate) not_found_after: u64,
}

/// One client and the GVRs of one side of the skew it used.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ClientApis {
    /// The `client` label.
    pub(crate) client: String,
    pub(crate) user_agent: String,
    /// Requests it sent for these GVRs (client side).
    pub(crate) requests: u64,
    /// The same, summed from the proxies' `mvproxy_skew_requests_total`.
    pub(crate) counted_by_mvproxy: u64,
    /// Requests by GVR (client side).
    pub(crate) gvrs: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Releases {
    pub(crate) old: &'static str,
    pub(crate) new: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct NodeInfo {
    pub(crate) name: String,
    /// The proxy listener clients use.
    pub(crate) proxy: String,
    /// `/metrics`, `/readyz`, `/debug/discovery`.
    pub(crate) admin: String,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct WorkloadInfo {
    pub(crate) seed: u64,
    pub(crate) rate: u32,
    pub(crate) duration_seconds: f64,
    pub(crate) planned: u64,
    /// Fingerprint of the request sequence (see `--plan-only`).
    pub(crate) digest: String,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct PhaseReport {
    pub(crate) name: String,
    pub(crate) title: String,
    /// Each node's release at the end of the phase.
    pub(crate) nodes: Vec<String>,
    /// Both releases served at some point of the phase.
    pub(crate) mixed: bool,
    pub(crate) segments: Vec<SegmentReport>,
    pub(crate) counts: Counts,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct SegmentReport {
    pub(crate) kind: SegmentKind,
    /// Each node's release, or `down`.
    pub(crate) nodes: Vec<String>,
    pub(crate) traffic_seconds: f64,
    pub(crate) settle_seconds: f64,
    pub(crate) interrupted: bool,
    pub(crate) counts: Counts,
}

/// Numbers for a segment, a phase or the whole run.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Counts {
    pub(crate) planned: u64,
    pub(crate) sent: u64,
    pub(crate) answered: u64,
    /// Sent and never answered (timeouts, connection errors).
    pub(crate) lost: u64,
    /// Answered by the picked node's own API server.
    pub(crate) served_locally: u64,
    /// Answered by another node's API server: mvproxy forwarded it.
    pub(crate) rerouted: u64,
    /// By the GVR's group (`core` for the core group).
    pub(crate) rerouted_by_group: BTreeMap<String, u64>,
    /// By GVR (`group/version/resource`, core `v1/…`).
    pub(crate) rerouted_by_gvr: BTreeMap<String, u64>,
    /// By the node whose API server answered.
    pub(crate) rerouted_by_peer: BTreeMap<String, u64>,
    /// Answered by mvproxy itself: merged discovery, `503`s.
    pub(crate) answered_by_mvproxy: u64,
    /// Requests that, without mvproxy, would have got a false 404: the picked server's
    /// discovery lacks the GVR, another server's lists it.
    pub(crate) false_404s: u64,
    /// Of those, the ones that did not get a 404.
    pub(crate) false_404s_avoided: u64,
    /// Of those, the ones that got a 404 all the same (mvproxy failed them).
    pub(crate) false_404s_delivered: u64,
    /// `503` answers (every server of the GVR was restarting).
    pub(crate) unavailable_503: u64,
    /// GVRs no node served (a client of the other release): the API server's own 404.
    pub(crate) true_404s: u64,
    /// Requests for GVRs not every node serves (counted by `mvproxy_skew_requests_total`).
    pub(crate) skew_requests: u64,
    /// Those by (client, GVR, side), client side and as the proxies counted them.
    #[serde(skip)]
    pub(crate) skew_sent: BTreeMap<SkewKey, u64>,
    #[serde(skip)]
    pub(crate) skew_counted: BTreeMap<SkewKey, u64>,
    pub(crate) discovery: DiscoveryCounts,
    pub(crate) status_codes: BTreeMap<String, u64>,
    /// Answers that contradict the request's counterfactual (expected 0).
    pub(crate) unexpected: u64,
    pub(crate) unexpected_examples: Vec<Unexpected>,
    pub(crate) latency_ms: Latencies,
    pub(crate) proxies: ProxyNumbers,
    pub(crate) checks: Vec<Check>,
    pub(crate) reconciled: bool,
}

#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct DiscoveryCounts {
    /// `GET /apis` (aggregated v2) sent.
    pub(crate) requests: u64,
    /// Answered `200` with the merged document.
    pub(crate) merged: u64,
    /// Answered `304` to the client's `If-None-Match`.
    pub(crate) not_modified: u64,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Unexpected {
    pub(crate) seq: u64,
    pub(crate) node: String,
    pub(crate) method: &'static str,
    pub(crate) path: String,
    pub(crate) expect: Expect,
    pub(crate) status: Option<u16>,
    pub(crate) answered_by: Option<String>,
    pub(crate) error: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Latencies {
    /// Answered by the picked node's API server.
    pub(crate) local: Percentiles,
    /// Answered by another node's: one more hop, proxy to proxy.
    pub(crate) peer: Percentiles,
}

#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Percentiles {
    pub(crate) count: u64,
    pub(crate) p50: Option<f64>,
    pub(crate) p95: Option<f64>,
    pub(crate) p99: Option<f64>,
}

/// What the proxies' `/metrics` say, summed over the three.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct ProxyNumbers {
    /// `mvproxy_rerouted_request_total`.
    pub(crate) rerouted_request_total: u64,
    pub(crate) rerouted_by_code: BTreeMap<String, u64>,
    /// `mvproxy_requests_total{route="peer",peer=""}`: answered 503 because every server of
    /// the GVR was down.
    pub(crate) peers_down_503_total: u64,
    pub(crate) cache_lookups_hit: u64,
    pub(crate) cache_lookups_miss: u64,
    pub(crate) cache_hit_ratio: Option<f64>,
    /// Merged `/apis` documents built, and served from the cache.
    pub(crate) merges_built: u64,
    pub(crate) merges_cached: u64,
    pub(crate) merge_latency_mean_ms: Option<f64>,
    /// Upper bound of the histogram bucket holding the 99th percentile.
    pub(crate) merge_latency_p99_le_ms: Option<f64>,
    /// `mvproxy_skew_requests_total`.
    pub(crate) skew_requests_total: u64,
}

/// One reconciliation: two numbers counted independently that must be equal.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Check {
    pub(crate) name: String,
    pub(crate) expected: u64,
    pub(crate) measured: u64,
    pub(crate) ok: bool,
}

/// A GVR not served by every node somewhere in the run, and which nodes serve it, at the end
/// of each phase (from the catalog; `/debug/discovery` is checked against it).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SkewRow {
    pub(crate) gvr: String,
    pub(crate) served_by: BTreeMap<String, Vec<String>>,
}

/// What the report is built from.
pub(crate) struct Inputs<'a> {
    pub(crate) phases: &'a [Phase],
    pub(crate) workload: &'a Workload,
    pub(crate) surfaces: &'a Surfaces,
    pub(crate) runs: &'a [SegmentRun],
    pub(crate) nodes: Vec<NodeInfo>,
    pub(crate) duration_seconds: f64,
    pub(crate) wall_seconds: f64,
    pub(crate) interrupted: bool,
    pub(crate) digest: String,
}

/// Builds the report.
pub(crate) fn build(inputs: &Inputs<'_>) -> Report {
    let resources = &inputs.workload.resources;
    let mut phases = Vec::new();
    for (p, phase) in inputs.phases.iter().enumerate() {
        let runs: Vec<&SegmentRun> = inputs.runs.iter().filter(|r| r.phase == p).collect();
        if runs.is_empty() {
            continue;
        }
        let segments = runs
            .iter()
            .map(|run| {
                let segment = &phase.segments[run.segment];
                let skew_ok = skew_matches(run, inputs.surfaces, phase, run.segment);
                SegmentReport {
                    kind: segment.kind,
                    nodes: node_words(&segment.state),
                    traffic_seconds: secs(run.elapsed),
                    settle_seconds: secs(run.settle),
                    interrupted: run.interrupted,
                    counts: counts(&[run], resources, &[skew_ok]),
                }
            })
            .collect::<Vec<_>>();
        let skews: Vec<bool> = runs
            .iter()
            .map(|run| skew_matches(run, inputs.surfaces, phase, run.segment))
            .collect();
        let last = phase.segments.last().map(|s| s.state);
        phases.push(PhaseReport {
            name: phase.name.clone(),
            title: phase.title.clone(),
            nodes: last.map(|s| node_words(&s)).unwrap_or_default(),
            mixed: phase.segments.iter().any(|s| s.state.mixed()),
            segments,
            counts: counts(&runs, resources, &skews),
        });
    }
    let all: Vec<&SegmentRun> = inputs.runs.iter().collect();
    let skews: Vec<bool> = all
        .iter()
        .map(|run| skew_matches(run, inputs.surfaces, &inputs.phases[run.phase], run.segment))
        .collect();
    let total = counts(&all, resources, &skews);
    let reconciled = total.reconciled
        && phases
            .iter()
            .all(|p| p.counts.reconciled && p.segments.iter().all(|s| s.counts.reconciled));
    let readiness = readiness(&total);
    let before_upgrade = before_upgrade(inputs);
    Report {
        format: FORMAT,
        mvproxy_version: env!("CARGO_PKG_VERSION"),
        releases: Releases {
            old: Release::Old.version(),
            new: Release::New.version(),
        },
        nodes: inputs.nodes.clone(),
        workload: WorkloadInfo {
            seed: inputs.workload.seed,
            rate: inputs.workload.rate,
            duration_seconds: inputs.duration_seconds,
            planned: inputs.workload.len() as u64,
            digest: inputs.digest.clone(),
        },
        interrupted: inputs.interrupted,
        wall_seconds: round3(inputs.wall_seconds),
        settle_seconds: secs(inputs.runs.iter().map(|r| r.settle).sum()),
        phases,
        total,
        skew: skew_rows(inputs.phases, inputs.surfaces),
        readiness,
        before_upgrade,
        reconciled,
    }
}

/// The prediction of `all-old` (the first phase) against the outcome of `all-new` (the last),
/// per client and GVR, from the client's records and the proxies' counts.
fn before_upgrade(inputs: &Inputs<'_>) -> BeforeUpgrade {
    let resources = &inputs.workload.resources;
    let (first, last) = (0, inputs.phases.len().saturating_sub(1));
    let mut rows: BTreeMap<(String, String), Prediction> = BTreeMap::new();
    // What the target lacks of what the old release serves: what mvproxy must count.
    let lacks = |gvr: &mvproxy_core::classify::Gvr| {
        inputs.surfaces.serves(Release::Old, gvr) && !inputs.surfaces.serves(Release::New, gvr)
    };
    let mut expected_counts: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut counted: BTreeMap<(String, String), u64> = BTreeMap::new();
    for run in inputs.runs {
        if run.phase != first && run.phase != last {
            continue;
        }
        if run.phase == first {
            for (k, n) in &run.metrics.target_missing {
                *counted.entry(k.clone()).or_default() += n;
            }
        }
        for r in &run.records {
            let Some(g) = r.request.resource.and_then(|i| resources.get(i)) else {
                continue;
            };
            let key = (r.request.agent(resources).client(), g.gvr.to_string());
            let not_found = matches!(&r.result, Ok(a) if a.status == 404);
            if run.phase == first {
                if lacks(&g.gvr) {
                    *expected_counts.entry(key.clone()).or_default() += 1;
                }
                let row = rows
                    .entry(key.clone())
                    .or_insert_with(|| empty_prediction(&key));
                row.sent_before += 1;
                row.not_found_before += u64::from(not_found);
            } else {
                let row = rows
                    .entry(key.clone())
                    .or_insert_with(|| empty_prediction(&key));
                row.sent_after += 1;
                row.not_found_after += u64::from(not_found);
            }
        }
    }
    for (key, row) in &mut rows {
        row.predicted = counted.get(key).copied().unwrap_or(0);
    }
    let reconciled = counted == expected_counts;
    // Broke: every request after the upgrade got a 404, and some before did not.
    let broke = |r: &Prediction| {
        r.sent_after > 0 && r.not_found_after == r.sent_after && r.not_found_before < r.sent_before
    };
    // Only what was predicted or broke is shown; a row that worked before and after is not.
    let rows: Vec<Prediction> = rows
        .into_values()
        .filter(|r| r.predicted > 0 || broke(r))
        .collect();
    let judged_right = rows
        .iter()
        .all(|r| r.sent_before == 0 || r.sent_after == 0 || (r.predicted > 0) == broke(r));
    BeforeUpgrade {
        target: super::stack::target_label().to_owned(),
        rows,
        held: reconciled && judged_right,
    }
}

fn empty_prediction((client, gvr): &(String, String)) -> Prediction {
    Prediction {
        client: client.clone(),
        gvr: gvr.clone(),
        sent_before: 0,
        predicted: 0,
        not_found_before: 0,
        sent_after: 0,
        not_found_after: 0,
    }
}

/// `/debug/discovery`'s skew during the run equals the catalog's for that state.
fn skew_matches(run: &SegmentRun, surfaces: &Surfaces, phase: &Phase, segment: usize) -> bool {
    let Some(seg) = phase.segments.get(segment) else {
        return false;
    };
    let want: Vec<(String, Vec<String>)> = seg
        .state
        .skew(surfaces)
        .into_iter()
        .map(|(gvr, by)| (gvr.to_string(), by.into_iter().map(node_name).collect()))
        .collect();
    let mut want = want;
    want.sort();
    run.debug_skew == want
}

fn counts(runs: &[&SegmentRun], resources: &[ApiResource], skews_ok: &[bool]) -> Counts {
    let mut c = Counts::default();
    let mut local_us = Vec::new();
    let mut peer_us = Vec::new();
    let mut predicted_by_gvr: BTreeMap<String, u64> = BTreeMap::new();
    let mut predicted_peers_down = 0u64;
    let mut sides = Sides::default();
    let mut metrics = Scrape::default();
    for run in runs {
        c.planned += run.planned as u64;
        c.sent += (run.records.len() + run.lost) as u64;
        c.lost += run.lost as u64;
        metrics.add(&run.metrics);
        for r in &run.records {
            let gvr = r.request.resource.and_then(|i| resources.get(i));
            match r.request.expect {
                Expect::Reroute => {
                    if let Some(g) = gvr {
                        *predicted_by_gvr.entry(g.gvr.to_string()).or_default() += 1;
                    }
                }
                Expect::PeersDown => predicted_peers_down += 1,
                Expect::TrueNotFound => sides.no_server += 1,
                _ => {}
            }
            if r.request.verb != Verb::Discovery {
                sides.resource_requests += 1;
            }
            if let (Some(side), Some(g)) = (r.request.skew, gvr) {
                c.skew_requests += 1;
                let key = (
                    r.request.agent(resources).client(),
                    g.gvr.to_string(),
                    side.as_str().to_owned(),
                );
                *c.skew_sent.entry(key).or_default() += 1;
            }
            if r.request.expect.false_404() {
                c.false_404s += 1;
            }
            if r.request.verb == Verb::Discovery {
                c.discovery.requests += 1;
            }
            let answer = match &r.result {
                Ok(a) => a,
                Err(_) => {
                    c.lost += 1;
                    note_unexpected(&mut c, r, resources);
                    continue;
                }
            };
            c.answered += 1;
            *c.status_codes.entry(answer.status.to_string()).or_default() += 1;
            let us = u64::try_from(answer.latency.as_micros()).unwrap_or(u64::MAX);
            if r.local() {
                c.served_locally += 1;
                local_us.push(us);
            } else if r.rerouted() {
                c.rerouted += 1;
                peer_us.push(us);
                let group = gvr.map_or("", |g| g.gvr.group.as_str());
                let group = if group.is_empty() { "core" } else { group };
                *c.rerouted_by_group.entry(group.to_owned()).or_default() += 1;
                if let Some(g) = gvr {
                    *c.rerouted_by_gvr.entry(g.gvr.to_string()).or_default() += 1;
                }
                if let Some(by) = &answer.answered_by {
                    *c.rerouted_by_peer.entry(by.clone()).or_default() += 1;
                }
            } else {
                c.answered_by_mvproxy += 1;
            }
            if r.request.expect.false_404() {
                if answer.status == 404 {
                    c.false_404s_delivered += 1;
                } else {
                    c.false_404s_avoided += 1;
                }
            }
            if answer.status == 503 {
                c.unavailable_503 += 1;
            }
            if r.request.expect == Expect::TrueNotFound && answer.status == 404 {
                c.true_404s += 1;
            }
            if r.request.verb == Verb::Discovery {
                match answer.status {
                    200 => c.discovery.merged += 1,
                    304 => c.discovery.not_modified += 1,
                    _ => {}
                }
            }
            if !as_expected(r, answer) {
                note_unexpected(&mut c, r, resources);
            }
        }
    }
    local_us.sort_unstable();
    peer_us.sort_unstable();
    c.latency_ms = Latencies {
        local: percentiles(&local_us),
        peer: percentiles(&peer_us),
    };
    c.proxies = proxy_numbers(&metrics);
    c.skew_counted.clone_from(&metrics.skew);
    sides.predicted_by_gvr = predicted_by_gvr;
    sides.peers_down = predicted_peers_down;
    c.checks = checks(&c, &metrics, &sides, skews_ok);
    c.reconciled = c.checks.iter().all(|k| k.ok);
    c
}

/// Whether the answer is what the request's counterfactual says mvproxy must give.
fn as_expected(r: &Record, answer: &super::client::Answer) -> bool {
    let ok_status = answer.status < 400;
    match r.request.expect {
        Expect::Local => r.local() && ok_status,
        Expect::Reroute => r.rerouted() && ok_status,
        Expect::PeersDown => answer.answered_by.is_none() && answer.status == 503,
        Expect::TrueNotFound => r.local() && answer.status == 404,
        Expect::Discovery => answer.answered_by.is_none() && matches!(answer.status, 200 | 304),
    }
}

const EXAMPLES: usize = 5;

fn note_unexpected(c: &mut Counts, r: &Record, resources: &[ApiResource]) {
    c.unexpected += 1;
    if c.unexpected_examples.len() >= EXAMPLES {
        return;
    }
    let (status, answered_by, error) = match &r.result {
        Ok(a) => (Some(a.status), a.answered_by.clone(), None),
        Err(e) => (None, None, Some(e.clone())),
    };
    c.unexpected_examples.push(Unexpected {
        seq: r.request.seq,
        node: node_name(r.request.node),
        method: if r.request.verb == Verb::Create {
            "POST"
        } else {
            "GET"
        },
        path: r.request.path(resources),
        expect: r.request.expect,
        status,
        answered_by,
        error,
    });
}

/// Client-side numbers the checks need beyond [`Counts`].
#[derive(Default)]
struct Sides {
    /// Requests the counterfactual sends to a peer, by GVR.
    predicted_by_gvr: BTreeMap<String, u64>,
    /// Requests whose GVR only down servers serve.
    peers_down: u64,
    /// Requests whose GVR no server serves.
    no_server: u64,
    /// Requests sent that are not discovery.
    resource_requests: u64,
}

fn checks(c: &Counts, m: &Scrape, sides: &Sides, skews_ok: &[bool]) -> Vec<Check> {
    let predicted_by_gvr = &sides.predicted_by_gvr;
    let check = |name: &str, expected: u64, measured: u64| Check {
        name: name.to_owned(),
        expected,
        measured,
        ok: expected == measured,
    };
    let gvrs: BTreeSet<&String> = predicted_by_gvr.keys().chain(m.rerouted.keys()).collect();
    let differing = gvrs
        .iter()
        .filter(|g| predicted_by_gvr.get(**g) != m.rerouted.get(**g))
        .count() as u64;
    vec![
        check("sent = answered", c.sent, c.answered),
        check(
            "false 404s avoided = Σ mvproxy_rerouted_request_total + Σ mvproxy_requests_total{route=\"peer\",peer=\"\"}",
            c.false_404s_avoided,
            m.rerouted_total() + m.peers_down,
        ),
        check(
            "rerouted (answered by another node's API server) = Σ mvproxy_rerouted_request_total",
            c.rerouted,
            m.rerouted_total(),
        ),
        check(
            "503 because every server of the GVR was down = Σ mvproxy_requests_total{route=\"peer\",peer=\"\"}",
            sides.peers_down,
            m.peers_down,
        ),
        check(
            "GVRs whose reroutes differ from mvproxy_rerouted_request_total",
            0,
            differing,
        ),
        check(
            "resource requests sent = Σ mvproxy_discovery_cache_lookups_total",
            sides.resource_requests,
            m.lookup_hits + m.lookup_misses,
        ),
        check(
            "requests for GVRs no server serves = Σ mvproxy_discovery_cache_lookups_total{result=\"miss\"}",
            sides.no_server,
            m.lookup_misses,
        ),
        check(
            "GET /apis answered (200 or 304) = Σ mvproxy_discovery_merges_total",
            c.discovery.merged + c.discovery.not_modified,
            m.merges_built + m.merges_cached,
        ),
        check(
            "requests for GVRs not every node serves = Σ mvproxy_skew_requests_total",
            c.skew_requests,
            m.skew.values().sum(),
        ),
        check(
            "(client, GVR, side) whose requests differ from mvproxy_skew_requests_total",
            0,
            {
                let keys: BTreeSet<&SkewKey> = c.skew_sent.keys().chain(m.skew.keys()).collect();
                keys.iter()
                    .filter(|k| c.skew_sent.get(**k) != m.skew.get(**k))
                    .count() as u64
            },
        ),
        check(
            "answers that contradict the counterfactual",
            0,
            c.unexpected,
        ),
        check(
            "segments whose /debug/discovery skew differs from the catalog",
            0,
            skews_ok.iter().filter(|ok| !**ok).count() as u64,
        ),
    ]
}

fn proxy_numbers(m: &Scrape) -> ProxyNumbers {
    let lookups = m.lookup_hits + m.lookup_misses;
    ProxyNumbers {
        rerouted_request_total: m.rerouted_total(),
        rerouted_by_code: m
            .rerouted_by_code
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect(),
        peers_down_503_total: m.peers_down,
        cache_lookups_hit: m.lookup_hits,
        cache_lookups_miss: m.lookup_misses,
        cache_hit_ratio: (lookups > 0).then(|| round3(m.lookup_hits as f64 / lookups as f64)),
        merges_built: m.merges_built,
        merges_cached: m.merges_cached,
        merge_latency_mean_ms: (m.merge_count > 0)
            .then(|| round3(1000.0 * m.merge_seconds / m.merge_count as f64)),
        merge_latency_p99_le_ms: m
            .merge_quantile_le(0.99)
            .filter(|le| le.is_finite())
            .map(|le| round3(le * 1000.0)),
        skew_requests_total: m.skew.values().sum(),
    }
}

/// The clients of each side of the skew, from the whole run's counts.
fn readiness(total: &Counts) -> Readiness {
    let of = |side: Side| -> Vec<ClientApis> {
        let mut by: BTreeMap<&str, ClientApis> = BTreeMap::new();
        for ((client, gvr, s), n) in &total.skew_sent {
            if s != side.as_str() {
                continue;
            }
            let entry = by.entry(client.as_str()).or_insert_with(|| ClientApis {
                client: client.clone(),
                user_agent: Agent::ALL
                    .iter()
                    .find(|a| a.client() == *client)
                    .map_or("", |a| a.user_agent())
                    .to_owned(),
                requests: 0,
                counted_by_mvproxy: 0,
                gvrs: BTreeMap::new(),
            });
            entry.requests += n;
            *entry.gvrs.entry(gvr.clone()).or_default() += n;
        }
        for ((client, _, s), n) in &total.skew_counted {
            if s == side.as_str()
                && let Some(entry) = by.get_mut(client.as_str())
            {
                entry.counted_by_mvproxy += n;
            }
        }
        by.into_values().collect()
    };
    Readiness {
        breaks_after_upgrade: of(Side::OldOnly),
        breaks_on_rollback: of(Side::NewOnly),
    }
}

fn percentiles(sorted_us: &[u64]) -> Percentiles {
    let ms = |q| percentile(sorted_us, q).map(|us| round3(us as f64 / 1000.0));
    Percentiles {
        count: sorted_us.len() as u64,
        p50: ms(0.50),
        p95: ms(0.95),
        p99: ms(0.99),
    }
}

fn skew_rows(phases: &[Phase], surfaces: &Surfaces) -> Vec<SkewRow> {
    let mut rows: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let ends: Vec<(&str, super::plan::ClusterState)> = phases
        .iter()
        .filter_map(|p| p.segments.last().map(|s| (p.name.as_str(), s.state)))
        .collect();
    for (_, state) in &ends {
        for (gvr, _) in state.skew(surfaces) {
            rows.entry(gvr.to_string()).or_default();
        }
    }
    let all = super::catalog::resources();
    for (gvr, row) in &mut rows {
        let Some(r) = all.iter().find(|r| r.gvr.to_string() == *gvr) else {
            continue;
        };
        for (name, state) in &ends {
            let by = (0..NODES)
                .filter(|&n| surfaces.serves(state.nodes[n].release, &r.gvr))
                .map(node_name)
                .collect();
            row.insert((*name).to_owned(), by);
        }
    }
    rows.into_iter()
        .map(|(gvr, served_by)| SkewRow { gvr, served_by })
        .collect()
}

fn node_words(state: &super::plan::ClusterState) -> Vec<String> {
    state
        .nodes
        .iter()
        .map(|n| {
            if n.up {
                n.release.version().to_owned()
            } else {
                "down".to_owned()
            }
        })
        .collect()
}

fn secs(d: std::time::Duration) -> f64 {
    round3(d.as_secs_f64())
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests;
