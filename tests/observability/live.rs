//! The one test here that starts anything: a two-release cluster under real traffic, scraped
//! by mvproxy's metric names and by a real Prometheus whose answers fill the overview.

use super::*;
use crate::cluster::{Cluster, wait_discovery};
use bytes::Bytes;
use http::Method;

/// Only 1.31 serves it, and warns that it is deprecated (removed in 1.32).
const FLOWSCHEMAS_V1BETA3: &str = "/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas";

/// Only A serves them (1.36's), and it cannot decode those stored at `v1alpha1`.
const PODGROUPS: &str = "/apis/scheduling.k8s.io/v1alpha2/namespaces/rehearsal/podgroups";

/// What no proxy can fix, through proxy `a`: a PodGroup whose deletion waits on
/// `scheduling.k8s.io/podgroup-protection` (no release here runs its controller), and a list
/// of PodGroups that A cannot decode.
async fn unfixable_traffic(a: &str) {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let name = format!(
        "pg-{}",
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let body = serde_json::json!({
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "finalizers": ["scheduling.k8s.io/podgroup-protection"]},
    });
    let json = [("content-type", "application/json")];
    let url = format!("{a}{PODGROUPS}");
    let r = request(Method::POST, &url, &json, Bytes::from(body.to_string()))
        .await
        .expect("create a PodGroup");
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    let r = request(
        Method::DELETE,
        &format!("{url}/{name}"),
        &json,
        Bytes::new(),
    )
    .await
    .expect("delete it");
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert!(r.text().contains("deletionTimestamp"), "{}", r.text());
    let r = get(&url, &[]).await.expect("list PodGroups");
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR, "{}", r.text());
}

/// Requests that exercise every route: local, peer, merged discovery, nopeer, a 404 from the
/// local server, a non-resource path, a watch; and, for the rehearsal's panels, a GVR the
/// target release does not serve that its server answers with a deprecation warning, and what
/// no proxy can fix ([`unfixable_traffic`]).
async fn healthy_traffic(c: &Cluster) {
    let a = c.proxy_a.url();
    // a watch the server ends after a second: counted open, then closed
    let r = get(&format!("{a}{PODS}?watch=true&timeoutSeconds=1"), &[])
        .await
        .expect("watch");
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    unfixable_traffic(&a).await;
    for (path, accept, want) in [
        (PODS, "application/json", StatusCode::OK),
        (OLD_ONLY, "application/json", StatusCode::OK),
        (NEW_ONLY, "application/json", StatusCode::OK),
        (FLOWSCHEMAS_V1BETA3, "application/json", StatusCode::OK),
        ("/apis", V2, StatusCode::OK),
        ("/apis", NOPEER, StatusCode::OK),
        (
            "/apis/example.com/v1/namespaces/default/widgets",
            "application/json",
            StatusCode::NOT_FOUND,
        ),
        ("/version", "application/json", StatusCode::OK),
    ] {
        let r = get(&format!("{a}{path}"), &[("accept", accept)])
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(r.status, want, "{path}: {}", r.text());
    }
    // and the real client, across both proxies
    let (ok, _, err) = Kubectl::new(&c.proxy_b.url())
        .run(&["get", "pods", "-A"])
        .await;
    assert!(ok, "{err}");
}

#[tokio::test]
async fn dashboards_and_rules_match_a_live_scrape_and_real_prometheus_answers_the_overview() {
    let c = Cluster::start_rehearsal().await;
    let targets = vec![c.proxy_a.admin.to_string(), c.proxy_b.admin.to_string()];
    let prom = Prometheus::start(&targets, &[repo().join("deploy/prometheus/rules.yml")]).await;
    for _ in 0..3 {
        healthy_traffic(&c).await;
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    // The deprecated API, and what no proxy can fix, again until Prometheus has two different
    // counts of each: increase() needs both, and the peer-down phase below, which keeps the
    // other tables growing, sends neither. Bounded: at most 30 rounds, 1.2 s apart.
    for attempt in 0.. {
        unfixable_traffic(&c.proxy_a.url()).await;
        let r = get(&format!("{}{FLOWSCHEMAS_V1BETA3}", c.proxy_a.url()), &[])
            .await
            .expect("deprecated API");
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        assert!(
            r.header("warning").contains("is deprecated"),
            "the warning reaches the client: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let mut grown = true;
        for family in [
            "mvproxy_deprecated_requests_total",
            "mvproxy_deletions_waiting_total",
            "mvproxy_undecodable_objects_total",
        ] {
            grown &= !prom
                .query(&format!("increase({family}[5m]) > 0"))
                .await
                .is_empty();
        }
        if grown {
            break;
        }
        assert!(
            attempt < 30,
            "Prometheus never saw the deprecated requests, the waiting deletions and the undecodable objects grow"
        );
    }
    let scrape_b = get(&format!("{}/metrics", c.proxy_b.admin_url()), &[])
        .await
        .expect("scrape b")
        .text();

    // Peer down: proxy b is gone, so what only b serves gets a 503 from a, and a's fetches
    // of b fail.
    let Cluster {
        a: _a,
        b: _b,
        proxy_a,
        proxy_b,
        ..
    } = c;
    proxy_b.kill().await;
    wait_discovery(&proxy_a, |servers| {
        servers
            .iter()
            .any(|s| s["id"] == "apiserver-b" && s["up"] == false)
    })
    .await;
    for _ in 0..3 {
        let r = get(&format!("{}{OLD_ONLY}", proxy_a.url()), &[])
            .await
            .expect("503");
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text());
        let r = get(&format!("{}{PODS}", proxy_a.url()), &[])
            .await
            .expect("local");
        assert_eq!(r.status, StatusCode::OK);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let scrape_a = get(&format!("{}/metrics", proxy_a.admin_url()), &[])
        .await
        .expect("scrape a");
    assert!(
        scrape_a
            .header("content-type")
            .starts_with("text/plain; version=0.0.4"),
        "{scrape_a:?}"
    );
    let scrape_a = scrape_a.text();

    // promtool lints the live classic-text exposition.
    let (ok, out) = promtool(&repo(), &["check", "metrics"], Some(&scrape_a)).await;
    assert!(ok, "promtool check metrics:\n{out}\n{scrape_a}");

    // Every mvproxy metric a dashboard or rule names is in the scrape, with the labels the
    // selectors match on; recording-rule names are defined by the rules.
    let mut samples = scrape_samples(&scrape_a);
    for (name, labels) in scrape_samples(&scrape_b) {
        samples.entry(name).or_default().extend(labels);
    }
    for f in CONTRACT_FAMILIES {
        assert!(
            samples.keys().any(|k| k == f
                || k.strip_prefix(f)
                    .is_some_and(|rest| ["_bucket", "_sum", "_count"].contains(&rest))),
            "family {f} is not in the scrape"
        );
    }
    let recorded = recorded_names();
    let target_labels = ["job", "instance"];
    let mut checked = 0;
    for e in all_exprs() {
        for sel in refs(&e.expr).selectors {
            if sel.metric.starts_with("traces_") {
                continue; // the collector's, checked against its config
            }
            if sel.metric.contains(':') {
                assert!(
                    recorded.contains(&sel.metric),
                    "{}: {} is not a recording rule",
                    e.origin,
                    sel.metric
                );
                continue;
            }
            assert!(
                sel.metric.starts_with("mvproxy_"),
                "{}: unexpected metric {}",
                e.origin,
                sel.metric
            );
            let labels = samples.get(&sel.metric).unwrap_or_else(|| {
                panic!(
                    "{}: {} is not in a live scrape of mvproxy",
                    e.origin, sel.metric
                )
            });
            for l in &sel.labels {
                assert!(
                    labels.contains(l) || target_labels.contains(&l.as_str()),
                    "{}: {} has no label {l} ({labels:?})",
                    e.origin,
                    sel.metric
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 40, "only {checked} mvproxy selectors checked");
    for v in dashboard("dashboards/mixed-version-overview.json")["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if v["type"] == "query" {
            let (r, label) = label_values(v["query"]["query"].as_str().unwrap_or_default())
                .expect("label_values");
            let metric = &r.selectors[0].metric;
            let labels = &samples[metric];
            assert!(
                labels.contains(&label) || target_labels.contains(&label.as_str()),
                "variable {}: {metric} has no {label}",
                v["name"]
            );
        }
    }

    // A real Prometheus scraped both proxies and evaluated the rules: each overview query
    // (variables at "All") returns data, with the labels its legend shows.
    let overview: Vec<Expr> = dashboard_exprs()
        .into_iter()
        .filter(|e| {
            e.origin
                .starts_with("dashboards/mixed-version-overview.json panel")
        })
        .collect();
    assert!(overview.len() >= 20, "{}", overview.len());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    let mut pending: Vec<Expr> = overview;
    while !pending.is_empty() {
        let mut still = Vec::new();
        for e in pending {
            let q = substitute_grafana(&e.expr, ".*");
            let result = prom.query(&q).await;
            if result.is_empty() {
                still.push(e);
                continue;
            }
            for l in legend_labels(&e.legend) {
                assert!(
                    result.iter().any(|r| r["metric"][&l].is_string()),
                    "{}: legend label {l} is in no series of {result:?}",
                    e.origin
                );
            }
        }
        pending = still;
        if !pending.is_empty() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no data from Prometheus for:\n{}\nlog: {}",
                pending
                    .iter()
                    .map(|e| format!("{}: {}", e.origin, e.expr))
                    .collect::<Vec<_>>()
                    .join("\n"),
                prom.log()
            );
            // keep traffic flowing while Prometheus catches up
            let _ = get(&format!("{}{OLD_ONLY}", proxy_a.url()), &[]).await;
            let _ = get(&format!("{}{NEW_ONLY}", proxy_a.url()), &[]).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    // The rules evaluate without errors against the real series, and the peer-down alert is
    // on its way (pending: `for: 2m`) for exactly the peer that went down.
    let rules = prom.api("rules", &[]).await;
    for g in rules["groups"].as_array().into_iter().flatten() {
        for r in g["rules"].as_array().into_iter().flatten() {
            assert_eq!(r["health"], "ok", "rule {}: {}", r["name"], r["lastError"]);
        }
    }
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let alerts = prom.api("alerts", &[]).await;
        let peer_down: Vec<&Value> = alerts["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["labels"]["alertname"] == "MvproxyPeerDown")
            .collect();
        if !peer_down.is_empty() {
            assert!(
                peer_down
                    .iter()
                    .all(|a| a["labels"]["peer"] == "apiserver-b" && a["state"] == "pending"),
                "{peer_down:?}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "MvproxyPeerDown never became pending: {alerts}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drop(prom);
    proxy_a.kill().await;
}
