//! The observability pack against the proxy it observes: every PromQL expression of the
//! dashboards, rules and datasource provisioning parses (promtool); every metric they name is
//! in a live scrape of a two-release cluster after real traffic; the overview's queries return
//! data from a real Prometheus scraping that cluster; the rules pass their unit tests; and the
//! dashboards, collector config, compose stack and Kubernetes manifests hold together.
//!
//! What cannot run here (Grafana, the collector, Tempo, Jaeger: no binaries on these machines)
//! is checked structurally against the naming the collector documents and README.md's span
//! attributes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::StatusCode;
use integration::prometheus::{Prometheus, promtool};
use integration::promql::{Refs, label_values, refs, scrape_samples, substitute_grafana};
use integration::tempdir::TempDir;
use integration::*;
use mvproxy_telemetry::metrics::REQUEST_BUCKETS;
use serde_json::Value;

use crate::cluster::{Cluster, wait_discovery};

/// Only 1.31 (apiserver-b) serves this GVR.
const OLD_ONLY: &str = "/apis/resource.k8s.io/v1alpha3/namespaces/default/podschedulingcontexts";
/// Only 1.34 (apiserver-a) serves this GVR.
const NEW_ONLY: &str = "/apis/coordination.k8s.io/v1beta1/namespaces/default/leasecandidates";
const V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
const NOPEER: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer";

/// The families of README.md's metric table.
const CONTRACT_FAMILIES: [&str; 14] = [
    "mvproxy_rerouted_request_total",
    "mvproxy_peer_proxy_errors_total",
    "mvproxy_peer_discovery_sync_errors_total",
    "mvproxy_discovery_nopeer_requests_total",
    "mvproxy_requests_total",
    "mvproxy_request_duration_seconds",
    "mvproxy_discovery_cache_lookups_total",
    "mvproxy_discovery_cache_lookup_duration_seconds",
    "mvproxy_discovery_merges_total",
    "mvproxy_discovery_merge_duration_seconds",
    "mvproxy_peer_discovery_fetch_duration_seconds",
    "mvproxy_peer_up",
    "mvproxy_discovery_resources",
    "mvproxy_skew_requests_total",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    let p = repo().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn yaml(rel: &str) -> serde_yaml_ng::Value {
    serde_yaml_ng::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Every document of a multi-document YAML file.
fn yaml_docs(rel: &str) -> Vec<serde_yaml_ng::Value> {
    use serde::Deserialize;
    serde_yaml_ng::Deserializer::from_str(&read(rel))
        .map(|d| serde_yaml_ng::Value::deserialize(d).unwrap_or_else(|e| panic!("{rel}: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

fn s(v: &serde_yaml_ng::Value) -> &str {
    v.as_str().unwrap_or_default()
}

fn seq(v: &serde_yaml_ng::Value) -> Vec<serde_yaml_ng::Value> {
    v.as_sequence().cloned().unwrap_or_default()
}

fn keys(v: &serde_yaml_ng::Value) -> Vec<String> {
    v.as_mapping()
        .map(|m| m.keys().map(|k| s(k).to_owned()).collect())
        .unwrap_or_default()
}

const DASHBOARDS: [&str; 3] = [
    "dashboards/mixed-version-overview.json",
    "dashboards/span-metrics.json",
    "dashboards/traces.json",
];

fn dashboard(rel: &str) -> Value {
    serde_json::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: not JSON: {e}"))
}

/// Every panel, rows' nested panels included.
fn panels(d: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().into_iter().flatten() {
        out.push(p.clone());
        for inner in p["panels"].as_array().into_iter().flatten() {
            out.push(inner.clone());
        }
    }
    out
}

/// An expression and where it comes from.
#[derive(Debug, Clone)]
struct Expr {
    origin: String,
    /// A name usable in a recording rule.
    key: String,
    expr: String,
    /// Legend format of a dashboard target ("" elsewhere).
    legend: String,
}

/// The PromQL of every dashboard target, variable query and panel, as written.
fn dashboard_exprs() -> Vec<Expr> {
    let mut out = Vec::new();
    for rel in DASHBOARDS {
        let d = dashboard(rel);
        let stem = Path::new(rel)
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .replace('-', "_");
        for p in panels(&d) {
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    out.push(Expr {
                        origin: format!(
                            "{rel} panel {} {:?} target {}",
                            p["id"], p["title"], t["refId"]
                        ),
                        key: format!(
                            "check:{stem}:p{}_{}",
                            p["id"],
                            t["refId"].as_str().unwrap_or("X")
                        ),
                        expr: e.to_owned(),
                        legend: t["legendFormat"].as_str().unwrap_or_default().to_owned(),
                    });
                }
            }
        }
        for v in d["templating"]["list"].as_array().into_iter().flatten() {
            if v["type"] != "query" {
                continue;
            }
            let q = v["query"]["query"].as_str().unwrap_or_default();
            assert!(
                label_values(q).is_some(),
                "{rel} variable {}: not label_values(): {q}",
                v["name"]
            );
            // label_values(SELECTOR, label): the selector is PromQL.
            let selector = q
                .trim()
                .trim_start_matches("label_values(")
                .rsplit_once(',')
                .map(|(sel, _)| sel.to_owned())
                .unwrap_or_default();
            out.push(Expr {
                origin: format!("{rel} variable {}", v["name"]),
                key: format!("check:{stem}:var_{}", v["name"].as_str().unwrap_or("x")),
                expr: selector,
                legend: String::new(),
            });
        }
    }
    out
}

/// The expression of every recording and alerting rule.
fn rule_exprs() -> Vec<Expr> {
    let rules = yaml("deploy/prometheus/rules.yml");
    let mut out = Vec::new();
    for g in seq(&rules["groups"]) {
        for (i, r) in seq(&g["rules"]).into_iter().enumerate() {
            let name = r
                .get("record")
                .or_else(|| r.get("alert"))
                .map(s)
                .unwrap_or_default()
                .to_owned();
            out.push(Expr {
                origin: format!("rules.yml {name}"),
                key: format!("check:rules:{}_{i}", s(&g["name"]).replace(['.', '-'], "_")),
                expr: s(&r["expr"]).to_owned(),
                legend: String::new(),
            });
        }
    }
    out
}

/// The names the recording rules define.
fn recorded_names() -> BTreeSet<String> {
    let rules = yaml("deploy/prometheus/rules.yml");
    seq(&rules["groups"])
        .iter()
        .flat_map(|g| seq(&g["rules"]))
        .filter_map(|r| r.get("record").map(|n| s(n).to_owned()))
        .collect()
}

/// The trace-to-metrics queries of the datasource provisioning, `$__tags` filled in.
fn provisioning_exprs() -> Vec<Expr> {
    let ds = yaml("dashboards/provisioning/datasources/mvproxy.yaml");
    let mut out = Vec::new();
    for d in seq(&ds["datasources"]) {
        for (i, q) in seq(&d["jsonData"]["tracesToMetrics"]["queries"])
            .into_iter()
            .enumerate()
        {
            // `$$` is a literal `$` in provisioning files; Grafana fills `$__tags` from the span.
            let expr = s(&q["query"])
                .replace("$$", "$")
                .replace("$__tags", "service_name=\"mvproxy\"");
            out.push(Expr {
                origin: format!("datasource {} query {:?}", s(&d["name"]), s(&q["name"])),
                key: format!("check:provisioning:{}_{i}", s(&d["uid"])),
                expr,
                legend: String::new(),
            });
        }
    }
    out
}

fn all_exprs() -> Vec<Expr> {
    let mut all = dashboard_exprs();
    all.extend(rule_exprs());
    all.extend(provisioning_exprs());
    all
}

/// Writes `exprs` as recording rules into `dir` and runs `promtool check rules` on them.
async fn promtool_parses(dir: &Path, exprs: &[(String, String)]) -> (bool, String) {
    let rules: Vec<Value> = exprs
        .iter()
        .map(|(key, e)| serde_json::json!({"record": key, "expr": e}))
        .collect();
    let doc = serde_json::json!({"groups": [{"name": "expressions", "rules": rules}]});
    let path = dir.join("expressions.yml");
    std::fs::write(
        &path,
        serde_yaml_ng::to_string(&doc).expect("rules as YAML"),
    )
    .expect("write rules");
    promtool(dir, &["check", "rules", "expressions.yml"], None).await
}

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

/// A datasource provisioned for Grafana: (type, uid).
fn provisioned_datasources() -> Vec<(String, String)> {
    let ds = yaml("dashboards/provisioning/datasources/mvproxy.yaml");
    seq(&ds["datasources"])
        .iter()
        .map(|d| (s(&d["type"]).to_owned(), s(&d["uid"]).to_owned()))
        .collect()
}

/// Resolves a panel or target datasource reference to a provisioned datasource, or panics.
fn resolve_datasource(rel: &str, d: &Value, what: &str, ds: &Value) {
    let provisioned = provisioned_datasources();
    let uid = ds["uid"]
        .as_str()
        .unwrap_or_else(|| panic!("{rel} {what}: datasource without uid: {ds}"));
    let ty = ds["type"].as_str().unwrap_or_default();
    let resolved_uid = if let Some(var) = uid
        .strip_prefix("${")
        .and_then(|u| u.strip_suffix('}'))
        .or_else(|| uid.strip_prefix('$'))
    {
        let v = d["templating"]["list"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == var)
            .unwrap_or_else(|| panic!("{rel} {what}: datasource variable ${var} is not defined"));
        assert_eq!(
            v["type"], "datasource",
            "{rel} {what}: ${var} is not a datasource variable"
        );
        assert_eq!(
            v["query"], ty,
            "{rel} {what}: ${var} lists {} datasources, used as {ty}",
            v["query"]
        );
        v["current"]["value"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    } else {
        uid.to_owned()
    };
    assert!(
        provisioned
            .iter()
            .any(|(t, u)| *u == resolved_uid && t == ty),
        "{rel} {what}: datasource {ty}/{resolved_uid} is not provisioned ({provisioned:?})"
    );
}

fn overlaps(a: &Value, b: &Value) -> bool {
    let r = |g: &Value| {
        let n = |k: &str| g[k].as_i64().unwrap_or(0);
        (n("x"), n("y"), n("x") + n("w"), n("y") + n("h"))
    };
    let (ax0, ay0, ax1, ay1) = r(a);
    let (bx0, by0, bx1, by1) = r(b);
    ax0 < bx1 && bx0 < ax1 && ay0 < by1 && by0 < ay1
}

#[test]
fn dashboards_are_well_formed_documented_and_use_provisioned_datasources() {
    let mut uids = BTreeSet::new();
    let readme = read("dashboards/README.md");
    for rel in DASHBOARDS {
        let d = dashboard(rel);
        assert_eq!(d["schemaVersion"], 42, "{rel}");
        let uid = d["uid"].as_str().unwrap_or_default();
        assert!(
            !uid.is_empty() && uids.insert(uid.to_owned()),
            "{rel}: uid {uid:?}"
        );
        assert!(
            d["title"].as_str().is_some_and(|t| !t.is_empty()),
            "{rel}: title"
        );
        assert!(
            d["tags"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t == "mvproxy")),
            "{rel}: tag mvproxy (the dashboards link each other by it)"
        );
        let vars = d["templating"]["list"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            vars.iter().any(|v| v["type"] == "datasource"),
            "{rel}: no datasource variable"
        );
        for v in &vars {
            if v["type"] == "query" {
                resolve_datasource(
                    rel,
                    &d,
                    &format!("variable {}", v["name"]),
                    &v["datasource"],
                );
            }
        }
        let ps = panels(&d);
        assert!(!ps.is_empty(), "{rel}: no panels");
        let mut ids = BTreeSet::new();
        for (i, p) in ps.iter().enumerate() {
            let what = format!("panel {} {:?}", p["id"], p["title"]);
            assert!(
                ids.insert(p["id"].as_i64().expect("numeric panel id")),
                "{rel}: duplicate {what}"
            );
            let g = &p["gridPos"];
            for k in ["x", "y", "w", "h"] {
                assert!(g[k].is_i64(), "{rel} {what}: gridPos.{k}");
            }
            assert!(
                g["x"].as_i64().unwrap_or(0) + g["w"].as_i64().unwrap_or(0) <= 24,
                "{rel} {what}: wider than 24 columns"
            );
            for q in &ps[i + 1..] {
                assert!(
                    !overlaps(g, &q["gridPos"]),
                    "{rel}: {what} overlaps panel {}",
                    q["id"]
                );
            }
            let desc = p["description"].as_str().unwrap_or_default();
            assert!(
                desc.contains("Healthy rehearsal"),
                "{rel} {what}: the description must say what a healthy rehearsal looks like: {desc:?}"
            );
            assert!(
                p["fieldConfig"]["defaults"]["unit"]
                    .as_str()
                    .is_some_and(|u| !u.is_empty()),
                "{rel} {what}: no unit"
            );
            resolve_datasource(rel, &d, &what, &p["datasource"]);
            let targets = p["targets"].as_array().cloned().unwrap_or_default();
            assert!(!targets.is_empty(), "{rel} {what}: no targets");
            for t in &targets {
                resolve_datasource(
                    rel,
                    &d,
                    &format!("{what} target {}", t["refId"]),
                    &t["datasource"],
                );
                match t["datasource"]["type"].as_str() {
                    Some("prometheus") => {
                        let e = t["expr"].as_str().unwrap_or_default();
                        assert!(!e.is_empty(), "{rel} {what}: empty expr");
                        // Latency histograms carry trace ids: the exemplars must be shown.
                        if e.contains("_bucket") && !t["instant"].as_bool().unwrap_or(false) {
                            assert_eq!(
                                t["exemplar"], true,
                                "{rel} {what}: exemplars off on a histogram"
                            );
                        }
                    }
                    Some("tempo") => assert!(
                        t["queryType"] == "serviceMap"
                            || t["query"].as_str().is_some_and(|q| q.starts_with('{')),
                        "{rel} {what}: not a TraceQL or service-map query: {t}"
                    ),
                    other => panic!("{rel} {what}: unexpected datasource type {other:?}"),
                }
            }
            let title = p["title"].as_str().unwrap_or_default();
            assert!(
                readme.contains(title),
                "dashboards/README.md does not list {rel} {what}"
            );
        }
    }
    // Together the dashboards show every family of the metric contract.
    let exprs: String = dashboard_exprs()
        .iter()
        .map(|e| e.expr.clone() + "\n")
        .collect();
    let rules = read("deploy/prometheus/rules.yml");
    for f in CONTRACT_FAMILIES {
        assert!(
            exprs.contains(f) || rules.contains(f),
            "no dashboard or rule shows {f}"
        );
    }
}

#[test]
fn traces_dashboard_has_the_tempo_panels_of_the_issue() {
    let d = dashboard("dashboards/traces.json");
    let ps = panels(&d);
    let query = |p: &Value| {
        p["targets"][0]["query"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let slow_peer = ps
        .iter()
        .find(|p| query(p).contains("span.mvproxy.route = \"peer\""))
        .expect("a panel of peer-routed traces");
    // slowest first
    assert_eq!(
        slow_peer["transformations"][0]["id"], "sortBy",
        "{slow_peer}"
    );
    assert_eq!(
        slow_peer["transformations"][0]["options"]["sort"][0]["desc"],
        true
    );
    assert!(
        ps.iter().any(|p| query(p).contains("status = error")),
        "no failed-traces panel"
    );
    assert!(
        ps.iter()
            .any(|p| p["type"] == "nodeGraph" && p["targets"][0]["queryType"] == "serviceMap"),
        "no service graph"
    );
    // Every span attribute a TraceQL query filters on is one mvproxy puts on its spans.
    let attrs = contract_span_attributes();
    for p in &ps {
        let q = query(p);
        for word in q.split(|c: char| c.is_whitespace() || c == '{' || c == '}') {
            if let Some(attr) = word.strip_prefix("span.") {
                assert!(
                    attrs.contains(attr),
                    "TraceQL attribute {attr} is not in README.md's span attributes: {q}"
                );
            }
        }
    }
}

/// The span attribute names the README's telemetry contract lists ("Attributes: …").
fn contract_span_attributes() -> BTreeSet<String> {
    let readme = read("README.md");
    let start = readme
        .find("Attributes: ")
        .expect("README.md lists span attributes");
    let rest = &readme[start..];
    let end = rest.find("Cache lookups").unwrap_or(rest.len());
    let attrs: BTreeSet<String> = rest[..end]
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| w.contains('.'))
        .map(str::to_owned)
        .collect();
    assert!(
        attrs.contains("mvproxy.route") && attrs.len() >= 12,
        "{attrs:?}"
    );
    attrs
}

#[test]
fn datasource_provisioning_links_exemplars_traces_and_metrics() {
    let ds = yaml("dashboards/provisioning/datasources/mvproxy.yaml");
    let all = seq(&ds["datasources"]);
    let by_type = |t: &str| {
        all.iter()
            .find(|d| s(&d["type"]) == t)
            .cloned()
            .unwrap_or_else(|| panic!("no {t} datasource"))
    };
    let (prom, tempo, jaeger) = (by_type("prometheus"), by_type("tempo"), by_type("jaeger"));
    let (prom_uid, tempo_uid) = (s(&prom["uid"]), s(&tempo["uid"]));
    // Exemplars: the label is `trace_id` (README.md: exemplars carry the sampled `trace_id`, and what
    // the spanmetrics connector emits) and one destination is the Tempo datasource.
    let dests = seq(&prom["jsonData"]["exemplarTraceIdDestinations"]);
    assert!(
        dests
            .iter()
            .any(|d| s(&d["name"]) == "trace_id" && s(&d["datasourceUid"]) == tempo_uid),
        "{dests:?}"
    );
    assert!(read("README.md").contains("exemplars carry the sampled `trace_id`"));
    assert_eq!(
        s(&tempo["jsonData"]["tracesToMetrics"]["datasourceUid"]),
        prom_uid
    );
    assert_eq!(
        s(&tempo["jsonData"]["serviceMap"]["datasourceUid"]),
        prom_uid
    );
    assert!(!seq(&tempo["jsonData"]["tracesToMetrics"]["queries"]).is_empty());
    assert_eq!(
        s(&jaeger["jsonData"]["tracesToMetrics"]["datasourceUid"]),
        prom_uid
    );
    // Trace-to-metrics tags map span attributes to span-metrics labels.
    let attrs = contract_span_attributes();
    for t in seq(&tempo["jsonData"]["tracesToMetrics"]["tags"]) {
        let key = s(&t["key"]);
        assert!(key == "service.name" || attrs.contains(key), "tag {key}");
        assert_eq!(s(&t["value"]), key.replace('.', "_"), "tag {key}");
    }
    // The dashboard provider reads where compose mounts the dashboards.
    let provider = yaml("dashboards/provisioning/dashboards/mvproxy.yaml");
    let path = s(&provider["providers"][0]["options"]["path"]).to_owned();
    let compose = yaml("deploy/compose.yaml");
    let mounts: Vec<String> = seq(&compose["services"]["grafana"]["volumes"])
        .iter()
        .map(|v| s(v).to_owned())
        .collect();
    assert!(
        mounts
            .iter()
            .any(|m| m.starts_with("../dashboards:") && m.contains(&format!(":{path}"))),
        "{mounts:?} does not mount the dashboards at {path}"
    );
    assert!(
        mounts
            .iter()
            .any(|m| m.starts_with("../dashboards/provisioning:/etc/grafana/provisioning")),
        "{mounts:?}"
    );
}

/// Seconds of a collector duration string (`5ms`, `1s`).
fn duration_secs(d: &str) -> f64 {
    let (num, scale) = if let Some(n) = d.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = d.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = d.strip_suffix('s') {
        (n, 1.0)
    } else {
        panic!("not a duration: {d}")
    };
    num.parse::<f64>().unwrap_or_else(|e| panic!("{d}: {e}")) * scale
}

fn buckets(v: &serde_yaml_ng::Value) -> Vec<f64> {
    seq(v).iter().map(|b| duration_secs(s(b))).collect()
}

fn same_buckets(got: &[f64], want: &[f64]) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-12)
}

/// Prometheus names of the spanmetrics connector's metrics for `config`'s namespace and unit
/// (observability-notes §3.1: dots become underscores, then the unit and type suffixes).
fn spanmetrics_names(spanmetrics: &serde_yaml_ng::Value) -> BTreeSet<String> {
    let prefix = s(&spanmetrics["namespace"]).replace('.', "_");
    let unit = match s(&spanmetrics["histogram"]["unit"]) {
        "ms" => "milliseconds",
        "s" => "seconds",
        other => panic!("spanmetrics unit {other:?}"),
    };
    let mut names = BTreeSet::from([format!("{prefix}_calls_total")]);
    for suffix in ["bucket", "sum", "count"] {
        names.insert(format!("{prefix}_duration_{unit}_{suffix}"));
    }
    names
}

/// servicegraph connector metric names (contrib README), as Prometheus names.
fn servicegraph_names() -> BTreeSet<String> {
    let mut names = BTreeSet::from([
        "traces_service_graph_request_total".to_owned(),
        "traces_service_graph_request_failed_total".to_owned(),
        "traces_service_graph_unpaired_spans_total".to_owned(),
        "traces_service_graph_dropped_spans_total".to_owned(),
    ]);
    for side in ["server", "client"] {
        for suffix in ["bucket", "sum", "count"] {
            names.insert(format!(
                "traces_service_graph_request_{side}_seconds_{suffix}"
            ));
        }
    }
    names
}

#[test]
fn collector_config_is_wired_and_matches_mvproxy() {
    let c = yaml("otel-collector/config.yaml");
    let defined = |section: &str| -> BTreeSet<String> { keys(&c[section]).into_iter().collect() };
    let (receivers, processors, exporters, connectors) = (
        defined("receivers"),
        defined("processors"),
        defined("exporters"),
        defined("connectors"),
    );
    let pipelines = c["service"]["pipelines"]
        .as_mapping()
        .expect("pipelines")
        .clone();
    let mut as_exporter: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut as_receiver: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut used = BTreeSet::new();
    for (name, p) in &pipelines {
        let name = s(name).to_owned();
        let kind = name.split('/').next().unwrap_or_default().to_owned();
        assert!(
            ["traces", "metrics", "logs"].contains(&kind.as_str()),
            "pipeline {name}"
        );
        for r in seq(&p["receivers"]) {
            let r = s(&r).to_owned();
            assert!(
                receivers.contains(&r) || connectors.contains(&r),
                "{name}: receiver {r} undefined"
            );
            if connectors.contains(&r) {
                as_receiver.entry(r.clone()).or_default().push(name.clone());
            }
            used.insert(r);
        }
        for x in seq(&p["processors"]) {
            assert!(
                processors.contains(s(&x)),
                "{name}: processor {} undefined",
                s(&x)
            );
            used.insert(s(&x).to_owned());
        }
        for e in seq(&p["exporters"]) {
            let e = s(&e).to_owned();
            assert!(
                exporters.contains(&e) || connectors.contains(&e),
                "{name}: exporter {e} undefined"
            );
            if connectors.contains(&e) {
                as_exporter.entry(e.clone()).or_default().push(name.clone());
            }
            used.insert(e);
        }
    }
    for comp in receivers
        .iter()
        .chain(&processors)
        .chain(&exporters)
        .chain(&connectors)
    {
        assert!(used.contains(comp), "{comp} is defined but in no pipeline");
    }
    // A connector leaves one pipeline and enters another.
    for conn in &connectors {
        let (from, to) = (&as_exporter[conn], &as_receiver[conn]);
        assert!(
            from.iter().any(|f| to.iter().any(|t| t != f)),
            "{conn}: {from:?} → {to:?}"
        );
    }
    let pipeline_of = |conn: &str, map: &BTreeMap<String, Vec<String>>| map[conn].clone();
    for conn in ["spanmetrics", "servicegraph"] {
        assert!(
            pipeline_of(conn, &as_exporter)
                .iter()
                .all(|p| p.starts_with("traces")),
            "{conn}"
        );
        assert!(
            pipeline_of(conn, &as_receiver)
                .iter()
                .all(|p| p.starts_with("metrics")),
            "{conn}"
        );
    }
    // RED metrics from every span: no sampling before the connectors.
    for (name, p) in &pipelines {
        let exports: Vec<String> = seq(&p["exporters"])
            .iter()
            .map(|e| s(e).to_owned())
            .collect();
        if exports
            .iter()
            .any(|e| e == "spanmetrics" || e == "servicegraph")
        {
            assert!(
                !seq(&p["processors"])
                    .iter()
                    .any(|x| s(x).starts_with("tail_sampling")),
                "{}: spanmetrics after tail sampling counts only sampled traces",
                s(name)
            );
        }
    }

    let otlp = &c["receivers"]["otlp"]["protocols"];
    assert!(otlp["grpc"]["endpoint"].is_string() && otlp["http"]["endpoint"].is_string());
    assert!(processors.contains("batch"));

    let sm = &c["connectors"]["spanmetrics"];
    let want: Vec<f64> = REQUEST_BUCKETS.to_vec();
    let got = buckets(&sm["histogram"]["explicit"]["buckets"]);
    assert!(
        same_buckets(&got, &want),
        "spanmetrics buckets {got:?} != REQUEST_BUCKETS {want:?}"
    );
    assert!(same_buckets(
        &buckets(&c["connectors"]["servicegraph"]["latency_histogram_buckets"]),
        &want
    ));
    assert_eq!(
        s(&sm["histogram"]["unit"]),
        "ms",
        "unit pinned (the default is moving to s)"
    );
    assert_eq!(
        s(&sm["namespace"]),
        "traces.span.metrics",
        "namespace pinned"
    );
    assert_eq!(sm["exemplars"]["enabled"].as_bool(), Some(true));
    let dims: BTreeSet<String> = seq(&sm["dimensions"])
        .iter()
        .map(|d| s(&d["name"]).to_owned())
        .collect();
    let attrs = contract_span_attributes();
    for want in [
        "mvproxy.route",
        "mvproxy.peer",
        "k8s.api.group",
        "k8s.api.resource",
    ] {
        assert!(dims.contains(want), "dimension {want} missing: {dims:?}");
    }
    for d in &dims {
        assert!(
            attrs.contains(d),
            "dimension {d} is not a span attribute of README.md"
        );
    }

    // Tail sampling: errors, slow (> 500 ms), peer-routed, plus a small share of the rest.
    let policies = seq(&c["processors"]["tail_sampling"]["policies"]);
    let policy = |ty: &str| {
        policies
            .iter()
            .find(|p| s(&p["type"]) == ty)
            .cloned()
            .unwrap_or_else(|| panic!("no {ty} policy"))
    };
    assert_eq!(
        seq(&policy("status_code")["status_code"]["status_codes"])
            .iter()
            .map(|c| s(c).to_owned())
            .collect::<Vec<_>>(),
        ["ERROR"]
    );
    assert_eq!(
        policy("latency")["latency"]["threshold_ms"].as_u64(),
        Some(500)
    );
    let peer = policy("string_attribute");
    assert_eq!(s(&peer["string_attribute"]["key"]), "mvproxy.route");
    assert!(attrs.contains(s(&peer["string_attribute"]["key"])));
    assert_eq!(
        seq(&peer["string_attribute"]["values"])
            .iter()
            .map(|c| s(c).to_owned())
            .collect::<Vec<_>>(),
        ["peer"]
    );
    let pct = policy("probabilistic")["probabilistic"]["sampling_percentage"]
        .as_f64()
        .unwrap_or(0.0);
    assert!(pct > 0.0 && pct <= 10.0, "baseline {pct}%");

    // Out to Tempo and Jaeger over OTLP, and to Prometheus with exemplars (OpenMetrics).
    let compose = yaml("deploy/compose.yaml");
    let services = keys(&compose["services"]);
    for (exp, host) in [("otlp/tempo", "tempo"), ("otlp/jaeger", "jaeger")] {
        let ep = s(&c["exporters"][exp]["endpoint"]);
        assert_eq!(ep, format!("{host}:4317"), "{exp}");
        assert!(services.contains(&host.to_owned()), "compose has no {host}");
    }
    assert_eq!(
        c["exporters"]["prometheus"]["enable_open_metrics"].as_bool(),
        Some(true)
    );
    let prom_ep = s(&c["exporters"]["prometheus"]["endpoint"]);
    let port = prom_ep.rsplit(':').next().unwrap_or_default();
    assert!(
        read("deploy/prometheus/prometheus.yml").contains(&format!("otel-collector:{port}")),
        "Prometheus does not scrape the collector's exporter on {port}"
    );
}

#[test]
fn span_metrics_queries_use_the_collector_names_and_labels() {
    let c = yaml("otel-collector/config.yaml");
    let sm = &c["connectors"]["spanmetrics"];
    let span_names = spanmetrics_names(sm);
    assert!(span_names.contains("traces_span_metrics_duration_milliseconds_bucket"));
    let mut span_labels: BTreeSet<String> = [
        "service_name",
        "span_name",
        "span_kind",
        "status_code",
        "le",
        "job",
        "instance",
    ]
    .map(str::to_owned)
    .into();
    for d in seq(&sm["dimensions"]) {
        span_labels.insert(s(&d["name"]).replace('.', "_"));
    }
    let mut graph_labels: BTreeSet<String> = [
        "client",
        "server",
        "connection_type",
        "failed",
        "le",
        "job",
        "instance",
    ]
    .map(str::to_owned)
    .into();
    for d in seq(&c["connectors"]["servicegraph"]["dimensions"]) {
        let d = s(&d).replace('.', "_");
        graph_labels.insert(format!("client_{d}"));
        graph_labels.insert(format!("server_{d}"));
    }
    let graph_names = servicegraph_names();
    let mut seen = 0;
    for e in dashboard_exprs().iter().chain(&provisioning_exprs()) {
        let r: Refs = refs(&e.expr);
        let traces: Vec<_> = r
            .selectors
            .iter()
            .filter(|s| s.metric.starts_with("traces_"))
            .collect();
        if traces.is_empty() {
            continue;
        }
        seen += 1;
        let mut allowed = BTreeSet::new();
        for sel in &traces {
            let labels = if span_names.contains(&sel.metric) {
                &span_labels
            } else if graph_names.contains(&sel.metric) {
                &graph_labels
            } else {
                panic!(
                    "{}: {} is not a name the collector config produces ({span_names:?}, {graph_names:?})",
                    e.origin, sel.metric
                )
            };
            for l in &sel.labels {
                assert!(
                    labels.contains(l),
                    "{}: label {l} not on {}",
                    e.origin,
                    sel.metric
                );
            }
            allowed.extend(labels.iter().cloned());
        }
        for l in r.grouping.iter().chain(legend_labels(&e.legend).iter()) {
            assert!(
                allowed.contains(l),
                "{}: label {l} is not on the span metrics",
                e.origin
            );
        }
    }
    assert!(seen >= 15, "only {seen} span-metrics expressions found");
    // Variables of the span-metrics dashboard list label values the connector produces.
    let d = dashboard("dashboards/span-metrics.json");
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        if v["type"] == "query" {
            let (_, label) = label_values(v["query"]["query"].as_str().unwrap_or_default())
                .expect("label_values");
            assert!(
                span_labels.contains(&label),
                "variable {}: {label}",
                v["name"]
            );
        }
    }
}

/// `{{label}}` names of a legend format.
fn legend_labels(legend: &str) -> Vec<String> {
    legend
        .split("{{")
        .skip(1)
        .filter_map(|p| p.split_once("}}").map(|(l, _)| l.trim().to_owned()))
        .collect()
}

#[test]
fn compose_stack_is_pinned_and_wired_to_the_repository_files() {
    let compose = yaml("deploy/compose.yaml");
    let services = compose["services"].as_mapping().expect("services").clone();
    let mut images = Vec::new();
    for (name, svc) in &services {
        let name = s(name);
        let image = s(&svc["image"]);
        let (repo_part, tag) = image
            .rsplit_once(':')
            .unwrap_or_else(|| panic!("{name}: image {image} has no tag"));
        assert!(
            !repo_part.is_empty() && tag != "latest" && tag.chars().any(|c| c.is_ascii_digit()),
            "{name}: {image} is not pinned"
        );
        images.push(repo_part.to_owned());
        for v in seq(&svc["volumes"]) {
            let src = s(&v).split(':').next().unwrap_or_default();
            if src.starts_with('.') {
                assert!(
                    repo().join("deploy").join(src).exists(),
                    "{name}: mounts missing {src}"
                );
            }
        }
        for p in seq(&svc["ports"]) {
            assert!(
                s(&p).starts_with("127.0.0.1:"),
                "{name}: port {} not on loopback",
                s(&p)
            );
        }
    }
    for want in [
        "otel/opentelemetry-collector-contrib",
        "grafana/grafana",
        "grafana/tempo",
        "jaegertracing/jaeger",
        "prom/prometheus",
    ] {
        assert!(
            images.iter().any(|i| i == want),
            "{want} not in the stack: {images:?}"
        );
    }
    let collector = &compose["services"]["otel-collector"];
    let config_arg = seq(&collector["command"])
        .iter()
        .map(|a| s(a).to_owned())
        .find(|a| a.starts_with("--config="))
        .expect("--config");
    let in_container = config_arg.trim_start_matches("--config=");
    assert!(
        seq(&collector["volumes"])
            .iter()
            .any(|v| s(v) == format!("../otel-collector/config.yaml:{in_container}:ro")),
        "the collector does not mount otel-collector/config.yaml at {in_container}"
    );
    let prom_cmd: Vec<String> = seq(&compose["services"]["prometheus"]["command"])
        .iter()
        .map(|a| s(a).to_owned())
        .collect();
    assert!(
        prom_cmd.contains(&"--enable-feature=exemplar-storage".to_owned()),
        "{prom_cmd:?}"
    );
    // Hosts the configs name are services of the stack.
    let names: BTreeSet<String> = keys(&compose["services"]).into_iter().collect();
    let ds = read("dashboards/provisioning/datasources/mvproxy.yaml");
    for host in ["prometheus:9090", "tempo:3200", "jaeger:16686"] {
        assert!(ds.contains(&format!("http://{host}")), "datasource {host}");
        assert!(names.contains(host.split(':').next().unwrap_or_default()));
    }
    assert!(names.contains("otel-collector"));
}

/// Every config the Kubernetes manifests ship, with kubeadm's pki paths replaced by `pki`.
fn kubernetes_configs(pki: &Path) -> Vec<(String, String)> {
    let fix = |t: &str| t.replace("/etc/kubernetes/pki/", &format!("{}/", pki.display()));
    let mut out = vec![(
        "static-pod/config.yaml".to_owned(),
        fix(&read("deploy/kubernetes/static-pod/config.yaml")),
    )];
    for doc in yaml_docs("deploy/kubernetes/configmap.yaml") {
        for (k, v) in doc["data"].as_mapping().into_iter().flatten() {
            out.push((format!("configmap {}", s(k)), fix(s(v))));
        }
    }
    out
}

async fn check_config(dir: &Path, text: &str) -> (i32, String) {
    let path = dir.join("config.yaml");
    std::fs::write(&path, text).expect("write config");
    let out = tokio::time::timeout(
        PATIENCE,
        tokio::process::Command::new(mvproxy_bin())
            .args(["check-config", "--config"])
            .arg(&path)
            .output(),
    )
    .await
    .expect("check-config hung")
    .expect("run mvproxy");
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test]
async fn kubernetes_manifests_use_kubeadm_paths_and_configs_mvproxy_accepts() {
    // RBAC: read identity Leases in kube-system and EndpointSlices in default.
    let rbac = yaml_docs("deploy/kubernetes/rbac.yaml");
    let kind = |k: &str| {
        rbac.iter()
            .filter(|d| s(&d["kind"]) == k)
            .cloned()
            .collect::<Vec<_>>()
    };
    let sa = &kind("ServiceAccount")[0];
    let sa_name = s(&sa["metadata"]["name"]).to_owned();
    let roles = kind("Role");
    for (ns, group, resource) in [
        ("kube-system", "coordination.k8s.io", "leases"),
        ("default", "discovery.k8s.io", "endpointslices"),
    ] {
        let role = roles
            .iter()
            .find(|r| {
                s(&r["metadata"]["namespace"]) == ns
                    && seq(&r["rules"])
                        .iter()
                        .any(|rule| seq(&rule["resources"]).iter().any(|x| s(x) == resource))
            })
            .unwrap_or_else(|| panic!("no Role for {resource} in {ns}"));
        let rule = &seq(&role["rules"])[0];
        assert_eq!(s(&seq(&rule["apiGroups"])[0]), group);
        let verbs: BTreeSet<String> = seq(&rule["verbs"])
            .iter()
            .map(|v| s(v).to_owned())
            .collect();
        assert_eq!(
            verbs,
            ["get", "list", "watch"].map(str::to_owned).into(),
            "read-only {resource}"
        );
        let role_name = s(&role["metadata"]["name"]);
        assert!(
            kind("RoleBinding")
                .iter()
                .any(|b| s(&b["roleRef"]["name"]) == role_name
                    && s(&b["metadata"]["namespace"]) == ns
                    && seq(&b["subjects"]).iter().any(|x| s(&x["name"]) == sa_name
                        && s(&x["namespace"]) == s(&sa["metadata"]["namespace"]))),
            "{role_name} not bound to the ServiceAccount"
        );
    }
    // The proxy beside each API server: the DaemonSet (with the ServiceAccount and ConfigMap)
    // and the static pod, both on the host network with kubeadm's pki, pinned to this version.
    let version = env!("CARGO_PKG_VERSION");
    let ds = &yaml_docs("deploy/kubernetes/daemonset.yaml")[0];
    let static_pod = &yaml_docs("deploy/kubernetes/static-pod/mvproxy.yaml")[0];
    assert_eq!(
        s(&ds["spec"]["template"]["spec"]["serviceAccountName"]),
        sa_name
    );
    for spec in [&ds["spec"]["template"]["spec"], &static_pod["spec"]] {
        assert_eq!(spec["hostNetwork"].as_bool(), Some(true));
        let container = &seq(&spec["containers"])[0];
        assert_eq!(s(&container["image"]), format!("mvproxy:{version}"));
        assert!(
            seq(&spec["volumes"])
                .iter()
                .any(|v| s(&v["hostPath"]["path"]) == "/etc/kubernetes/pki")
        );
        assert_eq!(s(&seq(&container["args"])[0]), "serve");
    }
    let cm = &yaml_docs("deploy/kubernetes/configmap.yaml")[0];
    assert!(
        seq(&ds["spec"]["template"]["spec"]["volumes"])
            .iter()
            .any(|v| s(&v["configMap"]["name"]) == s(&cm["metadata"]["name"])),
        "the DaemonSet does not mount the ConfigMap"
    );

    // Each shipped config is one mvproxy accepts, with the kubeadm defaults for the peer CA
    // and the front-proxy client certificate.
    let pki = TempDir::new("pki");
    for f in [
        "ca.crt",
        "apiserver.crt",
        "apiserver.key",
        "front-proxy-client.crt",
        "front-proxy-client.key",
    ] {
        std::fs::write(pki.path().join(f), "placeholder").expect("pki file");
    }
    let dir = TempDir::new("k8s-config");
    let configs = kubernetes_configs(pki.path());
    assert!(configs.len() >= 4, "{configs:?}");
    for (name, text) in &configs {
        assert!(
            text.contains(&format!("peer-ca-file: {}/ca.crt", pki.path().display())),
            "{name}"
        );
        assert!(
            text.contains(&format!(
                "proxy-client-cert-file: {}/front-proxy-client.crt",
                pki.path().display()
            )),
            "{name}"
        );
        let (code, out) = check_config(dir.path(), text).await;
        assert_eq!(code, 0, "{name}: {out}");
        assert!(out.contains("valid"), "{name}: {out}");
    }
    // Switching a shipped config to a cluster peer source or to front-proxy identity: what
    // must change is refused with the field named, and the changed config is valid.
    let (_, base) = &configs[0];
    for (line, field) in [
        ("peer-source: leases", "peer:"),
        ("peer-source: endpointslices", "peer:"),
        ("identity: front-proxy", "client-ca-file:"),
    ] {
        let (code, out) = check_config(dir.path(), &format!("{base}\n{line}\n")).await;
        assert_eq!(code, 2, "{line}: {out}");
        assert!(out.contains(field), "{out}");
    }
    let without_peers: String = base
        .lines()
        .take_while(|l| !l.starts_with("peers:"))
        .chain(
            base.lines()
                .skip_while(|l| !l.starts_with("peers:"))
                .skip(1)
                .skip_while(|l| l.starts_with("  - ")),
        )
        .map(|l| format!("{l}\n"))
        .collect();
    let (code, out) =
        check_config(dir.path(), &format!("{without_peers}peer-source: leases\n")).await;
    assert_eq!(code, 0, "{without_peers}: {out}");
    let ca = format!("{}/ca.crt", pki.path().display());
    let (code, out) = check_config(
        dir.path(),
        &format!("{base}\nidentity: front-proxy\nclient-ca-file: {ca}\nrequestheader-client-ca-file: {ca}\nrequestheader-allowed-names: [front-proxy-client]\n"),
    )
    .await;
    assert_eq!(code, 0, "{out}");

    let kubeadm = yaml_docs("deploy/kubernetes/kubeadm-config.yaml");
    let cluster = kubeadm
        .iter()
        .find(|d| s(&d["kind"]) == "ClusterConfiguration")
        .expect("ClusterConfiguration");
    assert!(
        seq(&cluster["apiServer"]["extraArgs"])
            .iter()
            .any(|a| s(&a["name"]) == "peer-ca-file"
                && s(&a["value"]) == "/etc/kubernetes/pki/ca.crt"),
        "{cluster:?}"
    );
    assert!(kubeadm.iter().any(|d| s(&d["kind"]) == "InitConfiguration"
        && d["localAPIEndpoint"]["advertiseAddress"].is_string()));
}

/// Requests that exercise every route: local, peer, merged discovery, nopeer, a 404 from the
/// local server, a non-resource path.
async fn healthy_traffic(c: &Cluster) {
    let a = c.proxy_a.url();
    for (path, accept, want) in [
        (
            "/api/v1/namespaces/default/pods",
            "application/json",
            StatusCode::OK,
        ),
        (OLD_ONLY, "application/json", StatusCode::OK),
        (NEW_ONLY, "application/json", StatusCode::OK),
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
    let c = Cluster::start().await;
    let targets = vec![c.proxy_a.admin.to_string(), c.proxy_b.admin.to_string()];
    let prom = Prometheus::start(&targets, &[repo().join("deploy/prometheus/rules.yml")]).await;
    for _ in 0..3 {
        healthy_traffic(&c).await;
        tokio::time::sleep(Duration::from_millis(700)).await;
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
        let r = get(
            &format!("{}/api/v1/namespaces/default/pods", proxy_a.url()),
            &[],
        )
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
    proxy_a.terminate().await;
}

/// The image tag deploy/compose.yaml pins for `service`.
fn compose_tag(service: &str) -> String {
    let compose = yaml("deploy/compose.yaml");
    let image = s(&compose["services"][service]["image"]).to_owned();
    image
        .rsplit_once(':')
        .map(|(_, tag)| tag.to_owned())
        .unwrap_or_else(|| panic!("{service}: image {image} has no tag"))
}

#[test]
fn builder_manifest_lists_exactly_the_components_config_yaml_uses_at_the_compose_release() {
    // A component's module ends in its type plus the kind (otlpreceiver, memorylimiterprocessor);
    // the config names the type, with underscores (memory_limiter) and an optional /name.
    let c = yaml("otel-collector/config.yaml");
    let m = yaml("otel-collector/builder-config.yaml");
    let release = compose_tag("otel-collector");
    assert_eq!(s(&m["dist"]["version"]), release, "dist.version");
    for (kind, suffix) in [
        ("receivers", "receiver"),
        ("processors", "processor"),
        ("exporters", "exporter"),
        ("connectors", "connector"),
    ] {
        let used: BTreeSet<String> = keys(&c[kind])
            .iter()
            .map(|k| k.split('/').next().unwrap_or_default().replace('_', ""))
            .collect();
        let mut listed = BTreeSet::new();
        for entry in seq(&m[kind]) {
            let gomod = s(&entry["gomod"]);
            let (path, version) = gomod
                .split_once(' ')
                .unwrap_or_else(|| panic!("{kind}: {gomod:?} has no version"));
            assert_eq!(
                version,
                format!("v{release}"),
                "{path}: not the compose release"
            );
            let last = path.rsplit('/').next().unwrap_or_default();
            let ty = last
                .strip_suffix(suffix)
                .unwrap_or_else(|| panic!("{path}: not a {suffix} module"));
            listed.insert(ty.to_owned());
        }
        assert_eq!(listed, used, "{kind}: manifest vs config.yaml");
    }
    // The build script builds the versions compose.yaml runs.
    let build = read("scripts/telemetry-backends/build.sh");
    assert!(
        build.contains(&format!("OTELCOL_VERSION={release}\n")),
        "build.sh's OTELCOL_VERSION is not {release}"
    );
    let jaeger = compose_tag("jaeger");
    assert!(
        build.contains(&format!("JAEGER_VERSION={jaeger} ")),
        "build.sh's JAEGER_VERSION is not {jaeger}"
    );
}
