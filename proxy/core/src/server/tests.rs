//! The request path driven without a socket: [`handle`] over a [`Harness`] whose discovery
//! cache is fed by hand, for the answers mvproxy gives itself (no upstream is reached).

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};

use super::*;
use crate::testkit::{Harness, group_names, view};

const PODS: (&str, &str, &str) = ("", "v1", "pods");
const LEASES: (&str, &str, &str) = ("coordination.k8s.io", "v1", "leases");
const WIDGETS: (&str, &str, &str) = ("example.com", "v1", "widgets");

async fn send(h: &Harness, req: Request<Full<Bytes>>) -> (StatusCode, HeaderMap, String) {
    let conn = ClientConn {
        app: h.app.clone(),
        identity: ClientIdentity::Anonymous,
        remote: None,
    };
    let resp = handle(Arc::new(conn), req).await;
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

fn get(path: &str) -> Request<Full<Bytes>> {
    Request::get(path).body(Full::default()).expect("request")
}

#[tokio::test]
async fn a_body_declared_over_the_limit_is_a_413_status_before_any_upstream() {
    let h = Harness::new(
        &[],
        Limits {
            max_request_body_bytes: 4,
            ..Limits::default()
        },
    );
    h.fetched("apiserver-a", Ok(view(&[PODS])));
    let req = Request::post("/api/v1/namespaces/default/pods")
        .header(header::CONTENT_LENGTH, "5")
        .body(Full::new(Bytes::from_static(b"12345")))
        .expect("request");
    let (status, _, body) = send(&h, req).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).expect("a Status");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["code"], 413);
    let scrape = h.scrape();
    assert!(
        scrape
            .lines()
            .any(|l| l.starts_with("mvproxy_requests_total{")
                && l.contains(r#"code="413""#)
                && l.ends_with(" 1")),
        "{scrape}"
    );
}

#[tokio::test]
async fn a_gvr_only_a_never_reached_peer_could_serve_is_a_retryable_503() {
    let h = Harness::new(&["apiserver-b"], Limits::default());
    h.fetched("apiserver-a", Ok(view(&[PODS])));
    let (status, headers, body) = send(&h, get("/apis/example.com/v1/namespaces/x/widgets")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(headers.contains_key(header::RETRY_AFTER));
    assert!(body.contains("apiserver-b"), "the peer is named: {body}");

    // once the peer answered without it, nobody serves it: local's own 404 (forwarded)
    // would follow; while every peer serving it is down, mvproxy answers 503 itself
    h.fetched("apiserver-b", Ok(view(&[PODS, WIDGETS])));
    h.fetched("apiserver-b", Err("connection refused"));
    let (status, _, body) = send(&h, get("/apis/example.com/v1/namespaces/x/widgets")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let scrape = h.scrape();
    assert!(
        scrape.contains(r#"mvproxy_requests_total{"#) && scrape.contains(r#"code="503""#),
        "{scrape}"
    );
}

/// The sample lines of a scrape (series), without comments.
fn series(scrape: &str) -> Vec<&str> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect()
}

#[tokio::test]
async fn ten_thousand_made_up_paths_add_no_series() {
    let h = Harness::new(&["apiserver-b"], Limits::default());
    h.fetched("apiserver-a", Ok(view(&[PODS])));
    // a get, as all those below are: each verb counted has its series per client
    let (status, _, _) = send(
        &h,
        get("/apis/made-up-0.example/v1/namespaces/x/things0/o0"),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let first = h.scrape();
    let before: Vec<String> = series(&first)
        .iter()
        .map(|l| l.rsplit_once(' ').map_or(*l, |(k, _)| k).to_owned())
        .collect();
    for i in 1..10_000 {
        let path = format!("/apis/made-up-{i}.example/v{i}/namespaces/n{i}/things{i}/o{i}");
        let (status, _, _) = send(&h, get(&path)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{path}");
    }
    let scrape = h.scrape();
    let after: Vec<String> = series(&scrape)
        .iter()
        .map(|l| l.rsplit_once(' ').map_or(*l, |(k, _)| k).to_owned())
        .collect();
    assert_eq!(before, after, "the same series, only their values grew");
    assert!(
        scrape.contains(
            r#"mvproxy_peer_proxy_errors_total{type="endpoint_resolution",group="",version="",resource=""} 10000"#
        ),
        "{scrape}"
    );
}

#[tokio::test]
async fn get_apis_is_answered_with_every_servers_groups_merged() {
    let h = Harness::new(&["apiserver-b"], Limits::default());
    h.fetched("apiserver-a", Ok(view(&[PODS, LEASES])));
    h.fetched("apiserver-b", Ok(view(&[PODS, WIDGETS])));
    let req = Request::get("/apis")
        .header(header::ACCEPT, crate::discovery::types::CONTENT_TYPE_V2)
        .body(Full::default())
        .expect("request");
    let (status, headers, body) = send(&h, req).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        group_names(body.as_bytes()),
        ["coordination.k8s.io", "example.com"],
        "{body}"
    );

    // the ETag it sent makes the next one a 304, built from the same merge
    let etag = headers[header::ETAG].clone();
    let req = Request::get("/apis")
        .header(header::ACCEPT, crate::discovery::types::CONTENT_TYPE_V2)
        .header(header::IF_NONE_MATCH, etag)
        .body(Full::default())
        .expect("request");
    let (status, _, _) = send(&h, req).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    let scrape = h.scrape();
    assert!(
        scrape.contains(r#"mvproxy_discovery_merges_total{result="miss"} 1"#)
            && scrape.contains(r#"mvproxy_discovery_merges_total{result="hit"} 1"#),
        "merged once, then served from the snapshot: {scrape}"
    );
}

#[tokio::test]
async fn a_group_version_both_servers_serve_lists_both_servers_resources() {
    const LEASE_CANDIDATES: (&str, &str, &str) = ("coordination.k8s.io", "v1", "leasecandidates");
    let h = Harness::new(&["apiserver-b"], Limits::default());
    h.fetched("apiserver-a", Ok(view(&[PODS, LEASES])));
    h.fetched("apiserver-b", Ok(view(&[PODS, LEASES, LEASE_CANDIDATES])));
    let (status, headers, body) = send(&h, get("/apis/coordination.k8s.io/v1")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let list: serde_json::Value = serde_json::from_str(&body).expect("an APIResourceList");
    assert_eq!(list["kind"], "APIResourceList");
    assert_eq!(list["groupVersion"], "coordination.k8s.io/v1");
    let names: Vec<&str> = list["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(names, ["leases", "leasecandidates"], "{body}");

    // its ETag makes the next one a 304, from the snapshot's documents
    let req = Request::get("/apis/coordination.k8s.io/v1")
        .header(header::IF_NONE_MATCH, headers[header::ETAG].clone())
        .body(Full::default())
        .expect("request");
    let (status, _, _) = send(&h, req).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    let scrape = h.scrape();
    assert!(
        scrape.contains(
            r#"mvproxy_discovery_document_merges_total{document="apiresourcelist",result="miss"} 1"#
        ) && scrape.contains(
            r#"mvproxy_discovery_document_merges_total{document="apiresourcelist",result="hit"} 1"#
        ),
        "built once, then served from the snapshot: {scrape}"
    );
    // the merged /apis was not touched by these
    assert!(
        scrape.contains(r#"mvproxy_discovery_merges_total{result="miss"} 0"#),
        "{scrape}"
    );
}

#[test]
fn the_method_label_is_a_closed_set() {
    for (method, label) in [
        ("GET", "GET"),
        ("POST", "POST"),
        ("PUT", "PUT"),
        ("PATCH", "PATCH"),
        ("DELETE", "DELETE"),
        ("HEAD", "HEAD"),
        ("OPTIONS", "OPTIONS"),
        ("CONNECT", "OTHER"),
        ("TRACE", "OTHER"),
        ("PURGE", "OTHER"),
    ] {
        let m = http::Method::from_bytes(method.as_bytes()).unwrap();
        assert_eq!(method_label(&m), label, "{method}");
    }
}
