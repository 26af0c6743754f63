//! Every PromQL expression of the dashboards, rules and datasource provisioning parses
//! (promtool), and the Prometheus config and rules pass promtool's checks and unit tests.

use super::*;

#[tokio::test]
async fn every_promql_expression_of_dashboards_rules_and_provisioning_parses() {
    let all = all_exprs();
    // The overview, the span metrics, their variables, the rules and the datasources.
    assert!(all.len() > 40, "too few expressions found: {}", all.len());
    let dir = TempDir::new("promql");
    let exprs: Vec<(String, String)> = all
        .iter()
        .map(|e| (e.key.clone(), substitute_grafana(&e.expr, "x")))
        .collect();
    let keys: BTreeSet<_> = exprs.iter().map(|(k, _)| k).collect();
    assert_eq!(keys.len(), exprs.len(), "duplicate keys");
    let (ok, out) = promtool_parses(dir.path(), &exprs).await;
    assert!(ok, "promtool rejected an expression:\n{out}\n{all:#?}");
    assert!(
        out.contains(&format!("SUCCESS: {} rules found", exprs.len())),
        "{out}"
    );

    // The same harness rejects a broken expression (an unclosed parenthesis).
    let broken = [(
        "check:broken".to_owned(),
        "sum(rate(mvproxy_requests_total[5m])".to_owned(),
    )];
    let (ok, out) = promtool_parses(dir.path(), &broken).await;
    assert!(!ok, "promtool accepted a broken expression: {out}");
    assert!(out.contains("parse error"), "{out}");
}

#[tokio::test]
async fn prometheus_config_rules_and_rule_unit_tests_pass_promtool() {
    let dir = repo().join("deploy/prometheus");
    let (ok, out) = promtool(&dir, &["check", "config", "prometheus.yml"], None).await;
    assert!(ok, "{out}");
    assert!(out.contains("1 rule files found"), "{out}");
    let (ok, out) = promtool(&dir, &["check", "rules", "rules.yml"], None).await;
    assert!(ok, "{out}");
    let (ok, out) = promtool(&dir, &["test", "rules", "rules_test.yml"], None).await;
    assert!(ok, "{out}");
    assert!(out.contains("SUCCESS"), "{out}");

    // The four alerts of the issue, each with a unit test that expects it to fire.
    let rules = yaml("deploy/prometheus/rules.yml");
    let alerts: BTreeSet<String> = seq(&rules["groups"])
        .iter()
        .flat_map(|g| seq(&g["rules"]))
        .filter_map(|r| r.get("alert").map(|n| s(n).to_owned()))
        .collect();
    let tests = read("deploy/prometheus/rules_test.yml");
    for a in [
        "MvproxyPeerDown",
        "MvproxyRerouteErrorRateHigh",
        "MvproxyDiscoverySyncErrors",
        "MvproxyMergedDiscoveryStale",
    ] {
        assert!(alerts.contains(a), "alert {a} missing: {alerts:?}");
        assert!(
            tests.contains(&format!("alertname: {a}")),
            "no unit test for {a}"
        );
    }
    // Every recording rule is exercised by a unit test or used by a dashboard.
    let dashboards: String = DASHBOARDS.iter().map(|d| read(d)).collect();
    for r in recorded_names() {
        assert!(
            tests.contains(&r) || dashboards.contains(&r),
            "recording rule {r} is neither tested nor used"
        );
    }
}
