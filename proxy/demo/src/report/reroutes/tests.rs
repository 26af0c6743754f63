use super::*;
use crate::report::records::{answered, lost, request, resources};

fn tally(records: &[Record]) -> Reroutes {
    let all = resources();
    let mut t = Reroutes::default();
    for r in records {
        t.add(r, r.request.resource.and_then(|i| all.get(i)));
    }
    t
}

#[test]
fn reroutes_are_counted_by_group_gvr_and_the_peer_that_answered() {
    let t = tally(&[
        answered(
            request(0, 0, Some("apps/v1/deployments"), Expect::Reroute),
            200,
            Some(1),
            900,
        ),
        answered(
            request(1, 0, Some("apps/v1/deployments"), Expect::Reroute),
            201,
            Some(2),
            900,
        ),
        answered(
            request(2, 1, Some("v1/pods"), Expect::Reroute),
            200,
            Some(2),
            900,
        ),
        // Served by the picked node: not a reroute.
        answered(
            request(3, 1, Some("v1/pods"), Expect::Local),
            200,
            Some(1),
            900,
        ),
    ]);
    assert_eq!(t.rerouted, 3);
    assert_eq!(t.by_group.get("apps"), Some(&2));
    assert_eq!(t.by_group.get("core"), Some(&1));
    assert_eq!(t.by_gvr.get("apps/v1/deployments"), Some(&2));
    assert_eq!(t.by_peer.get("apiserver-3"), Some(&2));
    assert_eq!(t.by_peer.get("apiserver-2"), Some(&1));
    assert_eq!(t.predicted_by_gvr.get("v1/pods"), Some(&1));
}

#[test]
fn a_false_404_is_avoided_by_a_peer_or_a_503_and_delivered_by_a_404() {
    let t = tally(&[
        answered(
            request(0, 0, Some("apps/v1/deployments"), Expect::Reroute),
            200,
            Some(1),
            900,
        ),
        answered(
            request(1, 0, Some("apps/v1/deployments"), Expect::PeersDown),
            503,
            None,
            900,
        ),
        answered(
            request(2, 0, Some("apps/v1/deployments"), Expect::Reroute),
            404,
            Some(0),
            900,
        ),
        // Lost: a false 404 averted or not, nobody knows.
        lost(
            request(3, 0, Some("apps/v1/deployments"), Expect::Reroute),
            "timed out",
        ),
        // A true 404 is no false one.
        answered(
            request(4, 0, Some("v1/pods"), Expect::TrueNotFound),
            404,
            Some(0),
            900,
        ),
    ]);
    assert_eq!(t.false_404s, 4);
    assert_eq!(t.false_404s_avoided, 2);
    assert_eq!(t.false_404s_delivered, 1);
    assert_eq!(t.predicted_peers_down, 1);
    assert_eq!(t.predicted_by_gvr.get("apps/v1/deployments"), Some(&3));
    assert_eq!(t.rerouted, 1);
}
