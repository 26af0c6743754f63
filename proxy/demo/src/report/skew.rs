//! The skew: the GVRs some nodes serve and others do not. Per request, which client used
//! which side of it (what `mvproxy_skew_requests_total` must count); per run, who breaks on
//! an upgrade or a rollback; per phase, which nodes serve each such GVR; per segment, whether
//! `/debug/discovery` showed the skew the catalog says.

use std::collections::BTreeMap;

use serde::Serialize;

use super::Counts;
use crate::catalog::{self, ApiResource};
use crate::metrics::SkewKey;
use crate::plan::{ClusterState, NODES, Phase, Surfaces, node_name};
use crate::run::{Record, SegmentRun};
use crate::workload::Agent;
use mvproxy_core::discovery::side::Side;

/// Requests for GVRs in the skew, summed over segments.
#[derive(Debug, Default)]
pub(crate) struct SkewTally {
    pub(crate) requests: u64,
    /// By (client, GVR, side).
    pub(crate) sent: BTreeMap<SkewKey, u64>,
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

/// A GVR not served by every node somewhere in the run, and which nodes serve it, at the end
/// of each phase (from the catalog; `/debug/discovery` is checked against it).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SkewRow {
    pub(crate) gvr: String,
    pub(crate) served_by: BTreeMap<String, Vec<String>>,
}

impl SkewTally {
    /// One request; `resource` is its GVR's (`None` for discovery, never in the skew).
    pub(crate) fn add(&mut self, r: &Record, resource: Option<&ApiResource>, all: &[ApiResource]) {
        if let (Some(side), Some(g)) = (r.request.skew, resource) {
            self.requests += 1;
            let key = (
                r.request.agent(all).client(),
                g.gvr.to_string(),
                side.as_str().to_owned(),
            );
            *self.sent.entry(key).or_default() += 1;
        }
    }
}

/// The clients of each side of the skew, from the whole run's counts.
pub(crate) fn readiness(total: &Counts) -> Readiness {
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

/// `/debug/discovery`'s skew during the run equals the catalog's for that state.
pub(crate) fn skew_matches(
    run: &SegmentRun,
    surfaces: &Surfaces,
    phase: &Phase,
    segment: usize,
) -> bool {
    let Some(seg) = phase.segments.get(segment) else {
        return false;
    };
    let mut want: Vec<(String, Vec<String>)> = seg
        .state
        .skew(surfaces)
        .into_iter()
        .map(|(gvr, by)| (gvr.to_string(), by.into_iter().map(node_name).collect()))
        .collect();
    want.sort();
    run.debug_skew == want
}

/// Every GVR in the skew at the end of some phase, with the nodes serving it at the end of
/// each.
pub(crate) fn skew_rows(phases: &[Phase], surfaces: &Surfaces) -> Vec<SkewRow> {
    let mut rows: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let ends: Vec<(&str, ClusterState)> = phases
        .iter()
        .filter_map(|p| p.segments.last().map(|s| (p.name.as_str(), s.state)))
        .collect();
    for (_, state) in &ends {
        for (gvr, _) in state.skew(surfaces) {
            rows.entry(gvr.to_string()).or_default();
        }
    }
    let all = catalog::resources();
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

#[cfg(test)]
mod tests;
