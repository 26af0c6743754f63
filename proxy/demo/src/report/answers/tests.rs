use super::*;
use crate::report::records::{answered, lost, request};

fn tally(records: &[Record]) -> Answers {
    let resources = crate::report::records::resources();
    let mut a = Answers::default();
    for r in records {
        a.add(r, &resources);
    }
    a
}

#[test]
fn who_answered_is_the_picked_server_a_peer_or_mvproxy() {
    let a = tally(&[
        answered(
            request(0, 0, Some("v1/pods"), Expect::Local),
            200,
            Some(0),
            900,
        ),
        answered(
            request(1, 1, Some("apps/v1/deployments"), Expect::Reroute),
            200,
            Some(2),
            900,
        ),
        answered(request(2, 2, None, Expect::Discovery), 304, None, 300),
        answered(request(3, 2, None, Expect::Discovery), 200, None, 300),
    ]);
    assert_eq!(a.answered, 4);
    assert_eq!(a.served_locally, 1);
    // The reroute is neither: it is the reroutes' to count.
    assert_eq!(a.answered_by_mvproxy, 2);
    assert_eq!(a.resource_requests, 2);
    assert_eq!(
        (
            a.discovery.requests,
            a.discovery.merged,
            a.discovery.not_modified
        ),
        (2, 1, 1)
    );
    assert_eq!(a.status_codes.get("200"), Some(&3));
    assert_eq!(a.status_codes.get("304"), Some(&1));
    assert_eq!(a.unexpected, 0);
}

#[test]
fn a_request_without_an_answer_is_lost_and_shown_with_its_error() {
    let resources = crate::report::records::resources();
    let mut a = Answers::default();
    let run = SegmentRun {
        phase: 0,
        segment: 0,
        planned: 4,
        records: vec![
            answered(
                request(0, 0, Some("v1/pods"), Expect::Local),
                200,
                Some(0),
                900,
            ),
            lost(request(1, 1, Some("v1/pods"), Expect::Local), "timed out"),
        ],
        // A third request's task ended without a record.
        lost: 1,
        settle: std::time::Duration::ZERO,
        elapsed: std::time::Duration::ZERO,
        metrics: crate::metrics::Scrape::default(),
        debug_skew: Vec::new(),
        interrupted: false,
    };
    a.add_segment(&run);
    for r in &run.records {
        a.add(r, &resources);
    }
    assert_eq!((a.planned, a.sent, a.answered, a.lost), (4, 3, 1, 2));
    assert_eq!(a.unexpected, 1);
    let example = &a.unexpected_examples[0];
    assert_eq!(example.seq, 1);
    assert_eq!(example.node, "apiserver-2");
    assert_eq!(example.error.as_deref(), Some("timed out"));
    assert_eq!(example.status, None);
}

#[test]
fn an_answer_against_the_counterfactual_is_unexpected_and_the_examples_stop_at_five() {
    // A reroute answered 404 by the picked server: the false 404 mvproxy exists to prevent.
    let records: Vec<Record> = (0..7)
        .map(|seq| {
            answered(
                request(seq, 0, Some("apps/v1/deployments"), Expect::Reroute),
                404,
                Some(0),
                900,
            )
        })
        .collect();
    let a = tally(&records);
    assert_eq!(a.unexpected, 7);
    assert_eq!(a.unexpected_examples.len(), EXAMPLES);
    let first = &a.unexpected_examples[0];
    assert_eq!(first.method, "GET");
    assert_eq!(first.status, Some(404));
    assert_eq!(first.answered_by.as_deref(), Some("apiserver-1"));
    assert!(first.path.contains("/apis/apps/v1/"), "{}", first.path);
}

#[test]
fn true_404s_are_the_answered_requests_for_gvrs_no_server_serves() {
    let gone = Some("flowcontrol.apiserver.k8s.io/v1beta3/flowschemas");
    let a = tally(&[
        answered(request(0, 0, gone, Expect::TrueNotFound), 404, Some(0), 900),
        // mvproxy must pass the server's 404 through, not answer for it.
        answered(request(1, 0, gone, Expect::TrueNotFound), 503, None, 900),
        lost(request(2, 0, gone, Expect::TrueNotFound), "reset"),
    ]);
    assert_eq!(a.no_server, 3);
    assert_eq!(a.true_404s, 1);
    assert_eq!(a.unavailable_503, 1);
    assert_eq!(a.unexpected, 2);
}
