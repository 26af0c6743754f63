use super::*;
use crate::plan::Expect;
use crate::report::records::{answered, lost, request};

#[test]
fn latency_is_split_by_hop_in_milliseconds_and_leaves_out_mvproxys_own_answers() {
    let mut t = LatencyTally::default();
    for (seq, micros) in [(0, 1_234), (1, 3_000), (2, 2_000)] {
        t.add(&answered(
            request(seq, 0, Some("v1/pods"), Expect::Local),
            200,
            Some(0),
            micros,
        ));
    }
    t.add(&answered(
        request(3, 0, Some("v1/pods"), Expect::Reroute),
        200,
        Some(1),
        9_876_543,
    ));
    t.add(&answered(
        request(4, 0, None, Expect::Discovery),
        200,
        None,
        50_000,
    ));
    t.add(&lost(
        request(5, 0, Some("v1/pods"), Expect::Local),
        "timed out",
    ));
    let l = t.finish();
    assert_eq!(l.local.count, 3);
    assert_eq!(l.local.p50, Some(2.0));
    assert_eq!(l.local.p95, Some(3.0));
    assert_eq!(l.peer.count, 1);
    assert_eq!(l.peer.p99, Some(9876.543));
}

#[test]
fn no_answers_have_no_percentiles() {
    let l = LatencyTally::default().finish();
    assert_eq!(l.local.count, 0);
    assert_eq!((l.local.p50, l.peer.p99), (None, None));
}

#[test]
fn nearest_rank_percentiles() {
    let v: Vec<u64> = (1..=100).collect();
    assert_eq!(percentile(&v, 0.5), Some(50));
    assert_eq!(percentile(&v, 0.99), Some(99));
    assert_eq!(percentile(&v, 1.0), Some(100));
    assert_eq!(percentile(&[7], 0.01), Some(7));
    assert_eq!(percentile(&[], 0.5), None);
}
