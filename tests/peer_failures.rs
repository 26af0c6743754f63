//! When one of the servers that serve a GVR fails: the request goes to another capable one
//! within the same request, the failed server is avoided from then on until a probe of its
//! discovery succeeds, and a write whose bytes reached a hung server is answered with a `504`
//! that says it may still have been applied.
//!
//! The proxy is in front of a 1.31 stand-in, with two 1.34 stand-ins as peers (the API servers
//! themselves, as `--peer-source leases` finds them), so each 1.34-only GVR has two capable
//! peers. The refresh interval is an hour: whatever the proxy notices, it notices from the
//! requests, not from a scheduled refresh.
//!
//! A peer that hangs over HTTP/2 (as real API servers are reached: TLS, ALPN `h2`) is a TLS
//! mvproxy in front of a stand-in, reached through a relay that can freeze; the response-header
//! timeout is then a minute, so that only the unanswered `PING` can end a request early.

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use integration::pki::Ca;
use integration::*;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::cluster::{object, wait_all_up, wait_discovery};

/// A namespaced GVR only the 1.34 release serves.
const NEW_ONLY: &str = "/apis/coordination.k8s.io/v1beta1/namespaces/default/leasecandidates";
/// Requests sent in a round: the chance that a uniformly random choice among two peers never
/// picks a given one in this many is 2^-40.
const ROUND: usize = 40;

/// The proxy's flags in front of `local` with `peers`, a refresh an hour away, and the
/// per-transport flags `extra`.
fn proxy_flags(peers: &[(&str, &str)], local: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--server-id",
        "apiserver-a",
        "--local",
        local,
        "--refresh-interval-seconds",
        "3600",
    ]
    .into_iter()
    .chain(extra.iter().copied())
    .map(str::to_owned)
    .collect();
    for (name, url) in peers {
        args.push("--peer".to_owned());
        args.push(format!("{name}={url}"));
    }
    args
}

/// The proxy's flags for peers reached over plain HTTP/1.1: a connect timeout of 2 s and a
/// response-header timeout of 1 s.
fn args(peers: &[(&str, &str)], local: &str) -> Vec<String> {
    let timeouts = [
        "--connect-timeout-seconds",
        "2",
        "--response-header-timeout-seconds",
        "1",
    ];
    proxy_flags(peers, local, &timeouts)
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

/// `mvproxy_requests_total` of peer-routed requests, summed per `peer` label.
fn peer_requests(metrics: &str, peer: &str) -> f64 {
    let label = format!(r#"peer="{peer}""#);
    metrics
        .lines()
        .filter(|l| l.starts_with("mvproxy_requests_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The `peer` of each "proxied to peer" log line.
fn logged_peers(proxy: &Proxy) -> Vec<String> {
    proxy
        .log()
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["fields"]["message"] == "proxied to peer")
        .map(|v| v["fields"]["peer"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// A TLS mvproxy named `name` in front of `backend`, with a certificate for the name every
/// kube-apiserver serving certificate carries: an API server as a peer reaches it (HTTP/2).
async fn tls_server(ca: &Ca, name: &str, backend: &StandInRunning) -> Proxy {
    let serving = ca.issue(name, name, &["kubernetes.default.svc", "127.0.0.1"]);
    let mut args = proxy_args(name, &backend.url(), &[]);
    args.extend([
        "--tls-cert-file".to_owned(),
        serving.cert.display().to_string(),
        "--tls-key-file".to_owned(),
        serving.key.display().to_string(),
    ]);
    let p = Proxy::serve(&args).await;
    p.ready().await;
    p
}

/// The proxy's flags for peers reached over TLS: a response-header timeout of a minute, the
/// connect timeout its default.
fn tls_args(ca: &Ca, peers: &[(&str, &str)], local: &str) -> Vec<String> {
    let ca_file = ca.cert_file().display().to_string();
    let tls = [
        "--response-header-timeout-seconds",
        "60",
        "--peer-ca-file",
        &ca_file,
    ];
    proxy_flags(peers, local, &tls)
}

/// A peer of the proxy under test: a 1.34 stand-in, reached through a relay that can freeze.
struct Peer {
    standin: StandInRunning,
    /// Over HTTP/2, the TLS mvproxy in front of the stand-in, which the relay reaches.
    _tls: Option<Proxy>,
    relay: relay::Relay,
}

/// The proxy under test (in-process) in front of a 1.31 stand-in, with 1.34 stand-ins as its
/// peers, each reached through its own relay: what the tests of hung peers start from.
struct Stage {
    proxy: Proxy,
    peers: Vec<Peer>,
    _local: StandInRunning,
    /// The CA of the peers' certificates (over HTTP/2), kept on disk while the test runs.
    _ca: Option<Ca>,
}

impl Stage {
    /// Peers `names` reached over plain HTTP/1.1, with a response-header timeout of a second.
    async fn http1(names: &[&str]) -> Stage {
        let local = standin_release("apiserver-a", &apis_131(), "v1.31.0").await;
        let mut peers = Vec::new();
        for name in names {
            let standin = standin_release(name, &apis_134(), "v1.34.0").await;
            let relay = relay::Relay::start(standin.addr).await;
            peers.push(Peer {
                standin,
                _tls: None,
                relay,
            });
        }
        let urls: Vec<String> = peers.iter().map(|p| p.relay.url()).collect();
        let proxy = Proxy::serve(&args(&named(names, &urls), &local.url())).await;
        Stage::ready(proxy, peers, local, None).await
    }

    /// Peers `names` reached as real API servers are, over TLS with ALPN `h2`, each a TLS
    /// mvproxy in front of a stand-in; the response-header timeout is a minute.
    async fn http2(names: &[&str]) -> Stage {
        let ca = Ca::new("cluster-ca");
        let local = standin_release("apiserver-a", &apis_131(), "v1.31.0").await;
        let mut peers = Vec::new();
        for name in names {
            let standin = standin_release(name, &apis_134(), "v1.34.0").await;
            let tls = tls_server(&ca, name, &standin).await;
            let relay = relay::Relay::start(tls.listen).await;
            peers.push(Peer {
                standin,
                _tls: Some(tls),
                relay,
            });
        }
        let urls: Vec<String> = peers
            .iter()
            .map(|p| format!("https://{}", p.relay.addr))
            .collect();
        let proxy = Proxy::serve(&tls_args(&ca, &named(names, &urls), &local.url())).await;
        Stage::ready(proxy, peers, local, Some(ca)).await
    }

    /// Waits until the proxy is ready and has read every peer's discovery (over HTTP/2, the
    /// connections through which requests go are then open).
    async fn ready(proxy: Proxy, peers: Vec<Peer>, local: StandInRunning, ca: Option<Ca>) -> Stage {
        proxy.ready().await;
        wait_all_up(&proxy).await;
        Stage {
            proxy,
            peers,
            _local: local,
            _ca: ca,
        }
    }
}

/// `(name, url)` pairs for `--peer`.
fn named<'a>(names: &[&'a str], urls: &'a [String]) -> Vec<(&'a str, &'a str)> {
    names
        .iter()
        .copied()
        .zip(urls.iter().map(String::as_str))
        .collect()
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
    // A process: its log lines are read below.
    let proxy = Proxy::start(&args(
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
    // The request that apiserver-b refused was answered by apiserver-c, and is counted and
    // logged as apiserver-c's: every request, none as apiserver-b's.
    assert_eq!(peer_requests(&m, "apiserver-c"), (2 * ROUND) as f64, "{m}");
    assert_eq!(peer_requests(&m, "apiserver-b"), 0.0, "{m}");
    let logged = logged_peers(&proxy);
    assert_eq!(logged.len(), 2 * ROUND, "{logged:?}");
    assert!(logged.iter().all(|p| p == "apiserver-c"), "{logged:?}");
}

#[tokio::test]
async fn a_peer_hung_under_http2_is_noticed_by_an_unanswered_ping_and_reads_go_elsewhere() {
    let stage = Stage::http2(&["apiserver-b", "apiserver-c"]).await;
    let (proxy, to_b) = (&stage.proxy, &stage.peers[0].relay);

    // apiserver-b hangs: its open connection and new ones carry nothing more to it.
    to_b.stall();
    for i in 0..ROUND {
        let r = list(proxy).await;
        assert_eq!(r.status, StatusCode::OK, "list {i}: {}", r.text());
        assert_eq!(r.header("x-standin-server"), "apiserver-c");
    }
    // The read sent to it was ended by the PING it did not answer, not by the response-header
    // timeout (a minute), and it is marked.
    let seen = server(proxy, "apiserver-b").await;
    assert_eq!(seen["state"], "suspect", "{seen}");
    let error = seen["error"].as_str().unwrap_or_default();
    assert!(error.contains("keep-alive timed out"), "{seen}");
    let m = metrics(proxy).await;
    assert_eq!(peer_requests(&m, "apiserver-c"), ROUND as f64, "{m}");

    // It answers again: a probe brings it back.
    to_b.resume();
    wait_discovery(proxy, |s| {
        s.iter()
            .any(|s| s["id"] == "apiserver-b" && s["state"] == "up")
    })
    .await;
}

#[tokio::test]
async fn a_write_on_a_connection_whose_ping_went_unanswered_says_it_may_have_been_applied() {
    let stage = Stage::http2(&["apiserver-b"]).await;
    let (proxy, to_b) = (&stage.proxy, &stage.peers[0].relay);

    // The only server of the GVR hangs as the create reaches it: the unanswered PING ends the
    // request (not the minute of the response-header timeout), and the client is told that
    // the create may have been applied, with nothing inviting it to send it again.
    to_b.stall();
    let r = create(proxy, "lc-ambiguous").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text());
    let msg = r.json()["message"].as_str().unwrap_or_default().to_owned();
    assert!(
        msg.contains("apiserver-b")
            && msg.contains("keep-alive timed out")
            && msg.contains("may still have been applied"),
        "{msg}"
    );
    assert_eq!(r.header("retry-after"), "", "no retry offered");
}

#[tokio::test]
async fn a_peer_that_hangs_under_a_watch_alone_is_marked_by_the_unanswered_ping() {
    let stage = Stage::http2(&["apiserver-b"]).await;
    let (proxy, to_b) = (&stage.proxy, &stage.peers[0].relay);

    // A watch through the proxy to apiserver-b, open, without events; then apiserver-b hangs.
    // No request waits for an answer from it, so none fails: the unanswered PING on the
    // watch's connection marks it all the same, and the watch ends for its client to renew.
    let mut h1 = conn::H1::plain(proxy.listen).await;
    let watch = h1
        .open(conn::req(
            Method::GET,
            &format!("{NEW_ONLY}?watch=true"),
            &[],
            Bytes::new(),
        ))
        .await;
    assert_eq!(watch.status(), StatusCode::OK);
    to_b.stall();
    wait_discovery(proxy, |s| {
        s.iter()
            .any(|s| s["id"] == "apiserver-b" && s["state"] == "suspect")
    })
    .await;
    let seen = server(proxy, "apiserver-b").await;
    let error = seen["error"].as_str().unwrap_or_default();
    assert!(error.contains("keep-alive timed out"), "{seen}");
    let ended = tokio::time::timeout(PATIENCE, watch.into_body().collect()).await;
    assert!(ended.is_ok(), "the watch ended");
}

/// A `POST` of `body`'s first half to `path` on `addr` (chunked), then `between` runs, and
/// the rest is never sent. Returns the status and the response body.
async fn post_half(
    addr: std::net::SocketAddr,
    path: &str,
    body: &[u8],
    between: impl std::future::Future<Output = ()>,
) -> (u16, String) {
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let first = &body[..body.len() / 2];
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n",
        first.len()
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    conn.write_all(first).await.unwrap();
    conn.write_all(b"\r\n").await.unwrap();
    between.await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, conn.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test]
async fn a_write_whose_sending_failed_mid_body_says_it_may_have_been_applied() {
    let stage = Stage::http1(&["apiserver-b", "apiserver-c"]).await;
    let proxy = &stage.proxy;
    let (p1, to_p1) = (&stage.peers[0].standin, &stage.peers[0].relay);
    let (p2, to_p2) = (&stage.peers[1].standin, &stage.peers[1].relay);

    // The create's first half reaches whichever server it was sent to; then that server's
    // connections break (it crashed mid-request), before the rest was sent.
    let before = (to_p1.forwarded(), to_p2.forwarded());
    let cut_where_it_went = async {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if to_p1.forwarded() > before.0 {
                to_p1.cut();
                return;
            }
            if to_p2.forwarded() > before.1 {
                to_p2.cut();
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the create never reached a server"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    };
    let (status, body) = post_half(
        proxy.listen,
        NEW_ONLY,
        &lease_candidate("lc-cut"),
        cut_where_it_went,
    )
    .await;
    // Not sent to the other server (part of it may have been applied), and the client is
    // told so.
    assert_eq!(status, 503, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let msg = v["message"].as_str().unwrap_or_default();
    assert!(msg.contains("may still have been applied"), "{body}");
    // The stand-ins record a request as it arrives: the one it was cut at, and no other.
    assert_eq!(
        creates_at(p1) + creates_at(p2),
        1,
        "sent to one server only"
    );
}

#[tokio::test]
async fn a_hung_peer_costs_one_timeout_a_read_is_answered_elsewhere_and_it_comes_back() {
    let stage = Stage::http1(&["apiserver-b", "apiserver-c"]).await;
    let (proxy, to_p1) = (&stage.proxy, &stage.peers[0].relay);

    // apiserver-b accepts connections and never answers (a SIGSTOPped process).
    to_p1.stall();
    for i in 0..ROUND {
        let r = list(proxy).await;
        assert_eq!(r.status, StatusCode::OK, "list {i}: {}", r.text());
        assert_eq!(r.header("x-standin-server"), "apiserver-c");
    }
    let b = server(proxy, "apiserver-b").await;
    assert_eq!(b["up"], false, "a timeout marks it: {b}");
    assert_eq!(b["state"], "suspect", "{b}");
    // While it hangs, writes go to the other server only.
    for i in 0..ROUND / 4 {
        let r = create(proxy, &format!("lc-{i}")).await;
        assert_eq!(r.status, StatusCode::CREATED, "create {i}: {}", r.text());
    }

    // It answers again: a probe of its discovery brings it back, and it is chosen again.
    to_p1.resume();
    wait_discovery(proxy, |s| {
        s.iter()
            .any(|s| s["id"] == "apiserver-b" && s["up"] == true && s["state"] == "up")
    })
    .await;
    let mut at_b = 0;
    for _ in 0..ROUND {
        let r = list(proxy).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        at_b += usize::from(r.header("x-standin-server") == "apiserver-b");
    }
    assert!(at_b > 0, "apiserver-b is chosen again once it answers");
    let m = metrics(proxy).await;
    assert!(
        m.contains(r#"mvproxy_peer_up{peer="apiserver-b"} 1"#),
        "{m}"
    );
}

#[tokio::test]
async fn a_write_that_timed_out_on_a_hung_peer_is_a_504_saying_it_may_have_been_applied() {
    let stage = Stage::http1(&["apiserver-b", "apiserver-c"]).await;
    let proxy = &stage.proxy;
    let (p1, to_p1) = (&stage.peers[0].standin, &stage.peers[0].relay);
    let (p2, to_p2) = (&stage.peers[1].standin, &stage.peers[1].relay);

    // Both hang: wherever the write goes, its bytes reach a server that does not answer.
    to_p1.stall();
    to_p2.stall();
    let r = create(proxy, "lc-ambiguous").await;
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
    while creates_at(p1) + creates_at(p2) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the write never landed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(creates_at(p1) + creates_at(p2), 1, "sent once, never twice");

    // A read that timed out is not such a case: it says nothing of the sort.
    to_p1.stall();
    to_p2.stall();
    wait_discovery(proxy, |s| s.iter().all(|s| s["up"] == true)).await;
    let r = list(proxy).await;
    assert_eq!(r.status, StatusCode::GATEWAY_TIMEOUT, "{}", r.text());
    let msg = r.json()["message"].as_str().unwrap().to_owned();
    assert!(!msg.contains("may still have been applied"), "{msg}");
}

/// How [`bad_server`] answers every request.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Bad {
    /// `200` declaring a 50 MB body (the fetch stops at its limit).
    Oversize,
    /// `200` with a body that is not JSON.
    Malformed,
}

/// A server on loopback that answers every HTTP/1.1 request as `mode` says, read anew for
/// each connection.
async fn bad_server(mode: tokio::sync::watch::Receiver<Bad>) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let answer: &[u8] = match *mode.borrow() {
                Bad::Oversize => b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 52428800\r\n\r\n{\"kind\":",
                Bad::Malformed => b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 9\r\n\r\n{not json",
            };
            tokio::spawn(async move {
                let mut head = [0u8; 4096];
                let _ = conn.read(&mut head).await;
                let _ = conn.write_all(answer).await;
                // held open, as a server still sending would
                tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            });
        }
    });
    addr
}

/// `/debug/discovery` says why a suspect peer is still excluded (its latest probe's failure,
/// and when) beside the request's failure that made it suspect, and a healthy probe clears
/// both.
#[tokio::test]
async fn a_suspect_peer_shows_its_latest_probes_failure_beside_the_first_and_recovers() {
    let stage = Stage::http1(&["apiserver-b", "apiserver-c"]).await;
    let (proxy, to_b) = (&stage.proxy, &stage.peers[0].relay);
    let reason = |s: &Value, key: &str| s[key].as_str().unwrap_or_default().to_owned();
    let of_b = |servers: &[Value]| -> Value {
        servers
            .iter()
            .find(|s| s["id"] == "apiserver-b")
            .cloned()
            .unwrap_or_default()
    };

    // hang: a request that B never answers makes it suspect
    to_b.stall();
    for _ in 0..ROUND {
        if server(proxy, "apiserver-b").await["state"] == "suspect" {
            break;
        }
        assert_eq!(list(proxy).await.status, StatusCode::OK);
    }
    let b = server(proxy, "apiserver-b").await;
    assert_eq!(b["state"], "suspect", "{b}");
    assert!(
        reason(&b, "error").contains("did not answer within 1s"),
        "{b}"
    );
    assert_eq!(b["suspected_by"]["error"], b["error"], "{b}");
    let first = b["suspected_by"].clone();

    // oversize: B's probes now read a document over the limit
    let (set_mode, mode) = tokio::sync::watch::channel(Bad::Oversize);
    let bad = bad_server(mode).await;
    to_b.aim(bad);
    to_b.cut();
    to_b.resume();
    wait_discovery(proxy, |s| reason(&of_b(s), "error").contains("larger than")).await;
    let b = server(proxy, "apiserver-b").await;
    assert_eq!(b["state"], "suspect", "still excluded: {b}");
    assert!(
        reason(&b, "error").contains("--max-discovery-document-bytes"),
        "{b}"
    );
    assert!(
        reason(&b, "error").contains("52428800"),
        "its Content-Length: {b}"
    );
    assert_eq!(
        b["suspected_by"], first,
        "the first failure kept beside it: {b}"
    );
    assert!(b["error_at"].as_f64() > first["at"].as_f64(), "{b}");

    // malformed: its own reason, the first failure still beside it
    set_mode.send_replace(Bad::Malformed);
    to_b.cut();
    wait_discovery(proxy, |s| reason(&of_b(s), "error").contains("undecodable")).await;
    let b = server(proxy, "apiserver-b").await;
    assert_eq!(b["state"], "suspect", "{b}");
    assert_eq!(b["suspected_by"], first, "{b}");

    // healthy: both cleared
    to_b.aim(stage.peers[0].standin.addr);
    to_b.cut();
    wait_discovery(proxy, |s| of_b(s)["state"] == "up").await;
    let b = server(proxy, "apiserver-b").await;
    assert!(b["error"].is_null() && b["error_at"].is_null(), "{b}");
    assert!(b["suspected_by"].is_null(), "{b}");
}
