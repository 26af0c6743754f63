//! A client's broken request body is the client's fault: a `400` `Status` (or a closed
//! connection), never a `5xx` that client-go would retry, never a failure counted against
//! the local API server or a peer.

use std::net::SocketAddr;
use std::time::Duration;

use http::StatusCode;
use integration::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::cluster::Cluster;

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";
/// Only 1.31 (apiserver-b) serves this GVR: from proxy A it takes the peer hop.
const OLD_ONLY: &str = "/apis/resource.k8s.io/v1alpha3/namespaces/default/podschedulingcontexts";

/// What came back on a raw connection: the status line's code and the rest, or nothing.
struct Raw {
    code: Option<u16>,
    text: String,
}

/// Sends `head` and `body` as they are, half-closes (or not), and reads until the server
/// closes the connection (bounded).
async fn raw(addr: SocketAddr, head: &str, body: &[u8], half_close: bool) -> Raw {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    if half_close {
        s.shutdown().await.unwrap();
    }
    let mut got = Vec::new();
    let read = tokio::time::timeout(PATIENCE, async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    got.extend_from_slice(&buf[..n]);
                    if response_complete(&got) {
                        break;
                    }
                }
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the proxy neither answered nor closed");
    let text = String::from_utf8_lossy(&got).into_owned();
    let code = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|c| c.parse().ok());
    Raw { code, text }
}

/// A response head with a `content-length` whose body has all arrived.
fn response_complete(got: &[u8]) -> bool {
    let text = String::from_utf8_lossy(got);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return false;
    };
    head.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .is_some_and(|n| body.len() >= n)
}

fn post_chunked(path: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
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
fn assert_client_fault(r: &Raw, what: &str) {
    match r.code {
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

#[tokio::test]
async fn a_malformed_chunked_body_is_a_400_on_local_and_peer_routes_and_blames_no_upstream() {
    let c = Cluster::start_processes().await;
    let before_a = scrape(&c.proxy_a).await;
    let malformed = b"zz\r\nhello\r\n0\r\n\r\n";

    // local route (configmaps, served by apiserver-a) and peer route (only apiserver-b)
    for (path, route) in [(CONFIGMAPS, "local"), (OLD_ONLY, "peer")] {
        let r = raw(c.proxy_a.listen, &post_chunked(path), malformed, false).await;
        assert_eq!(r.code, Some(400), "{route} route: {}", r.text);
        assert_client_fault(&r, route);
    }

    // a body cut short (the client half-closes mid-chunk): the client's fault as well
    for (path, route) in [(CONFIGMAPS, "local"), (OLD_ONLY, "peer")] {
        let r = raw(
            c.proxy_a.listen,
            &post_chunked(path),
            b"40\r\n{\"a\":",
            true,
        )
        .await;
        assert_client_fault(&r, &format!("{route} route, cut short"));
    }

    // nothing was counted against an upstream, and the 400s are what was recorded
    let after_a = scrape(&c.proxy_a).await;
    let errors = "mvproxy_peer_proxy_errors_total";
    assert_eq!(
        count(&after_a, errors, &[]),
        count(&before_a, errors, &[]),
        "no peer proxy error: {after_a}"
    );
    assert!(
        count(
            &after_a,
            "mvproxy_requests_total",
            &[r#"code="400""#, r#"route="peer""#]
        ) >= 1.0,
        "{after_a}"
    );
    assert!(
        count(
            &after_a,
            "mvproxy_requests_total",
            &[r#"code="400""#, r#"route="local""#]
        ) >= 1.0,
        "{after_a}"
    );
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
    assert_eq!(count(&after_b, errors, &[]), 0.0, "{after_b}");
    for p in [&c.proxy_a, &c.proxy_b] {
        let failed: Vec<String> = p
            .log()
            .into_iter()
            .filter(|l| l.contains("request failed"))
            .collect();
        assert!(failed.is_empty(), "no upstream failure logged: {failed:?}");
    }
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
