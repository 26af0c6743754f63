use std::time::Duration;

use super::*;
use crate::plan::{self, Expect};
use crate::report::records::{answered, in_skew, request, resources};

const FLOWSCHEMAS: &str = "flowcontrol.apiserver.k8s.io/v1beta3/flowschemas";

#[test]
fn requests_in_the_skew_are_counted_by_client_gvr_and_side() {
    let all = resources();
    let mut t = SkewTally::default();
    let records = [
        answered(
            in_skew(
                request(0, 0, Some(FLOWSCHEMAS), Expect::Local),
                Side::OldOnly,
            ),
            200,
            Some(0),
            900,
        ),
        answered(
            in_skew(
                request(1, 1, Some(FLOWSCHEMAS), Expect::Local),
                Side::OldOnly,
            ),
            200,
            Some(1),
            900,
        ),
        // Every node serves pods: not in the skew.
        answered(
            request(2, 1, Some("v1/pods"), Expect::Local),
            200,
            Some(1),
            900,
        ),
    ];
    for r in &records {
        t.add(r, r.request.resource.and_then(|i| all.get(i)), &all);
    }
    assert_eq!(t.requests, 2);
    let operator = Agent::Operator.client();
    let key = (operator, FLOWSCHEMAS.to_owned(), "old_only".to_owned());
    assert_eq!(t.sent, BTreeMap::from([(key, 2)]));
}

#[test]
fn readiness_names_each_sides_clients_with_what_mvproxy_counted() {
    let operator = Agent::Operator.client();
    let kubectl = Agent::Kubectl.client();
    let key =
        |client: &str, gvr: &str, side: &str| (client.to_owned(), gvr.to_owned(), side.to_owned());
    let total = Counts {
        skew_sent: BTreeMap::from([
            (key(&operator, FLOWSCHEMAS, "old_only"), 5),
            (
                key(
                    &operator,
                    "flowcontrol.apiserver.k8s.io/v1beta3/prioritylevelconfigurations",
                    "old_only",
                ),
                2,
            ),
            (
                key(
                    &kubectl,
                    "resource.k8s.io/v1beta1/deviceclasses",
                    "new_only",
                ),
                3,
            ),
        ]),
        skew_counted: BTreeMap::from([
            (key(&operator, FLOWSCHEMAS, "old_only"), 4),
            (
                key(
                    &kubectl,
                    "resource.k8s.io/v1beta1/deviceclasses",
                    "new_only",
                ),
                3,
            ),
        ]),
        ..Counts::default()
    };
    let r = readiness(&total);
    assert_eq!(r.breaks_after_upgrade.len(), 1);
    let op = &r.breaks_after_upgrade[0];
    assert_eq!(op.client, operator);
    assert_eq!(op.user_agent, Agent::Operator.user_agent());
    assert_eq!((op.requests, op.counted_by_mvproxy), (7, 4));
    assert_eq!(op.gvrs.get(FLOWSCHEMAS), Some(&5));
    assert_eq!(r.breaks_on_rollback.len(), 1);
    assert_eq!(r.breaks_on_rollback[0].client, kubectl);
    assert_eq!(r.breaks_on_rollback[0].counted_by_mvproxy, 3);
}

fn run_with(debug_skew: Vec<(String, Vec<String>)>) -> SegmentRun {
    SegmentRun {
        phase: 1,
        segment: 0,
        planned: 0,
        records: Vec::new(),
        lost: 0,
        settle: Duration::ZERO,
        elapsed: Duration::ZERO,
        metrics: crate::metrics::Scrape::default(),
        debug_skew,
        interrupted: false,
    }
}

#[test]
fn debug_discovery_must_show_the_catalogs_skew_of_the_segment() {
    let phases = plan::phases(Duration::from_secs(5));
    let surfaces = Surfaces::new();
    // node-1, back on the new release beside two old nodes.
    let phase = &phases[1];
    let mut want: Vec<(String, Vec<String>)> = phase.segments[1]
        .state
        .skew(&surfaces)
        .into_iter()
        .map(|(gvr, by)| (gvr.to_string(), by.into_iter().map(node_name).collect()))
        .collect();
    want.sort();
    assert!(!want.is_empty());
    assert!(skew_matches(&run_with(want.clone()), &surfaces, phase, 1));
    let mut short = want.clone();
    short.pop();
    assert!(!skew_matches(&run_with(short), &surfaces, phase, 1));
    // The same skew in a segment whose nodes all run one release does not match.
    assert!(!skew_matches(
        &run_with(want.clone()),
        &surfaces,
        &phases[0],
        0
    ));
    assert!(!skew_matches(&run_with(want), &surfaces, phase, 9));
}

#[test]
fn the_skew_table_lists_each_gvr_not_everywhere_with_its_servers_per_phase() {
    let phases = plan::phases(Duration::from_secs(5));
    let rows = skew_rows(&phases, &Surfaces::new());
    let flowschemas = rows
        .iter()
        .find(|r| r.gvr == FLOWSCHEMAS)
        .expect("1.31 serves what 1.34 does not");
    assert_eq!(flowschemas.served_by["all-old"].len(), 3);
    assert_eq!(
        flowschemas.served_by["node-1"],
        ["apiserver-2", "apiserver-3"]
    );
    assert_eq!(flowschemas.served_by["node-3"].len(), 0);
    assert!(rows.iter().all(|r| r.gvr != "v1/pods"));
}
