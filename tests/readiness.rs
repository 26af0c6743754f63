//! Upgrade readiness end to end: requests from three agents for a GVR only the old release
//! serves, one only the new release serves and one both serve, sent through both proxies
//! (so over the peer hop both ways), show up exactly in `mvproxy_skew_requests_total` and
//! `/debug/clients`, counted once, by the proxy each client talked to.

use std::collections::BTreeMap;

use http::StatusCode;
use integration::*;
use serde_json::Value;

use crate::cluster::Cluster;

const KUBECTL: &str = "kubectl/v1.31.0 (linux/amd64) kubernetes/9edcffc";
const KCM: &str = "kube-controller-manager/v1.31.2 (linux/amd64) kubernetes/abc123/system:serviceaccount:kube-system:generic-garbage-collector";
const OPERATOR: &str = "flowschema-tuner/v0.4.2 (linux/amd64) kubernetes/$Format";

const KCM_CLIENT: &str = "kube-controller-manager (sa kube-system/generic-garbage-collector)";

/// `mvproxy_skew_requests_total` samples of a scrape: labels as written → value.
fn skew_samples(scrape: &str) -> BTreeMap<String, u64> {
    scrape
        .lines()
        .filter(|l| l.starts_with("mvproxy_skew_requests_total{"))
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("sample line");
            (series.to_owned(), value.parse().expect("integer count"))
        })
        .collect()
}

fn series(client: &str, gvr: (&str, &str, &str), side: &str) -> String {
    format!(
        "mvproxy_skew_requests_total{{client=\"{client}\",group=\"{}\",version=\"{}\",resource=\"{}\",side=\"{side}\"}}",
        gvr.0, gvr.1, gvr.2
    )
}

/// A client of `/debug/clients`: name, requests, (GVR, requests) that break after the upgrade,
/// and on a rollback.
type ClientSummary = (String, u64, Vec<(String, u64)>, Vec<(String, u64)>);

const PSC: (&str, &str, &str) = ("resource.k8s.io", "v1alpha3", "podschedulingcontexts");
const LC: (&str, &str, &str) = ("coordination.k8s.io", "v1beta1", "leasecandidates");

#[tokio::test]
async fn three_agents_show_up_exactly_in_the_counter_and_debug_clients() {
    let c = Cluster::start().await;
    let (a, b) = (c.proxy_a.url(), c.proxy_b.url());
    // (agent, proxy, path, times)
    let plan: [(&str, &str, &str, usize); 9] = [
        (KUBECTL, &a, OLD_ONLY, 2), // a (1.34) → peer hop → b
        (KUBECTL, &b, NEW_ONLY, 1), // b (1.31) → peer hop → a
        (KUBECTL, &a, PODS, 3),
        (KCM, &b, OLD_ONLY, 3), // served by b itself: still a GVR the upgrade removes
        (KCM, &a, OLD_ONLY, 1),
        (KCM, &a, NEW_ONLY, 2),
        (KCM, &b, PODS, 2),
        (OPERATOR, &a, OLD_ONLY, 4),
        (OPERATOR, &b, PODS, 1),
    ];
    for (agent, proxy, path, times) in plan {
        for _ in 0..times {
            let r = get(
                &format!("{proxy}{path}"),
                &[("user-agent", agent), ("accept", "application/json")],
            )
            .await
            .unwrap();
            assert_eq!(r.status, StatusCode::OK, "{agent} {path}: {}", r.text());
        }
    }
    // The hops happened: b's server got a's old-only requests marked as proxied, and a's
    // server b's new-only one.
    let hopped = |s: &StandInRunning, needle: &str| {
        requests_for(s, needle)
            .iter()
            .filter(|r| {
                r.headers
                    .get("x-kubernetes-peer-proxied")
                    .is_some_and(|v| v == "true")
            })
            .count()
    };
    assert_eq!(hopped(&c.b, "podschedulingcontexts"), 2 + 1 + 4);
    assert_eq!(hopped(&c.a, "leasecandidates"), 1);

    // Counted once, by the proxy the client talked to; the common GVR never.
    let scrape = |p: &Proxy| {
        let url = format!("{}/metrics", p.admin_url());
        async move { get(&url, &[]).await.unwrap().text() }
    };
    let want_a: BTreeMap<String, u64> = [
        (series("kubectl", PSC, "old_only"), 2),
        (series(KCM_CLIENT, PSC, "old_only"), 1),
        (series(KCM_CLIENT, LC, "new_only"), 2),
        (series("flowschema-tuner", PSC, "old_only"), 4),
    ]
    .into_iter()
    .collect();
    let want_b: BTreeMap<String, u64> = [
        (series("kubectl", LC, "new_only"), 1),
        (series(KCM_CLIENT, PSC, "old_only"), 3),
    ]
    .into_iter()
    .collect();
    assert_eq!(skew_samples(&scrape(&c.proxy_a).await), want_a);
    assert_eq!(skew_samples(&scrape(&c.proxy_b).await), want_b);

    // /debug/clients says the same per client, with what breaks after the upgrade and what
    // on a rollback.
    let debug = |p: &Proxy| {
        let url = format!("{}/debug/clients", p.admin_url());
        async move {
            let r = get(&url, &[]).await.unwrap();
            assert_eq!(r.status, StatusCode::OK);
            assert!(r.header("content-type").starts_with("application/json"));
            r.json()
        }
    };
    let da = debug(&c.proxy_a).await;
    assert_eq!(da["newest_release"], "1.34", "{da}");
    let releases: BTreeMap<String, String> = da["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_owned(),
                s["release"].as_str().unwrap_or("?").to_owned(),
            )
        })
        .collect();
    assert_eq!(releases["apiserver-a"], "1.34");
    assert_eq!(releases["apiserver-b"], "1.31");
    let summary = |d: &Value| -> Vec<ClientSummary> {
        let uses = |v: &Value| -> Vec<(String, u64)> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|u| {
                    assert!(u["first_seen"].as_f64() <= u["last_seen"].as_f64(), "{u}");
                    (
                        u["gvr"].as_str().unwrap().to_owned(),
                        u["requests"].as_u64().unwrap(),
                    )
                })
                .collect()
        };
        d["clients"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                assert!(c["partial"].as_array().unwrap().is_empty(), "{c}");
                assert!(c["unknown"].as_array().unwrap().is_empty(), "{c}");
                (
                    c["client"].as_str().unwrap().to_owned(),
                    c["requests"].as_u64().unwrap(),
                    uses(&c["breaks_after_upgrade"]),
                    uses(&c["breaks_on_rollback"]),
                )
            })
            .collect()
    };
    let psc = "resource.k8s.io/v1alpha3/podschedulingcontexts".to_owned();
    let lc = "coordination.k8s.io/v1beta1/leasecandidates".to_owned();
    assert_eq!(
        summary(&da),
        vec![
            (
                "flowschema-tuner".to_owned(),
                4,
                vec![(psc.clone(), 4)],
                vec![]
            ),
            (
                KCM_CLIENT.to_owned(),
                3,
                vec![(psc.clone(), 1)],
                vec![(lc.clone(), 2)]
            ),
            ("kubectl".to_owned(), 2, vec![(psc.clone(), 2)], vec![]),
        ]
    );
    let db = debug(&c.proxy_b).await;
    assert_eq!(
        summary(&db),
        vec![
            (KCM_CLIENT.to_owned(), 3, vec![(psc, 3)], vec![]),
            ("kubectl".to_owned(), 1, vec![], vec![(lc, 1)]),
        ]
    );
    let kcm = &da["clients"][1];
    assert_eq!(kcm["program"], "kube-controller-manager");
    assert_eq!(kcm["version"], "v1.31.2");
    assert_eq!(da["max_tracked_clients"], 100);
    assert_eq!(da["tracked_clients"], 3);
}

#[tokio::test]
async fn past_max_tracked_clients_agents_count_as_other() {
    let old = standin_release("apiserver-old", &apis_131(), "v1.31.0").await;
    let new = standin_release("apiserver-new", &apis_134(), "v1.34.0").await;
    let mut args = proxy_args(
        "apiserver-new",
        &new.url(),
        &[("apiserver-old", &old.url())],
    );
    args.extend(["--max-tracked-clients".to_owned(), "2".to_owned()]);
    let p = Proxy::serve(&args).await;
    p.ready().await;
    crate::cluster::wait_all_up(&p).await;
    for i in 0..6 {
        let agent = format!("operator-{i}/v1.0.{i} (linux/amd64) kubernetes/abc");
        let r = get(&format!("{}{OLD_ONLY}", p.url()), &[("user-agent", &agent)])
            .await
            .unwrap();
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    }
    let scrape = get(&format!("{}/metrics", p.admin_url()), &[])
        .await
        .unwrap()
        .text();
    let want: BTreeMap<String, u64> = [
        (series("operator-0", PSC, "old_only"), 1),
        (series("operator-1", PSC, "old_only"), 1),
        (series("other", PSC, "old_only"), 4),
    ]
    .into_iter()
    .collect();
    assert_eq!(skew_samples(&scrape), want);
    let d = get(&format!("{}/debug/clients", p.admin_url()), &[])
        .await
        .unwrap()
        .json();
    assert_eq!(d["tracked_clients"], 2);
    assert_eq!(d["clients"][2]["client"], "other");
    assert_eq!(d["clients"][2]["requests"], 4);
    p.kill().await;
    old.shutdown().await;
    new.shutdown().await;
}
