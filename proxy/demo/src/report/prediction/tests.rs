use std::time::Duration;

use super::*;
use crate::metrics::Scrape;
use crate::plan::{self, Expect, Surfaces};
use crate::report::records::{answered, request, resources};
use crate::run::{Record, SegmentRun};
use crate::workload::{Agent, Workload};

/// Removed by 1.32: the operator's, served by 1.31 and not by 1.34.
const FLOWSCHEMAS: &str = "flowcontrol.apiserver.k8s.io/v1beta3/flowschemas";

fn run(phase: usize, records: Vec<Record>, target_missing: u64) -> SegmentRun {
    let mut metrics = Scrape::default();
    if target_missing > 0 {
        let key = (Agent::Operator.client(), FLOWSCHEMAS.to_owned());
        metrics.target_missing.insert(key, target_missing);
    }
    SegmentRun {
        phase,
        segment: 0,
        planned: records.len(),
        records,
        lost: 0,
        settle: Duration::ZERO,
        elapsed: Duration::ZERO,
        metrics,
        debug_skew: Vec::new(),
        interrupted: false,
    }
}

/// The operator's flowschemas: `before` requests during `all-old`, `counted` of them counted
/// by the proxies, and during `all-new` `after` requests answered `status_after`.
fn judge(before: u64, counted: u64, after: u64, status_after: u16) -> BeforeUpgrade {
    let phases = plan::phases(Duration::from_secs(5));
    let surfaces = Surfaces::new();
    let workload = Workload {
        seed: 1,
        rate: 1,
        resources: resources(),
        requests: Vec::new(),
    };
    let old: Vec<Record> = (0..before)
        .map(|seq| {
            answered(
                request(seq, 0, Some(FLOWSCHEMAS), Expect::Local),
                200,
                Some(0),
                900,
            )
        })
        .collect();
    let new: Vec<Record> = (0..after)
        .map(|seq| {
            answered(
                request(100 + seq, 0, Some(FLOWSCHEMAS), Expect::TrueNotFound),
                status_after,
                Some(0),
                900,
            )
        })
        .collect();
    let last = phases.len() - 1;
    let runs = vec![run(0, old, counted), run(last, new, 0)];
    before_upgrade(&Inputs {
        phases: &phases,
        workload: &workload,
        surfaces: &surfaces,
        runs: &runs,
        nodes: Vec::new(),
        duration_seconds: 5.0,
        wall_seconds: 5.0,
        interrupted: false,
        digest: String::new(),
    })
}

#[test]
fn a_gvr_counted_before_the_upgrade_and_gone_after_it_is_a_prediction_that_held() {
    let b = judge(4, 4, 3, 404);
    assert!(b.held);
    assert_eq!(b.target, crate::stack::target_label());
    assert_eq!(b.rows.len(), 1);
    let row = &b.rows[0];
    assert_eq!(row.client, Agent::Operator.client());
    assert_eq!(row.gvr, FLOWSCHEMAS);
    assert_eq!(
        (row.sent_before, row.predicted, row.not_found_before),
        (4, 4, 0)
    );
    assert_eq!((row.sent_after, row.not_found_after), (3, 3));
}

#[test]
fn a_count_short_of_the_requests_the_target_lacks_does_not_hold() {
    let b = judge(4, 3, 3, 404);
    assert!(!b.held);
    assert_eq!(b.rows[0].predicted, 3);
}

#[test]
fn a_predicted_break_that_did_not_happen_does_not_hold() {
    let b = judge(4, 4, 3, 200);
    assert!(!b.held);
    assert_eq!(b.rows.len(), 1);
}

#[test]
fn a_row_not_sent_after_the_upgrade_is_shown_but_not_judged() {
    let b = judge(4, 4, 0, 404);
    assert!(b.held);
    assert_eq!(b.rows[0].sent_after, 0);
}
