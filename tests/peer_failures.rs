//! When one of the servers that serve a GVR fails: the request goes to another capable one
//! within the same request, the failed server is avoided from then on until a probe of its
//! discovery succeeds, and a write whose bytes reached a hung server is answered with a `504`
//! that says it may still have been applied.
//!
//! The proxy is in front of a 1.31 stand-in, with two 1.34 stand-ins as peers (the API servers
//! themselves, as `--peer-source leases` finds them), so each 1.34-only GVR has two capable
//! peers. The refresh interval is an hour: whatever the proxy notices, it notices from the
//! requests, not from a scheduled refresh.

use bytes::Bytes;
use http::{Method, StatusCode};
use integration::*;
use serde_json::Value;

use crate::cluster::{object, wait_all_up, wait_discovery};

/// A namespaced GVR only the 1.34 release serves.
const NEW_ONLY: &str = "/apis/coordination.k8s.io/v1beta1/namespaces/default/leasecandidates";
/// Requests sent in a round: the chance that a uniformly random choice among two peers never
/// picks a given one in this many is 2^-40.
const ROUND: usize = 40;

fn args(peers: &[(&str, &str)], local: &str) -> Vec<String> {
    let mut args = vec![
        "--server-id".to_owned(),
        "apiserver-a".to_owned(),
        "--local".to_owned(),
        local.to_owned(),
        "--refresh-interval-seconds".to_owned(),
        "3600".to_owned(),
        "--connect-timeout-seconds".to_owned(),
        "2".to_owned(),
        "--response-header-timeout-seconds".to_owned(),
        "1".to_owned(),
    ];
    for (name, url) in peers {
        args.push("--peer".to_owned());
        args.push(format!("{name}={url}"));
    }
    args
}

fn lease_candidate(name: &str) -> Bytes {
    Bytes::from(object("coordination.k8s.io/v1beta1", "LeaseCandidate", name).to_string())
}

async fn create(proxy: &Proxy, name: &str) -> Resp {
    request(
        Method::POST,
        &format!("{}{NEW_ONLY}", proxy.url()),
        &[("content-type", "application/json")],
        lease_candidate(name),
    )
    .await
    .unwrap()
}

async fn list(proxy: &Proxy) -> Resp {
    get(&format!("{}{NEW_ONLY}", proxy.url()), &[])
        .await
        .unwrap()
}

async fn server(proxy: &Proxy, id: &str) -> Value {
    let v = get(&format!("{}/debug/discovery", proxy.admin_url()), &[])
        .await
        .unwrap()
        .json();
    v["servers"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == id).cloned())
        .unwrap_or(Value::Null)
}

async fn metrics(proxy: &Proxy) -> String {
    get(&format!("{}/metrics", proxy.admin_url()), &[])
        .await
        .unwrap()
        .text()
}

fn creates_at(s: &StandInRunning) -> usize {
    requests_for(s, "leasecandidates")
        .iter()
        .filter(|r| r.method == "POST")
        .count()
}

#[tokio::test]
async fn a_peer_that_refuses_connections_is_skipped_within_the_request_and_marked_at_once() {
    let local = standin_release("apiserver-a", &apis_131(), "v1.31.0").await;
    let p1 = standin_release("apiserver-b", &apis_134(), "v1.34.0").await;
    let p2 = standin_release("apiserver-c", &apis_134(), "v1.34.0").await;
    let proxy = Proxy::serve(&args(
        &[("apiserver-b", &p1.url()), ("apiserver-c", &p2.url())],
        &local.url(),
    ))
    .await;
    proxy.ready().await;
    wait_all_up(&proxy).await;

    // apiserver-b goes away: its port refuses connections from now on.
    p1.shutdown().await;
    for i in 0..ROUND {
        let r = list(&proxy).await;
        assert_eq!(r.status, StatusCode::OK, "list {i}: {}", r.text());
        assert_eq!(r.header("x-standin-server"), "apiserver-c");
        // Nothing was sent to the refused server: even a write goes to the other one.
        let r = create(&proxy, &format!("lc-{i}")).await;
        assert_eq!(r.status, StatusCode::CREATED, "create {i}: {}", r.text());
    }
    assert_eq!(
        creates_at(&p2),
        ROUND,
        "each create once, on the server that took it"
    );

    // Marked without waiting for a refresh (an hour away), and said so where it is shown.
    let b = server(&proxy, "apiserver-b").await;
    assert_eq!(b["up"], false, "{b}");
    assert_eq!(b["state"], "suspect", "{b}");
    let m = metrics(&proxy).await;
    assert!(
        m.contains(r#"mvproxy_peer_up{peer="apiserver-b"} 0"#),
        "{m}"
    );
    assert!(
        m.contains(r#"mvproxy_peer_up{peer="apiserver-c"} 1"#),
        "{m}"
    );
}

#[tokio::test]
async fn a_hung_peer_costs_one_timeout_a_read_is_answered_elsewhere_and_it_comes_back() {
    let local = standin_release("apiserver-a", &apis_131(), "v1.31.0").await;
    let p1 = standin_release("apiserver-b", &apis_134(), "v1.34.0").await;
    let p2 = standin_release("apiserver-c", &apis_134(), "v1.34.0").await;
    let to_p1 = relay::Relay::start(p1.addr).await;
    let proxy = Proxy::serve(&args(
        &[("apiserver-b", &to_p1.url()), ("apiserver-c", &p2.url())],
        &local.url(),
    ))
    .await;
    proxy.ready().await;
    wait_all_up(&proxy).await;

    // apiserver-b accepts connections and never answers (a SIGSTOPped process).
    to_p1.stall();
    for i in 0..ROUND {
        let r = list(&proxy).await;
        assert_eq!(r.status, StatusCode::OK, "list {i}: {}", r.text());
        assert_eq!(r.header("x-standin-server"), "apiserver-c");
    }
    let b = server(&proxy, "apiserver-b").await;
    assert_eq!(b["up"], false, "a timeout marks it: {b}");
    assert_eq!(b["state"], "suspect", "{b}");
    // While it hangs, writes go to the other server only.
    for i in 0..ROUND / 4 {
        let r = create(&proxy, &format!("lc-{i}")).await;
        assert_eq!(r.status, StatusCode::CREATED, "create {i}: {}", r.text());
    }

    // It answers again: a probe of its discovery brings it back, and it is chosen again.
    to_p1.resume();
    wait_discovery(&proxy, |s| {
        s.iter()
            .any(|s| s["id"] == "apiserver-b" && s["up"] == true && s["state"] == "up")
    })
    .await;
    let mut at_b = 0;
    for _ in 0..ROUND {
        let r = list(&proxy).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        at_b += usize::from(r.header("x-standin-server") == "apiserver-b");
    }
    assert!(at_b > 0, "apiserver-b is chosen again once it answers");
    let m = metrics(&proxy).await;
    assert!(
        m.contains(r#"mvproxy_peer_up{peer="apiserver-b"} 1"#),
        "{m}"
    );
}

#[tokio::test]
async fn a_write_that_timed_out_on_a_hung_peer_is_a_504_saying_it_may_have_been_applied() {
    let local = standin_release("apiserver-a", &apis_131(), "v1.31.0").await;
    let p1 = standin_release("apiserver-b", &apis_134(), "v1.34.0").await;
    let p2 = standin_release("apiserver-c", &apis_134(), "v1.34.0").await;
    let to_p1 = relay::Relay::start(p1.addr).await;
    let to_p2 = relay::Relay::start(p2.addr).await;
    let proxy = Proxy::serve(&args(
        &[("apiserver-b", &to_p1.url()), ("apiserver-c", &to_p2.url())],
        &local.url(),
    ))
    .await;
    proxy.ready().await;
    wait_all_up(&proxy).await;

    // Both hang: wherever the write goes, its bytes reach a server that does not answer.
    to_p1.stall();
    to_p2.stall();
    let r = create(&proxy, "lc-ambiguous").await;
    assert_eq!(r.status, StatusCode::GATEWAY_TIMEOUT, "{}", r.text());
    let v = r.json();
    assert_eq!(v["kind"], "Status");
    assert_eq!(v["reason"], "Timeout");
    let msg = v["message"].as_str().unwrap();
    assert!(msg.contains("may still have been applied"), "{msg}");

    // Indeed: once the servers resume, the one it reached creates it. It was sent once.
    to_p1.resume();
    to_p2.resume();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while creates_at(&p1) + creates_at(&p2) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the write never landed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        creates_at(&p1) + creates_at(&p2),
        1,
        "sent once, never twice"
    );

    // A read that timed out is not such a case: it says nothing of the sort.
    to_p1.stall();
    to_p2.stall();
    wait_discovery(&proxy, |s| s.iter().all(|s| s["up"] == true)).await;
    let r = list(&proxy).await;
    assert_eq!(r.status, StatusCode::GATEWAY_TIMEOUT, "{}", r.text());
    let msg = r.json()["message"].as_str().unwrap().to_owned();
    assert!(!msg.contains("may still have been applied"), "{msg}");
}
