//! The observability pack against the proxy it observes: every PromQL expression of the
//! dashboards, rules and datasource provisioning parses (promtool); every metric they name is
//! in a live scrape of a two-release cluster after real traffic; the overview's queries return
//! data from a real Prometheus scraping that cluster; the rules pass their unit tests; and the
//! dashboards, collector config, compose stack and Kubernetes manifests hold together.
//!
//! What cannot run here (Grafana, the collector, Tempo, Jaeger: no binaries on these machines)
//! is checked structurally against the naming the collector documents and docs/telemetry.md's span
//! attributes.
//!
//! One file per topic: [`promql`] (promtool parses every expression, the rules' unit tests),
//! [`dashboards`] (panels, datasources, docs/telemetry.md's span attributes), [`collector`] (the
//! collector config and its builder manifest), [`deploy`] (compose and Kubernetes
//! manifests, checked by `mvproxy check-config`) read files and start no proxy; [`live`] is
//! the one test that scrapes a running two-release cluster with a real Prometheus.

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

/// The families of docs/telemetry.md's metric table.
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

/// The PromQL of every dashboard target, annotation and variable query, as written.
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
        for (i, a) in d["annotations"]["list"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            if let Some(e) = a["expr"].as_str() {
                out.push(Expr {
                    origin: format!("{rel} annotation {:?}", a["name"]),
                    key: format!("check:{stem}:annotation_{i}"),
                    expr: e.to_owned(),
                    legend: a["titleFormat"].as_str().unwrap_or_default().to_owned(),
                });
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
mod collector;
mod dashboards;
mod deploy;
mod live;
mod promql;

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

/// The span attribute names the telemetry contract (docs/telemetry.md) lists ("Server span attributes: …", then the client span's).
fn contract_span_attributes() -> BTreeSet<String> {
    let readme = read("docs/telemetry.md");
    let start = readme
        .find("Server span attributes: ")
        .expect("docs/telemetry.md lists span attributes");
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

/// `{{label}}` names of a legend format.
fn legend_labels(legend: &str) -> Vec<String> {
    legend
        .split("{{")
        .skip(1)
        .filter_map(|p| p.split_once("}}").map(|(l, _)| l.trim().to_owned()))
        .collect()
}
