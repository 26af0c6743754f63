//! `/metrics` as real Prometheus tools see it: the classic text passes `promtool check
//! metrics`, and a real Prometheus scraping the OpenMetrics endpoint stores trace-id exemplars
//! that equal the ids of exported traces.

use std::process::Stdio;
use std::time::{SystemTime, UNIX_EPOCH};

use http::StatusCode;
use integration::otlp::Receiver;
use integration::prometheus::Prometheus;
use integration::*;
use tokio::io::AsyncWriteExt;

fn tool(name: &str) -> String {
    let path = format!("/usr/bin/{name}");
    assert!(
        std::path::Path::new(&path).exists(),
        "{path} is required (Debian package prometheus; scripts/test.sh installs it)"
    );
    path
}

/// `promtool check metrics` of a scrape: `Err` with what it said when it refuses the text.
async fn promtool_check_metrics(body: &[u8]) -> Result<(), String> {
    let mut check = tokio::process::Command::new(tool("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run promtool");
    let mut stdin = check.stdin.take().expect("promtool's stdin");
    stdin.write_all(body).await.expect("write to promtool");
    drop(stdin);
    let out = check.wait_with_output().await.expect("promtool's output");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "promtool check metrics: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

#[tokio::test]
async fn classic_exposition_passes_promtool_and_openmetrics_is_served_on_request() {
    let c = crate::cluster::Cluster::start().await;
    for path in [PODS, OLD_ONLY, "/apis/example.com/v1/widgets"] {
        get(&format!("{}{path}", c.proxy_a.url()), &[])
            .await
            .unwrap();
    }
    let classic = get(&format!("{}/metrics", c.proxy_a.admin_url()), &[])
        .await
        .unwrap();
    assert!(
        classic
            .header("content-type")
            .starts_with("text/plain; version=0.0.4")
    );
    if let Err(why) = promtool_check_metrics(&classic.body).await {
        panic!("{why}\n{}", classic.text());
    }

    let om = get(
        &format!("{}/metrics", c.proxy_a.admin_url()),
        &[(
            "accept",
            "application/openmetrics-text;version=1.0.0,text/plain;q=0.5",
        )],
    )
    .await
    .unwrap();
    assert!(
        om.header("content-type")
            .starts_with("application/openmetrics-text")
    );
    assert!(om.text().ends_with("# EOF\n"));
}

#[tokio::test]
async fn prometheus_stores_exemplars_that_open_exported_traces() {
    let receiver = Receiver::http().await;
    let endpoint = receiver.endpoint();
    let a = standin("apiserver-a", &apis_134()).await;
    let b = standin("apiserver-b", &apis_131()).await;
    let proxy = Proxy::start_with_env(
        &proxy_args("apiserver-a", &a.url(), &[("apiserver-b", &b.url())]),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    )
    .await;
    proxy.ready().await;
    crate::cluster::wait_all_up(&proxy).await;

    let prometheus = Prometheus::start(&[proxy.admin.to_string()], &[]).await;

    // Peer-routed requests, each in a sampled trace of the client's.
    let mut traces = Vec::new();
    for i in 0..5u32 {
        let trace = format!("{:032x}", 0xabc0_0000_u64 + u64::from(i));
        let r = get(
            &format!("{}{OLD_ONLY}", proxy.url()),
            &[("traceparent", &format!("00-{trace}-00f067aa0ba902b7-01"))],
        )
        .await
        .unwrap();
        assert_eq!(r.status, StatusCode::OK);
        traces.push(trace);
    }
    let spans = receiver
        .wait_for("the exported traces", |s| {
            traces.iter().all(|t| s.iter().any(|sp| &sp.trace_id == t))
        })
        .await;

    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let url = format!(
        "{}/api/v1/query_exemplars?query=mvproxy_request_duration_seconds_bucket&start={}&end={}",
        prometheus.url,
        now - 600,
        now + 600
    );
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let found = loop {
        if let Ok(r) = get(&url, &[]).await
            && r.status == StatusCode::OK
        {
            let ids: Vec<String> = r.json()["data"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|series| series["exemplars"].as_array().cloned().unwrap_or_default())
                .filter_map(|e| e["labels"]["trace_id"].as_str().map(str::to_owned))
                .collect();
            if let Some(id) = ids.into_iter().find(|id| traces.contains(id)) {
                break id;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no exemplar with one of our trace ids"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(found.len(), 32);
    assert!(
        spans.iter().any(|s| s.trace_id == found),
        "the exemplar opens an exported trace"
    );
}

#[tokio::test]
async fn a_local_api_server_failure_is_a_local_proxy_error_not_a_peer_one() {
    // Nothing listens on the local API server's port: the request fails in mvproxy.
    let proxy = Proxy::start(&proxy_args("apiserver-a", NOTHING_LISTENS, &[])).await;
    let resp = get(&format!("{}{PODS}", proxy.url()), &[]).await.unwrap();
    assert_eq!(
        resp.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        resp.text()
    );
    let metrics = get(&format!("{}/metrics", proxy.admin_url()), &[])
        .await
        .unwrap()
        .text();
    assert!(
        metrics.contains(r#"mvproxy_local_proxy_errors_total{type="proxy_transport"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .filter(|l| l.starts_with("mvproxy_peer_proxy_errors_total{"))
            .all(|l| l.ends_with(" 0")),
        "a local failure was counted as a peer-proxy error:\n{metrics}"
    );
    proxy.terminate().await;
}

/// Every family docs/telemetry.md lists is on a fresh proxy's first scrape, with its HELP and
/// TYPE lines, before any request: a dashboard or an alert on `increase()` sees the family
/// from the start, and `promtool` accepts the families that have no series yet.
#[tokio::test]
async fn the_first_scrape_declares_every_family_of_the_contract() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/telemetry.md"))
        .unwrap();
    let families: std::collections::BTreeSet<&str> = doc
        .lines()
        .filter(|l| l.starts_with("| `mvproxy_"))
        .filter_map(|l| l.split(" | ").next())
        .flat_map(|cell| cell.split('`').filter(|w| w.starts_with("mvproxy_")))
        .collect();
    assert!(families.len() > 20, "{families:?}");
    let c = crate::cluster::Cluster::start().await;
    let first = get(&format!("{}/metrics", c.proxy_a.admin_url()), &[])
        .await
        .unwrap();
    let text = first.text();
    for family in &families {
        for line in [format!("# HELP {family} "), format!("# TYPE {family} ")] {
            assert!(text.contains(&line), "{line:?} missing from\n{text}");
        }
    }
    if let Err(why) = promtool_check_metrics(&first.body).await {
        panic!("{why}");
    }
}
