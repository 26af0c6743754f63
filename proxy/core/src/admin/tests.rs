//! The admin router without a socket, over a cache fed by hand.

use axum::body::Body;
use http_body_util::BodyExt;
use tower_service::Service;

use super::*;
use crate::limits::Limits;
use crate::testkit::{Harness, view};

async fn get(h: &Harness, path: &str, accept: Option<&str>) -> (StatusCode, HeaderMap, String) {
    let mut router = router(h.admin());
    let mut req = axum::http::Request::get(path);
    if let Some(accept) = accept {
        req = req.header(header::ACCEPT, accept);
    }
    let resp = router
        .call(req.body(Body::empty()).expect("request"))
        .await
        .expect("infallible");
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

#[tokio::test]
async fn ready_once_every_server_was_fetched_or_marked_down() {
    let h = Harness::new(&["apiserver-b"], Limits::default());
    let (status, _, body) = get(&h, "/readyz", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        body.contains("apiserver-a") && body.contains("apiserver-b"),
        "{body}"
    );
    h.fetched("apiserver-a", Ok(view(&[("", "v1", "pods")])));
    let (status, _, body) = get(&h, "/readyz", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        !body.contains("apiserver-a") && body.contains("apiserver-b"),
        "{body}"
    );
    h.fetched("apiserver-b", Err("connection refused"));
    let (status, _, _) = get(&h, "/readyz", None).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "a peer marked down does not hold readiness"
    );
    let (status, _, body) = get(&h, "/healthz", None).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
}

#[tokio::test]
async fn debug_discovery_shows_each_server_and_the_skew() {
    let h = Harness::new(&["apiserver-b"], Limits::default());
    h.fetched("apiserver-a", Ok(view(&[("", "v1", "pods")])));
    h.fetched(
        "apiserver-b",
        Ok(view(&[
            ("", "v1", "pods"),
            ("example.com", "v1", "widgets"),
        ])),
    );
    h.fetched("apiserver-b", Err("connection refused"));
    let (status, _, body) = get(&h, "/debug/discovery", None).await;
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    // the documented fields (README, "Admin endpoints"), `error` a string or null
    for s in v["servers"].as_array().expect("servers") {
        let keys: std::collections::BTreeSet<&str> = s
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        let documented = [
            "error",
            "error_at",
            "git_version",
            "gvrs",
            "id",
            "last_fetch",
            "local",
            "state",
            "suspected_by",
            "up",
            "url",
        ];
        assert_eq!(keys, documented.into(), "{s}");
        assert!(s["error"].is_string() || s["error"].is_null(), "{s}");
    }
    let servers: Vec<(String, bool, Option<String>)> = v["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap_or_default().to_owned(),
                s["up"] == true,
                s["error"].as_str().map(str::to_owned),
            )
        })
        .collect();
    assert_eq!(
        servers,
        [
            ("apiserver-a".to_owned(), true, None),
            (
                "apiserver-b".to_owned(),
                false,
                Some("GET /api: apiserver-b could not be reached: connection refused".to_owned())
            ),
        ]
    );
    assert_eq!(
        v["skew"],
        serde_json::json!([{"gvr": "example.com/v1/widgets", "servers": ["apiserver-b"]}]),
        "a server that is down keeps its last view"
    );
}

#[tokio::test]
async fn metrics_are_openmetrics_only_when_asked_for() {
    let h = Harness::new(&[], Limits::default());
    let (status, headers, body) = get(&h, "/metrics", None).await;
    assert_eq!(status, StatusCode::OK);
    let content_type = headers[header::CONTENT_TYPE].to_str().expect("ASCII");
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    assert!(
        body.contains("# TYPE mvproxy_local_proxy_errors_total counter"),
        "{body}"
    );
    let (_, headers, body) = get(
        &h,
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0,text/plain;q=0.5"),
    )
    .await;
    let content_type = headers[header::CONTENT_TYPE].to_str().expect("ASCII");
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");
}
