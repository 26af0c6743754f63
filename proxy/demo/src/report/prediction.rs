//! The prediction mvproxy makes before the upgrade: during `all-old`, told the new release
//! as its target, it counts per client the requests for GVRs that release does not serve
//! (`mvproxy_target_missing_requests_total`). Set beside what the same clients met in
//! `all-new`, the prediction held when exactly the predicted rows broke.

use std::collections::BTreeMap;

use serde::Serialize;

use super::Inputs;
use crate::catalog::Release;
use mvproxy_core::classify::Gvr;

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

impl Prediction {
    /// Broke: every request after the upgrade got a 404, and some before did not.
    fn broke(&self) -> bool {
        self.sent_after > 0
            && self.not_found_after == self.sent_after
            && self.not_found_before < self.sent_before
    }
}

/// The prediction of `all-old` (the first phase) against the outcome of `all-new` (the last),
/// per client and GVR, from the client's records and the proxies' counts.
pub(crate) fn before_upgrade(inputs: &Inputs<'_>) -> BeforeUpgrade {
    let resources = &inputs.workload.resources;
    let (first, last) = (0, inputs.phases.len().saturating_sub(1));
    let mut rows: BTreeMap<(String, String), Prediction> = BTreeMap::new();
    // What the target lacks of what the old release serves: what mvproxy must count.
    let lacks = |gvr: &Gvr| {
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
    // Only what was predicted or broke is shown; a row that worked before and after is not.
    let rows: Vec<Prediction> = rows
        .into_values()
        .filter(|r| r.predicted > 0 || r.broke())
        .collect();
    let judged_right = rows
        .iter()
        .all(|r| r.sent_before == 0 || r.sent_after == 0 || (r.predicted > 0) == r.broke());
    BeforeUpgrade {
        target: crate::stack::target_label().to_owned(),
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

#[cfg(test)]
mod tests;
