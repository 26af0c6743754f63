//! mvproxy's side, and the two sides compared: the proxies' `/metrics` deltas summed over the
//! three, and one [`Check`] per number the client counted that a metric must equal.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::answers::Answers;
use super::reroutes::Reroutes;
use super::round3;
use super::skew::SkewTally;
use crate::metrics::{Scrape, SkewKey};

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

/// The client's tallies against the proxies' metrics `m`; `skews_ok` holds, per segment,
/// whether `/debug/discovery` showed the catalog's skew.
pub(crate) fn checks(
    answers: &Answers,
    reroutes: &Reroutes,
    skew: &SkewTally,
    m: &Scrape,
    skews_ok: &[bool],
) -> Vec<Check> {
    let predicted_by_gvr = &reroutes.predicted_by_gvr;
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
        check("sent = answered", answers.sent, answers.answered),
        check(
            "false 404s avoided = Σ mvproxy_rerouted_request_total + Σ mvproxy_requests_total{route=\"peer\",peer=\"\"}",
            reroutes.false_404s_avoided,
            m.rerouted_total() + m.peers_down,
        ),
        check(
            "rerouted (answered by another node's API server) = Σ mvproxy_rerouted_request_total",
            reroutes.rerouted,
            m.rerouted_total(),
        ),
        check(
            "503 because every server of the GVR was down = Σ mvproxy_requests_total{route=\"peer\",peer=\"\"}",
            reroutes.predicted_peers_down,
            m.peers_down,
        ),
        check(
            "GVRs whose reroutes differ from mvproxy_rerouted_request_total",
            0,
            differing,
        ),
        check(
            "resource requests sent = Σ mvproxy_discovery_cache_lookups_total",
            answers.resource_requests,
            m.lookup_hits + m.lookup_misses,
        ),
        check(
            "requests for GVRs no server serves = Σ mvproxy_discovery_cache_lookups_total{result=\"miss\"}",
            answers.no_server,
            m.lookup_misses,
        ),
        check(
            "GET /apis answered (200 or 304) = Σ mvproxy_discovery_merges_total",
            answers.discovery.merged + answers.discovery.not_modified,
            m.merges_built + m.merges_cached,
        ),
        check(
            "requests for GVRs not every node serves = Σ mvproxy_skew_requests_total",
            skew.requests,
            m.skew.values().sum(),
        ),
        check(
            "(client, GVR, side) whose requests differ from mvproxy_skew_requests_total",
            0,
            {
                let keys: BTreeSet<&SkewKey> = skew.sent.keys().chain(m.skew.keys()).collect();
                keys.iter()
                    .filter(|k| skew.sent.get(**k) != m.skew.get(**k))
                    .count() as u64
            },
        ),
        check(
            "answers that contradict the counterfactual",
            0,
            answers.unexpected,
        ),
        check(
            "segments whose /debug/discovery skew differs from the catalog",
            0,
            skews_ok.iter().filter(|ok| !**ok).count() as u64,
        ),
    ]
}

/// The proxies' numbers as the report shows them: ratios and milliseconds to three places.
pub(crate) fn proxy_numbers(m: &Scrape) -> ProxyNumbers {
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

#[cfg(test)]
mod tests;
