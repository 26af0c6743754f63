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

    // The alerts of the issues, each with a unit test that expects it to fire.
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
        "MvproxyClientBreaksOnTargetRelease",
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

/// The overview's "API server version change" annotation, evaluated by promtool on a rolling
/// upgrade as two proxies export it: it marks server a when its gitVersion moves from
/// v1.35.4 to v1.36.3, and nothing when the proxies start (servers first seen) or while a
/// server keeps its version.
#[tokio::test]
async fn the_version_change_annotation_marks_each_upgrade_and_nothing_else() {
    let d = dashboard("dashboards/mixed-version-overview.json");
    let expr = d["annotations"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["name"] == "API server version change")
        .and_then(|a| a["expr"].as_str())
        .expect("the overview has the version-change annotation")
        .replace("$instance", ".*");
    let dir = TempDir::new("annotation");
    std::fs::write(
        dir.path().join("rules.yml"),
        format!(
            "groups:\n  - name: annotation\n    rules:\n      - record: annotation:version_change\n        expr: {}\n",
            serde_json::to_string(&expr).unwrap()
        ),
    )
    .unwrap();
    // Proxies a and b start at 0m with both servers on v1.35.4; server a restarts on v1.36.3
    // at 10m (absent from 9m, as while it is down mvproxy keeps the last view: here the
    // series simply moves), server b at 20m.
    let info = |instance: &str, server: &str, git: &str, values: &str| {
        format!(
            "      - series: 'mvproxy_server_info{{job=\"mvproxy\",instance=\"{instance}\",server=\"{server}\",git_version=\"{git}\"}}'\n        values: '{values}'\n"
        )
    };
    let mut series = String::new();
    for instance in ["a", "b"] {
        series += &info(instance, "apiserver-a", "v1.35.4", "1x9");
        series += &info(instance, "apiserver-a", "v1.36.3", "_x10 1x20");
        series += &info(instance, "apiserver-b", "v1.35.4", "1x19");
        series += &info(instance, "apiserver-b", "v1.36.3", "_x20 1x10");
    }
    let at = |minute: u32, expect: &[(&str, &str)]| {
        let mut s = format!(
            "      - expr: annotation:version_change\n        eval_time: {minute}m\n        exp_samples:\n"
        );
        for (server, git) in expect {
            s += &format!(
                "          - labels: 'annotation:version_change{{server=\"{server}\",git_version=\"{git}\"}}'\n            value: 1\n"
            );
        }
        if expect.is_empty() {
            s = s.replace("exp_samples:\n", "exp_samples: []\n");
        }
        s
    };
    let tests = format!(
        "rule_files: [rules.yml]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n{series}    promql_expr_test:\n{}{}{}{}{}",
        at(0, &[]),
        at(5, &[]),
        at(10, &[("apiserver-a", "v1.36.3")]),
        at(15, &[]),
        at(20, &[("apiserver-b", "v1.36.3")]),
    );
    std::fs::write(dir.path().join("tests.yml"), &tests).unwrap();
    let (ok, out) = promtool(dir.path(), &["test", "rules", "tests.yml"], None).await;
    assert!(ok, "{out}\n{tests}");
    assert!(out.contains("SUCCESS"), "{out}");
}
