use super::*;
use crate::report::answers::DiscoveryCounts;

/// Client-side tallies of 10 resource requests (3 rerouted, 1 answered 503 with its peers
/// down, 1 for a GVR no server serves) and 2 discovery requests, all answered, with the
/// metrics faithful proxies report for them.
fn agreeing() -> (Answers, Reroutes, SkewTally, Scrape) {
    let answers = Answers {
        sent: 12,
        answered: 12,
        resource_requests: 10,
        no_server: 1,
        discovery: DiscoveryCounts {
            requests: 2,
            merged: 1,
            not_modified: 1,
        },
        ..Answers::default()
    };
    let reroutes = Reroutes {
        rerouted: 3,
        false_404s: 4,
        false_404s_avoided: 4,
        predicted_by_gvr: BTreeMap::from([("apps/v1/deployments".to_owned(), 3)]),
        predicted_peers_down: 1,
        ..Reroutes::default()
    };
    let key: SkewKey = (
        "operator".to_owned(),
        "a/v1/b".to_owned(),
        "old_only".to_owned(),
    );
    let skew = SkewTally {
        requests: 2,
        sent: BTreeMap::from([(key.clone(), 2)]),
    };
    let metrics = Scrape {
        rerouted: BTreeMap::from([("apps/v1/deployments".to_owned(), 3)]),
        rerouted_by_code: BTreeMap::from([(200, 3)]),
        peers_down: 1,
        lookup_hits: 9,
        lookup_misses: 1,
        merges_built: 1,
        merges_cached: 1,
        skew: BTreeMap::from([(key, 2)]),
        ..Scrape::default()
    };
    (answers, reroutes, skew, metrics)
}

#[test]
fn faithful_metrics_reconcile_every_check() {
    let (answers, reroutes, skew, metrics) = agreeing();
    let checks = checks(&answers, &reroutes, &skew, &metrics, &[true, true]);
    assert_eq!(checks.len(), 12);
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| c.name.as_str())
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
}

#[test]
fn a_reroute_the_proxies_did_not_count_fails_the_checks_it_enters() {
    let (answers, reroutes, skew, mut metrics) = agreeing();
    metrics.rerouted.insert("apps/v1/deployments".to_owned(), 2);
    let checks = checks(&answers, &reroutes, &skew, &metrics, &[true, false]);
    let failed: Vec<(&str, u64, u64)> = checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| {
            (
                c.name.split(' ').next().unwrap_or(""),
                c.expected,
                c.measured,
            )
        })
        .collect();
    assert_eq!(
        failed,
        [
            ("false", 4, 3),
            ("rerouted", 3, 2),
            ("GVRs", 0, 1),
            ("segments", 0, 1)
        ]
    );
}

#[test]
fn the_proxies_numbers_are_shown_in_milliseconds_and_ratios_to_three_places() {
    let m = Scrape {
        lookup_hits: 2,
        lookup_misses: 1,
        merge_count: 3,
        merge_seconds: 0.001,
        merge_buckets: vec![(0.0005, 2), (f64::INFINITY, 3)],
        rerouted_by_code: BTreeMap::from([(200, 5), (503, 1)]),
        ..Scrape::default()
    };
    let p = proxy_numbers(&m);
    assert_eq!(p.cache_hit_ratio, Some(0.667));
    assert_eq!(p.merge_latency_mean_ms, Some(0.333));
    // The 99th percentile fell in the +Inf bucket: no bound to show.
    assert_eq!(p.merge_latency_p99_le_ms, None);
    assert_eq!(p.rerouted_by_code.get("503"), Some(&1));
    let none = proxy_numbers(&Scrape::default());
    assert_eq!(
        (none.cache_hit_ratio, none.merge_latency_mean_ms),
        (None, None)
    );
}
