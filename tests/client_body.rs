//! A client's broken request body is the client's fault: a `400` `Status` (or a closed
//! connection), never a `5xx` that client-go would retry, never a failure counted against
//! the local API server or a peer.

use std::time::Duration;

use http::StatusCode;
use integration::conn::{RawAnswer, ReadUntil, raw_exchange};
use integration::*;

use crate::cluster::Cluster;

/// The proxy's two routes for a `POST`: configmaps to its local server, the peer-only GVR to
/// the peer.
const ROUTES: [(&str, &str); 2] = [(CONFIGMAPS, "local"), (OLD_ONLY, "peer")];

/// A chunked `POST` to `path` on proxy A whose body is `body` as it is, half-closed after it
/// (or not); read until the proxy answered or closed.
async fn post_chunked(c: &Cluster, path: &str, body: &[u8], half_close: bool) -> RawAnswer {
    let mut bytes = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    .into_bytes();
    bytes.extend_from_slice(body);
    raw_exchange(c.proxy_a.listen, &bytes, half_close, ReadUntil::Answered).await
}

/// The `mvproxy_peer_proxy_errors_total` and `mvproxy_requests_total` lines of a scrape.
async fn scrape(p: &Proxy) -> String {
    get(&format!("{}/metrics", p.admin_url()), &[])
        .await
        .unwrap()
        .text()
}

fn count(metrics: &str, family: &str, needles: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(family) && needles.iter().all(|n| l.contains(n)))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// A `400` `BadRequest` `Status` without `Retry-After`, or the connection closed unanswered;
/// never a `5xx`.
fn assert_client_fault(r: &RawAnswer, what: &str) {
    match r.code() {
        None => {}
        Some(400) => {
            let lower = r.text.to_ascii_lowercase();
            assert!(!lower.contains("retry-after"), "{what}: {}", r.text);
            assert!(
                r.text.contains(r#""reason":"BadRequest""#)
                    && r.text.contains("the request body could not be read"),
                "{what}: {}",
                r.text
            );
        }
        Some(other) => panic!("{what}: {other}, not 400: {}", r.text),
    }
}

/// Proxy A counted no peer proxy error since `before_a` (its scrape then), and neither proxy
/// logged an upstream failure. Returns proxy A's scrape now.
async fn assert_no_upstream_blamed(c: &Cluster, before_a: &str) -> String {
    let after_a = scrape(&c.proxy_a).await;
    let errors = "mvproxy_peer_proxy_errors_total";
    assert_eq!(
        count(&after_a, errors, &[]),
        count(before_a, errors, &[]),
        "no peer proxy error: {after_a}"
    );
    for p in [&c.proxy_a, &c.proxy_b] {
        let failed: Vec<String> = p
            .log()
            .into_iter()
            .filter(|l| l.contains("request failed"))
            .collect();
        assert!(failed.is_empty(), "no upstream failure logged: {failed:?}");
    }
    after_a
}

#[tokio::test]
async fn a_malformed_chunked_body_is_a_400_on_local_and_peer_routes_and_blames_no_upstream() {
    let c = Cluster::start_processes().await;
    let before_a = scrape(&c.proxy_a).await;
    let malformed = b"zz\r\nhello\r\n0\r\n\r\n";

    // local route (configmaps, served by apiserver-a) and peer route (only apiserver-b)
    for (path, route) in ROUTES {
        let r = post_chunked(&c, path, malformed, false).await;
        assert_eq!(r.code(), Some(400), "{route} route: {}", r.text);
        assert_client_fault(&r, route);
    }

    // a body cut short (the client half-closes mid-chunk): the client's fault as well
    for (path, route) in ROUTES {
        let r = post_chunked(&c, path, b"40\r\n{\"a\":", true).await;
        assert_client_fault(&r, &format!("{route} route, cut short"));
    }

    // nothing was counted against an upstream, and the 400s are what was recorded
    let after_a = assert_no_upstream_blamed(&c, &before_a).await;
    for (_, route) in ROUTES {
        let route = format!(r#"route="{route}""#);
        assert!(
            count(
                &after_a,
                "mvproxy_requests_total",
                &[r#"code="400""#, &route]
            ) >= 1.0,
            "{route}: {after_a}"
        );
    }
    assert_eq!(
        count(&after_a, "mvproxy_requests_total", &[r#"code="503""#]),
        0.0,
        "{after_a}"
    );
    // (peer discovery fetches count here too: compare with before)
    let rerouted_503 = |m: &str| count(m, "mvproxy_rerouted_request_total", &[r#"code="503""#]);
    assert_eq!(rerouted_503(&after_a), rerouted_503(&before_a));
    // the peer's proxy saw its client (proxy A) abort the body: its local server is not
    // blamed either
    let after_b = scrape(&c.proxy_b).await;
    assert_eq!(
        count(&after_b, "mvproxy_peer_proxy_errors_total", &[]),
        0.0,
        "{after_b}"
    );
    let refused = c
        .proxy_a
        .log()
        .into_iter()
        .filter(|l| l.contains("request refused") && l.contains("could not be read"))
        .count();
    assert!(refused >= 2, "{:?}", c.proxy_a.log());

    // nothing was created, and both routes still serve
    tokio::time::sleep(Duration::from_millis(100)).await;
    for path in [CONFIGMAPS, OLD_ONLY] {
        let r = get(&format!("{}{path}", c.proxy_a.url()), &[])
            .await
            .unwrap();
        assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.text());
        assert_eq!(r.json()["items"], serde_json::json!([]), "{path}");
    }
}

#[tokio::test]
async fn a_body_that_stops_arriving_is_the_clients_400_not_an_upstream_504() {
    let c = Cluster::start_processes_with(&[], &["--response-header-timeout-seconds", "1"]).await;
    let before_a = scrape(&c.proxy_a).await;

    // the client sends the head and part of its body, then nothing more (the connection
    // stays open): past the response-header timeout, the upstream is not the one waited on
    for (path, route) in ROUTES {
        let r = post_chunked(&c, path, b"40\r\n{\"metadata\":", false).await;
        assert_eq!(r.code(), Some(400), "{route} route: {}", r.text);
        assert_client_fault(&r, route);
        assert!(
            r.text.contains("had not all arrived after 1s"),
            "{route} route: {}",
            r.text
        );
    }

    let after_a = assert_no_upstream_blamed(&c, &before_a).await;
    for code in ["503", "504"] {
        let needle = format!(r#"code="{code}""#);
        assert_eq!(
            count(&after_a, "mvproxy_requests_total", &[&needle]),
            0.0,
            "{after_a}"
        );
    }
}
