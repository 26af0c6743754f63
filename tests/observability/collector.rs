//! The OpenTelemetry collector config: wired to mvproxy's spans and metric names, its
//! span-metrics queries on the collector's own names, and its builder manifest at the
//! compose release.

use super::*;

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
/// (the Prometheus exporter's translation, opentelemetry-collector-contrib
/// `pkg/translator/prometheus`: dots become underscores, then the unit and type suffixes).
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
            "dimension {d} is not a span attribute of docs/telemetry.md"
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
