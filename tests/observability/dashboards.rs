//! The Grafana dashboards: well-formed, documented, on provisioned datasources, with the
//! panels the traces view needs, and the provisioning that links exemplars, traces and metrics.

use super::*;

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
                    "TraceQL attribute {attr} is not in docs/telemetry.md's span attributes: {q}"
                );
            }
        }
    }
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
    // Exemplars: the label is `trace_id` (docs/telemetry.md: exemplars carry the sampled `trace_id`, and what
    // the spanmetrics connector emits) and one destination is the Tempo datasource.
    let dests = seq(&prom["jsonData"]["exemplarTraceIdDestinations"]);
    assert!(
        dests
            .iter()
            .any(|d| s(&d["name"]) == "trace_id" && s(&d["datasourceUid"]) == tempo_uid),
        "{dests:?}"
    );
    assert!(read("docs/telemetry.md").contains("exemplars carry the sampled `trace_id`"));
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
