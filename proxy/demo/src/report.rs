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
//! Each concern tallies the records on its own, in its module, so each can be tested from a
//! few hand-built records: [`answers`] (sent, answered, lost, who answered, against the
//! counterfactual), [`reroutes`] (the false 404s avoided), [`latency`] (percentiles per hop),
//! [`skew`] (who uses which side of it), [`prediction`] (before the upgrade) and [`reconcile`]
//! (the proxies' metrics, and the checks between the two sides); [`text`](mod@text) renders
//! the result. [`Counts`] gathers one segment's, phase's or run's tallies in the shape of the
//! JSON form, which `report.schema.json` beside this file describes.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::catalog::{ApiResource, Release};
use crate::metrics::{Scrape, SkewKey};
use crate::plan::{ClusterState, Phase, SegmentKind, Surfaces};
use crate::run::SegmentRun;
use crate::workload::Workload;

mod answers;
mod latency;
mod prediction;
mod reconcile;
mod reroutes;
mod skew;
mod text;

#[cfg(test)]
mod records;

use answers::{Answers, DiscoveryCounts, Unexpected};
use latency::{Latencies, LatencyTally};
use prediction::BeforeUpgrade;
use reconcile::{Check, ProxyNumbers};
use reroutes::Reroutes;
use skew::{Readiness, SkewRow, SkewTally};
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
                let skew_ok = skew::skew_matches(run, inputs.surfaces, phase, run.segment);
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
            .map(|run| skew::skew_matches(run, inputs.surfaces, phase, run.segment))
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
        .map(|run| skew::skew_matches(run, inputs.surfaces, &inputs.phases[run.phase], run.segment))
        .collect();
    let total = counts(&all, resources, &skews);
    let reconciled = total.reconciled
        && phases
            .iter()
            .all(|p| p.counts.reconciled && p.segments.iter().all(|s| s.counts.reconciled));
    let readiness = skew::readiness(&total);
    let before_upgrade = prediction::before_upgrade(inputs);
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
        skew: skew::skew_rows(inputs.phases, inputs.surfaces),
        readiness,
        before_upgrade,
        reconciled,
    }
}

/// One segment's, one phase's or the whole run's numbers: each concern tallies the records
/// of `runs` on its own, then the client's tallies are reconciled with the proxies' metrics.
fn counts(runs: &[&SegmentRun], resources: &[ApiResource], skews_ok: &[bool]) -> Counts {
    let mut answers = Answers::default();
    let mut reroutes = Reroutes::default();
    let mut latency = LatencyTally::default();
    let mut skew = SkewTally::default();
    let mut metrics = Scrape::default();
    for run in runs {
        answers.add_segment(run);
        metrics.add(&run.metrics);
        for r in &run.records {
            let resource = r.request.resource.and_then(|i| resources.get(i));
            answers.add(r, resources);
            reroutes.add(r, resource);
            latency.add(r);
            skew.add(r, resource, resources);
        }
    }
    let checks = reconcile::checks(&answers, &reroutes, &skew, &metrics, skews_ok);
    Counts {
        planned: answers.planned,
        sent: answers.sent,
        answered: answers.answered,
        lost: answers.lost,
        served_locally: answers.served_locally,
        rerouted: reroutes.rerouted,
        rerouted_by_group: reroutes.by_group,
        rerouted_by_gvr: reroutes.by_gvr,
        rerouted_by_peer: reroutes.by_peer,
        answered_by_mvproxy: answers.answered_by_mvproxy,
        false_404s: reroutes.false_404s,
        false_404s_avoided: reroutes.false_404s_avoided,
        false_404s_delivered: reroutes.false_404s_delivered,
        unavailable_503: answers.unavailable_503,
        true_404s: answers.true_404s,
        skew_requests: skew.requests,
        skew_sent: skew.sent,
        skew_counted: metrics.skew.clone(),
        discovery: answers.discovery,
        status_codes: answers.status_codes,
        unexpected: answers.unexpected,
        unexpected_examples: answers.unexpected_examples,
        latency_ms: latency.finish(),
        proxies: reconcile::proxy_numbers(&metrics),
        reconciled: checks.iter().all(|k| k.ok),
        checks,
    }
}

fn node_words(state: &ClusterState) -> Vec<String> {
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

/// Rounded to three decimals: milliseconds of a second, microseconds of a millisecond.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests;
