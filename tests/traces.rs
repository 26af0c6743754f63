//! One trace across the peer hop, exported over OTLP (gRPC and HTTP/protobuf) to a receiver
//! that decodes with the official protobufs; the sampled flag honoured end to end; a dead
//! collector never slowing a request; counters, stand-in logs and spans reconciling; spans
//! queued at SIGTERM exported before exit on the one-thread runtime.

use std::time::{Duration, Instant};

use http::StatusCode;
use integration::otlp::{KIND_CLIENT, KIND_INTERNAL, KIND_SERVER, Receiver, Span};
use integration::*;

use crate::cluster::{Cluster, object};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// The client's sampled `traceparent`: trace [`TRACE`], parent span [`CLIENT_SPAN`].
/// A client's `User-Agent`, as `user_agent.original` on the server span.
const AGENT: &str = "kubectl/v1.35.0 (linux/amd64) kubernetes/66452049";

fn client_traceparent() -> String {
    format!("00-{TRACE}-{CLIENT_SPAN}-01")
}

/// `GET url` as a client in trace [`TRACE`] (sampled), answered.
async fn get_in_trace(url: &str) -> Resp {
    get(url, &[("traceparent", &client_traceparent())])
        .await
        .unwrap()
}

fn otel_env(receiver: &Receiver, grpc: bool) -> Vec<(&'static str, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint()),
        (
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            if grpc { "grpc" } else { "http/protobuf" }.to_owned(),
        ),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
    ]
}

fn env_refs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

fn in_trace(spans: &[Span], trace: &str) -> Vec<Span> {
    spans
        .iter()
        .filter(|s| s.trace_id == trace)
        .cloned()
        .collect()
}

/// The `spanmetrics` and `servicegraph` dimensions of the shipped collector config.
fn collector_dimensions() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../otel-collector/config.yaml");
    let config: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let connectors = &config["connectors"];
    let mut dims: Vec<String> = connectors["spanmetrics"]["dimensions"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap().to_owned())
        .collect();
    dims.extend(
        connectors["servicegraph"]["dimensions"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|d| d.as_str().unwrap().to_owned()),
    );
    assert!(dims.len() >= 4, "{dims:?}");
    dims
}

fn child_of<'a>(spans: &'a [Span], parent: &str, kind: i32) -> &'a Span {
    let found: Vec<_> = spans
        .iter()
        .filter(|s| s.parent_span_id == parent && s.kind == kind)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one child of {parent} of kind {kind}: {spans:#?}"
    );
    found[0]
}

async fn one_trace_across_the_peer_hop(grpc: bool) {
    let receiver = if grpc {
        Receiver::grpc().await
    } else {
        Receiver::http().await
    };
    let env = otel_env(&receiver, grpc);
    let c = Cluster::start_with_env(&env_refs(&env)).await;
    let traceparent = client_traceparent();
    let r = get(
        &format!("{}{OLD_ONLY}", c.proxy_a.url()),
        &[
            ("traceparent", &traceparent),
            ("tracestate", "vendor=1"),
            ("user-agent", AGENT),
        ],
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());

    let spans = receiver
        .wait_for("the four spans of the peer hop", |s| {
            in_trace(s, TRACE).len() >= 4
        })
        .await;
    let trace = in_trace(&spans, TRACE);
    assert_eq!(trace.len(), 4, "{trace:#?}");

    // client → A SERVER → A CLIENT (peer hop) → B SERVER → B CLIENT → apiserver-b
    let a_server = child_of(&trace, CLIENT_SPAN, KIND_SERVER);
    let a_client = child_of(&trace, &a_server.span_id, KIND_CLIENT);
    let b_server = child_of(&trace, &a_client.span_id, KIND_SERVER);
    let b_client = child_of(&trace, &b_server.span_id, KIND_CLIENT);
    let at_b = requests_for(&c.b, "podschedulingcontexts");
    assert_eq!(
        at_b[0].headers["traceparent"],
        format!("00-{TRACE}-{}-01", b_client.span_id),
        "the API server's parent is B's client span"
    );
    assert_eq!(
        at_b[0].headers["tracestate"], "vendor=1",
        "tracestate travels along"
    );

    assert_eq!(
        a_server.name,
        "GET /apis/{group}/{version}/namespaces/{namespace}/{resource}"
    );
    assert_eq!(a_server.service, "mvproxy");
    for (k, v) in [
        ("http.request.method", "GET"),
        ("url.path", OLD_ONLY),
        (
            "http.route",
            "/apis/{group}/{version}/namespaces/{namespace}/{resource}",
        ),
        ("http.response.status_code", "200"),
        ("server.address", "127.0.0.1"),
        ("k8s.api.group", "resource.k8s.io"),
        ("k8s.api.version", "v1alpha3"),
        ("k8s.api.resource", "podschedulingcontexts"),
        ("k8s.namespace.name", "default"),
        ("mvproxy.route", "peer"),
        ("mvproxy.reason", "peer_only"),
        ("mvproxy.peer", "apiserver-b"),
        ("mvproxy.server_id", "apiserver-a"),
        ("url.scheme", "http"),
        ("network.protocol.version", "1.1"),
        ("user_agent.original", AGENT),
        ("client.address", "127.0.0.1"),
        ("k8s.api.verb", "list"),
    ] {
        assert_eq!(a_server.attr(k), v, "A server span {k}: {a_server:#?}");
    }
    assert!(
        a_server.attr("client.port").parse::<u16>().is_ok(),
        "{a_server:#?}"
    );
    assert_eq!(
        a_server.attr("server.port"),
        c.proxy_a.listen.port().to_string()
    );
    // every dimension the collector's span metrics group by is on the exported server span
    for dim in collector_dimensions() {
        assert!(
            !a_server.attr(&dim).is_empty(),
            "span metrics dimension {dim} missing: {a_server:#?}"
        );
    }
    assert!(
        a_server.events.contains(&"discovery.lookup".to_owned()),
        "{a_server:#?}"
    );
    assert_eq!(a_client.attr("mvproxy.peer"), "apiserver-b");
    assert_eq!(
        a_client.attr("server.port"),
        c.proxy_b.listen.port().to_string()
    );
    assert_eq!(a_client.attr("http.response.status_code"), "200");
    assert_eq!(
        a_client.attr("url.full"),
        format!("http://127.0.0.1:{}{OLD_ONLY}", c.proxy_b.listen.port())
    );
    assert_eq!(
        b_client.attr("url.full"),
        format!("http://127.0.0.1:{}{OLD_ONLY}", c.b.addr.port())
    );
    assert_eq!(b_server.attr("mvproxy.route"), "local");
    assert_eq!(b_server.attr("mvproxy.reason"), "already_proxied");
    assert_eq!(b_server.attr("mvproxy.server_id"), "apiserver-b");
    assert_eq!(b_client.attr("server.port"), c.b.addr.port().to_string());
    for s in &trace {
        assert_ne!(s.status_code, 2, "no error: {s:#?}");
        let known =
            s.parent_span_id == CLIENT_SPAN || trace.iter().any(|p| p.span_id == s.parent_span_id);
        assert!(known, "orphan span {s:#?}");
    }
}

#[tokio::test]
async fn one_trace_across_the_peer_hop_over_grpc() {
    one_trace_across_the_peer_hop(true).await;
}

#[tokio::test]
async fn one_trace_across_the_peer_hop_over_http_protobuf() {
    one_trace_across_the_peer_hop(false).await;
}

/// Spans still in the export queue when SIGTERM comes go out before the process exits, on the
/// current-thread runtime mvproxy picks on one CPU (`TOKIO_WORKER_THREADS=1` picks it on any
/// machine): the flush at exit waits for the export thread.
async fn spans_queued_at_sigterm_are_exported_on_one_thread(grpc: bool) {
    let receiver = if grpc {
        Receiver::grpc().await
    } else {
        Receiver::http().await
    };
    let a = standin("apiserver-a", &apis_134()).await;
    let mut env = otel_env(&receiver, grpc);
    // no scheduled export during the test: only the flush at exit sends the span
    env.retain(|(k, _)| *k != "OTEL_BSP_SCHEDULE_DELAY");
    env.push(("OTEL_BSP_SCHEDULE_DELAY", "600000".to_owned()));
    env.push(("TOKIO_WORKER_THREADS", "1".to_owned()));
    env.push(("RUST_LOG", "info,mvproxy=debug".to_owned()));
    let p = Proxy::start_with_env(&proxy_args("apiserver-a", &a.url(), &[]), &env_refs(&env)).await;
    p.ready().await;
    let r = get_in_trace(&format!("{}{PODS}", p.url())).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let log = p.log();
    assert!(
        log.iter()
            .any(|l| l.contains("runtime started") && l.contains("CurrentThread")),
        "the current-thread runtime: {log:#?}"
    );
    assert!(
        in_trace(&receiver.spans(), TRACE).is_empty(),
        "nothing exported before SIGTERM"
    );
    let status = p.terminate().await;
    assert!(status.success(), "{status:?}");
    let spans = receiver
        .wait_for("the server and client spans", |s| {
            in_trace(s, TRACE).len() >= 2
        })
        .await;
    let trace = in_trace(&spans, TRACE);
    let server = child_of(&trace, CLIENT_SPAN, KIND_SERVER);
    child_of(&trace, &server.span_id, KIND_CLIENT);
}

#[tokio::test]
async fn spans_queued_at_sigterm_are_exported_on_one_thread_over_grpc() {
    spans_queued_at_sigterm_are_exported_on_one_thread(true).await;
}

#[tokio::test]
async fn spans_queued_at_sigterm_are_exported_on_one_thread_over_http_protobuf() {
    spans_queued_at_sigterm_are_exported_on_one_thread(false).await;
}

#[tokio::test]
async fn an_unsampled_request_exports_nothing_and_stays_unsampled_downstream() {
    let receiver = Receiver::http().await;
    let env = otel_env(&receiver, false);
    let c = Cluster::start_with_env(&env_refs(&env)).await;
    let unsampled = "0af7651916cd43dd8448eb211c80319c";
    let r = get(
        &format!("{}{OLD_ONLY}", c.proxy_a.url()),
        &[(
            "traceparent",
            &format!("00-{unsampled}-b7ad6b7169203331-00"),
        )],
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::OK);
    let tp = requests_for(&c.b, "podschedulingcontexts")[0].headers["traceparent"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        tp.starts_with(&format!("00-{unsampled}-")) && tp.ends_with("-00"),
        "{tp}"
    );

    // A sampled request afterwards: once its spans are in, the unsampled one had its chance.
    let r = get_in_trace(&format!("{}{OLD_ONLY}", c.proxy_a.url())).await;
    assert_eq!(r.status, StatusCode::OK);
    let spans = receiver
        .wait_for("the sampled trace", |s| in_trace(s, TRACE).len() >= 4)
        .await;
    assert!(in_trace(&spans, unsampled).is_empty(), "{spans:#?}");
}

#[tokio::test]
async fn an_invalid_traceparent_starts_a_new_trace() {
    let receiver = Receiver::http().await;
    let env = otel_env(&receiver, false);
    let a = standin("apiserver-a", &apis_134()).await;
    let p = Proxy::start_with_env(&proxy_args("apiserver-a", &a.url(), &[]), &env_refs(&env)).await;
    p.ready().await;
    let r = get(
        &format!("{}{PODS}", p.url()),
        &[(
            "traceparent",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        )],
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::OK);
    let tp = a.requests().last().unwrap().headers["traceparent"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(!tp.contains("00000000000000000000000000000000"), "{tp}");
    let trace = tp.split('-').nth(1).unwrap().to_owned();
    let spans = receiver
        .wait_for("the new trace", |s| in_trace(s, &trace).len() >= 2)
        .await;
    let server = in_trace(&spans, &trace)
        .into_iter()
        .find(|s| s.kind == KIND_SERVER)
        .unwrap();
    assert_eq!(server.parent_span_id, "", "a root span");
}

/// An OTLP endpoint that accepts connections and never answers.
async fn black_hole() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            held.push(s);
        }
    });
    (addr, task)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::test]
async fn a_dead_collector_never_slows_or_fails_a_request() {
    let a = standin("apiserver-a", &apis_134()).await;
    let (hole, hole_task) = black_hole().await;
    let endpoint = format!("http://{hole}");
    let args = proxy_args("apiserver-a", &a.url(), &[]);
    let plain = Proxy::start(&args).await;
    let exporting = Proxy::start_with_env(
        &args,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "10"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "64"),
        ],
    )
    .await;
    plain.ready().await;
    exporting.ready().await;
    let (mut base, mut with_exporter) = (Vec::new(), Vec::new());
    // interleaved, so both see the same machine load
    for _ in 0..60 {
        for (p, out) in [(&plain, &mut base), (&exporting, &mut with_exporter)] {
            let started = Instant::now();
            let r = get(&format!("{}{PODS}", p.url()), &[]).await.unwrap();
            assert_eq!(r.status, StatusCode::OK);
            out.push(started.elapsed());
        }
    }
    let (b, e) = (median(base), median(with_exporter));
    // A request waiting on the exporter would take the exporter's timeout (seconds); a
    // generous ratio keeps machine noise out of the verdict.
    assert!(
        e <= b * 3 + Duration::from_millis(20),
        "median {e:?} with a dead collector vs {b:?} without"
    );
    // What /metrics says meanwhile: nothing exported, the queue full, the rest counted.
    let m = get(&format!("{}/metrics", exporting.admin_url()), &[])
        .await
        .unwrap()
        .text();
    let value = |name: &str| -> f64 {
        m.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{name} in\n{m}"))
    };
    assert_eq!(value("mvproxy_spans_exported_total"), 0.0);
    assert_eq!(value("mvproxy_span_export_queue_capacity"), 64.0);
    assert_eq!(value("mvproxy_span_export_queue_length"), 64.0);
    assert!(value(r#"mvproxy_spans_dropped_total{reason="queue_full"}"#) >= 120.0 - 64.0);
    hole_task.abort();
}

#[tokio::test]
async fn counters_stand_in_logs_and_server_spans_reconcile() {
    let receiver = Receiver::grpc().await;
    let env = otel_env(&receiver, true);
    let a = standin("apiserver-a", &apis_134()).await;
    let b = standin("apiserver-b", &apis_131()).await;
    // the peer is the old API server itself, so no other proxy sends traffic through this one
    let p = Proxy::start_with_env(
        &proxy_args("apiserver-a", &a.url(), &[("apiserver-b", &b.url())]),
        &env_refs(&env),
    )
    .await;
    p.ready().await;
    crate::cluster::wait_all_up(&p).await;
    let before_a = a.requests().len();
    let before_b = b.requests().len();

    let script: &[(&str, StatusCode)] = &[
        (PODS, StatusCode::OK),
        (PODS, StatusCode::OK),
        ("/apis/apps/v1/deployments", StatusCode::OK),
        (OLD_ONLY, StatusCode::OK),
        (OLD_ONLY, StatusCode::OK),
        ("/apis/example.com/v1/widgets", StatusCode::NOT_FOUND),
        ("/version", StatusCode::OK),
    ];
    for (path, want) in script {
        let r = get(&format!("{}{path}", p.url()), &[]).await.unwrap();
        assert_eq!(r.status, *want, "{path}");
    }
    let mut merged = get(
        &format!("{}/apis", p.url()),
        &[(
            "accept",
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        )],
    )
    .await
    .unwrap();
    assert_eq!(merged.status, StatusCode::OK);
    merged = get(
        &format!("{}/apis", p.url()),
        &[(
            "accept",
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        )],
    )
    .await
    .unwrap();
    assert_eq!(merged.status, StatusCode::OK);

    let m = get(&format!("{}/metrics", p.admin_url()), &[])
        .await
        .unwrap()
        .text();
    for line in [
        r#"mvproxy_requests_total{route="local",reason="served_locally",peer="",code="200",method="GET"} 3"#,
        r#"mvproxy_requests_total{route="peer",reason="peer_only",peer="apiserver-b",code="200",method="GET"} 2"#,
        r#"mvproxy_requests_total{route="local",reason="no_peer",peer="",code="404",method="GET"} 1"#,
        r#"mvproxy_requests_total{route="local",reason="non_resource",peer="",code="200",method="GET"} 1"#,
        r#"mvproxy_requests_total{route="discovery",reason="non_resource",peer="",code="200",method="GET"} 2"#,
        r#"mvproxy_rerouted_request_total{code="200",group="resource.k8s.io",version="v1alpha3",resource="podschedulingcontexts"} 2"#,
        r#"mvproxy_discovery_cache_lookups_total{result="hit"} 5"#,
        r#"mvproxy_discovery_cache_lookups_total{result="miss"} 1"#,
        r#"mvproxy_discovery_cache_lookup_duration_seconds_count{result="hit"} 5"#,
        r#"mvproxy_discovery_merges_total{result="miss"} 1"#,
        r#"mvproxy_discovery_merges_total{result="hit"} 1"#,
        r#"mvproxy_discovery_merge_duration_seconds_count 1"#,
        r#"mvproxy_request_duration_seconds_count{route="peer",peer="apiserver-b"} 2"#,
        r#"mvproxy_peer_up{peer="apiserver-b"} 1"#,
        // upstream counts its discovery fetches from peers as rerouted, with no GVR
        r#"mvproxy_rerouted_request_total{code="200",group="",version="",resource=""} "#,
    ] {
        assert!(m.contains(line), "missing {line}\n{m}");
    }
    let counted: u64 = m
        .lines()
        .filter(|l| l.starts_with("mvproxy_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(counted, 9, "every request counted once");

    // What reached the API servers: everything but the two merged /apis answers (mvproxy's
    // own) and the proxy's discovery refreshes (marked by their nopeer Accept).
    let forwarded = |reqs: Vec<RecordedRequest>| {
        reqs.into_iter()
            .filter(|r| {
                !r.headers
                    .get("accept")
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.contains("profile=nopeer"))
            })
            .count()
    };
    let logged =
        forwarded(a.requests().split_off(before_a)) + forwarded(b.requests().split_off(before_b));
    assert_eq!(logged, 7, "requests the stand-ins logged");

    let spans = receiver
        .wait_for("nine server spans", |s| {
            s.iter().filter(|s| s.kind == KIND_SERVER).count() >= 9
        })
        .await;
    let servers = spans.iter().filter(|s| s.kind == KIND_SERVER).count();
    assert_eq!(servers, 9, "one server span per request counted");
    let clients = spans.iter().filter(|s| s.kind == KIND_CLIENT).count();
    assert_eq!(clients, 7, "one client span per upstream attempt");
}

#[tokio::test]
async fn a_peer_routed_request_logs_one_json_line_with_its_trace_and_no_secret() {
    let receiver = Receiver::http().await;
    let env = otel_env(&receiver, false);
    let a = standin("apiserver-a", &apis_134()).await;
    let b = standin("apiserver-b", &apis_131()).await;
    let p = Proxy::start_with_env(
        &proxy_args("apiserver-a", &a.url(), &[("apiserver-b", &b.url())]),
        &env_refs(&env),
    )
    .await;
    p.ready().await;
    crate::cluster::wait_all_up(&p).await;
    let r = get(
        &format!("{}{OLD_ONLY}", p.url()),
        &[
            ("traceparent", &client_traceparent()),
            ("authorization", "Bearer very-secret-token"),
        ],
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::OK);
    let spans = receiver
        .wait_for("the trace", |s| in_trace(s, TRACE).len() >= 2)
        .await;
    let server = in_trace(&spans, TRACE)
        .into_iter()
        .find(|s| s.kind == KIND_SERVER)
        .unwrap();

    let log = p.log();
    let lines: Vec<serde_json::Value> = log
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["fields"]["message"] == "proxied to peer")
        .collect();
    assert_eq!(lines.len(), 1, "one line per proxied request: {log:#?}");
    let f = &lines[0]["fields"];
    assert_eq!(lines[0]["level"], "INFO");
    assert_eq!(f["trace_id"], TRACE);
    assert_eq!(
        f["span_id"],
        server.span_id.as_str(),
        "the server span's id"
    );
    assert_eq!(f["peer"], "apiserver-b");
    assert_eq!(f["status"], 200);
    assert!(
        log.iter().all(|l| !l.contains("very-secret-token")),
        "Authorization never reaches a log"
    );
}

#[tokio::test]
async fn a_failed_request_has_an_error_span_with_an_exception_event() {
    let receiver = Receiver::http().await;
    let env = otel_env(&receiver, false);
    let a = standin("apiserver-a", &apis_134()).await;
    // a peer that never answers: what only it might serve is a 503
    let p = Proxy::start_with_env(
        &proxy_args("apiserver-a", &a.url(), &[("apiserver-b", NOTHING_LISTENS)]),
        &env_refs(&env),
    )
    .await;
    p.ready().await;
    let r = get_in_trace(&format!("{}{OLD_ONLY}", p.url())).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    let spans = receiver
        .wait_for("the failed request's span", |s| {
            !in_trace(s, TRACE).is_empty()
        })
        .await;
    let server = &in_trace(&spans, TRACE)[0];
    assert_eq!(server.kind, KIND_SERVER);
    assert_eq!(server.status_code, 2, "error status: {server:#?}");
    assert_eq!(server.attr("http.response.status_code"), "503");
    assert_eq!(server.attr("error.type"), "ServiceUnavailable");
    assert!(
        server.events.contains(&"exception".to_owned()),
        "{server:#?}"
    );
    let log = p.log();
    let failed: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("request failed"))
        .collect();
    assert_eq!(failed.len(), 1, "{log:#?}");
    assert!(
        failed[0].contains(TRACE) && failed[0].contains(server.span_id.as_str()),
        "the failure line carries the server span's trace and span ids: {}",
        failed[0]
    );
}

/// A watch has a span of its own, child of its server span, that lasts until the watch ends:
/// it says how many events were relayed and why the watch ended (here the API server's
/// `timeoutSeconds`).
#[tokio::test]
async fn a_watch_has_a_span_until_it_ends_with_its_events_and_why() {
    let receiver = Receiver::grpc().await;
    let env = otel_env(&receiver, true);
    let c = Cluster::start_with_env(&env_refs(&env)).await;
    for name in ["p-1", "p-2", "p-3"] {
        c.a.insert("", "v1", "pods", Some("default"), object("v1", "Pod", name));
    }
    let r = get_in_trace(&format!(
        "{}{PODS}?watch=true&timeoutSeconds=1",
        c.proxy_a.url()
    ))
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let events = r.text().lines().filter(|l| !l.is_empty()).count();
    assert_eq!(events, 3, "{}", r.text());

    let spans = receiver
        .wait_for("the watch's span", |s| {
            in_trace(s, TRACE)
                .iter()
                .any(|s| s.name.starts_with("watch "))
        })
        .await;
    let trace = in_trace(&spans, TRACE);
    let server = child_of(&trace, CLIENT_SPAN, KIND_SERVER);
    assert_eq!(server.attr("k8s.api.verb"), "watch", "{server:#?}");
    let watch = child_of(&trace, &server.span_id, KIND_INTERNAL);
    assert_eq!(
        watch.name,
        "watch /api/{version}/namespaces/{namespace}/{resource}"
    );
    assert_eq!(watch.attr("mvproxy.watch.events"), "3", "{watch:#?}");
    assert_eq!(
        watch.attr("mvproxy.watch.end"),
        "upstream_closed",
        "{watch:#?}"
    );
}
