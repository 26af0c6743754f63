//! Limits that keep a proxy standing: an oversized request head or body, too many
//! connections, an oversized discovery document, a stalled upstream. Each gets its documented
//! answer, and the proxy keeps serving everyone else.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use integration::conn::{H1, H2, assert_status, req, req_with, streamed};
use integration::*;

fn with(mut args: Vec<String>, extra: &[&str]) -> Vec<String> {
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

#[tokio::test]
async fn an_oversized_request_head_gets_431_and_the_proxy_keeps_serving() {
    let a = standin("apiserver-a", &apis_134()).await;
    let p = Proxy::serve(&with(
        proxy_args("apiserver-a", &a.url(), &[]),
        &["--max-request-header-bytes", "16384"],
    ))
    .await;
    p.ready().await;
    let under = "u".repeat(12_000);
    let over = "o".repeat(20_000);

    // HTTP/1.1, under the limit: reaches the API server
    let mut c = H1::plain(p.listen).await;
    let r = c
        .send(req(
            Method::GET,
            CONFIGMAPS,
            &[("x-big", &under)],
            Bytes::new(),
        ))
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());

    // over it: hyper's own 431 (no body: the request was never parsed), and the connection
    // is closed
    let mut c = H1::plain(p.listen).await;
    let r = c
        .send(req(
            Method::GET,
            CONFIGMAPS,
            &[("x-big", &over)],
            Bytes::new(),
        ))
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    assert!(r.body.is_empty(), "{}", r.text());
    assert!(c.closed().await, "the connection is closed after a 431");

    // HTTP/2: the limit is the announced SETTINGS_MAX_HEADER_LIST_SIZE; a client that sends
    // more anyway gets a bare 431 on that stream, and the connection stays usable
    let mut h2 = H2::plain(p.listen).await;
    let r = h2
        .send(req(
            Method::GET,
            CONFIGMAPS,
            &[("x-big", &under)],
            Bytes::new(),
        ))
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let r = h2
        .send(req(
            Method::GET,
            CONFIGMAPS,
            &[("x-big", &over)],
            Bytes::new(),
        ))
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    let r = h2
        .send(req(Method::GET, CONFIGMAPS, &[], Bytes::new()))
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());

    assert!(
        requests_for(&a, "configmaps")
            .iter()
            .all(|r| !r.headers.contains_key("x-big") || r.headers["x-big"].len() < 16_384),
        "nothing over the limit reached the API server"
    );
    let r = get(&format!("{}{CONFIGMAPS}", p.url()), &[]).await.unwrap();
    assert_eq!(r.status, StatusCode::OK, "the proxy keeps serving");
}

#[tokio::test]
async fn an_oversized_request_body_gets_413_whether_declared_or_streamed() {
    let a = standin("apiserver-a", &apis_134()).await;
    let p = Proxy::serve(&with(
        proxy_args("apiserver-a", &a.url(), &[]),
        &["--max-request-body-bytes", "4096"],
    ))
    .await;
    p.ready().await;
    let object = |name: &str, pad: usize| {
        let mut o = cluster_object(name);
        o["data"] = serde_json::json!({ "pad": "p".repeat(pad) });
        Bytes::from(o.to_string())
    };
    let json = [("content-type", "application/json")];

    // under the limit, with a length or streamed: created
    let mut c = H1::plain(p.listen).await;
    let r = c
        .send(req(Method::POST, CONFIGMAPS, &json, object("small", 1000)))
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    let body = object("small-streamed", 1000);
    let chunks = body.chunks(500).map(Bytes::copy_from_slice).collect();
    let r = c
        .send(req_with(Method::POST, CONFIGMAPS, &json, streamed(chunks)))
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());

    // over it by Content-Length: refused before any upstream is contacted
    let before = requests_for(&a, "configmaps").len();
    let mut c = H1::plain(p.listen).await;
    let r = c
        .send(req(Method::POST, CONFIGMAPS, &json, object("big", 8000)))
        .await
        .unwrap();
    let msg = assert_status(&r, StatusCode::PAYLOAD_TOO_LARGE, "RequestEntityTooLarge");
    assert!(
        msg.contains("4096") && msg.contains("--max-request-body-bytes"),
        "{msg}"
    );
    assert_eq!(
        requests_for(&a, "configmaps").len(),
        before,
        "nothing reached the API server"
    );

    // over it while streaming (no length): stopped at the limit, the same 413
    let body = object("big-streamed", 8000);
    let chunks = body.chunks(1000).map(Bytes::copy_from_slice).collect();
    let mut c = H1::plain(p.listen).await;
    let r = c
        .send(req_with(Method::POST, CONFIGMAPS, &json, streamed(chunks)))
        .await
        .unwrap();
    assert_status(&r, StatusCode::PAYLOAD_TOO_LARGE, "RequestEntityTooLarge");

    // the same over HTTP/2
    let mut h2 = H2::plain(p.listen).await;
    let r = h2
        .send(req(Method::POST, CONFIGMAPS, &json, object("big-h2", 8000)))
        .await
        .unwrap();
    assert_status(&r, StatusCode::PAYLOAD_TOO_LARGE, "RequestEntityTooLarge");
    let body = object("big-h2-streamed", 8000);
    let chunks = body.chunks(1000).map(Bytes::copy_from_slice).collect();
    let r = h2
        .send(req_with(Method::POST, CONFIGMAPS, &json, streamed(chunks)))
        .await
        .unwrap();
    assert_status(&r, StatusCode::PAYLOAD_TOO_LARGE, "RequestEntityTooLarge");

    // bodies bigger than the socket buffers: the refused rest is drained, so an HTTP/1.1
    // client still writing gets to read the 413 (without draining it sees a write error)
    let big = Bytes::from(vec![b'x'; 8 << 20]);
    let mut c = H1::plain(p.listen).await;
    let r = c
        .send(req(Method::POST, CONFIGMAPS, &json, big.clone()))
        .await
        .unwrap();
    assert_status(&r, StatusCode::PAYLOAD_TOO_LARGE, "RequestEntityTooLarge");
    let chunks = big.chunks(64 << 10).map(Bytes::copy_from_slice).collect();
    let mut c = H1::plain(p.listen).await;
    let r = c
        .send(req_with(Method::POST, CONFIGMAPS, &json, streamed(chunks)))
        .await
        .unwrap();
    assert_status(&r, StatusCode::PAYLOAD_TOO_LARGE, "RequestEntityTooLarge");

    // the proxy subresource is streamed to its backend without a limit, as kube-apiserver does
    let proxied = "/api/v1/namespaces/default/services/web/proxy/upload";
    let mut c = H1::plain(p.listen).await;
    let r = c
        .send(req(
            Method::POST,
            proxied,
            &[],
            Bytes::from(vec![b'x'; 8000]),
        ))
        .await
        .unwrap();
    assert_ne!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", r.text());
    assert_eq!(requests_for(&a, "/proxy/upload").len(), 1);

    // nothing big was stored, and the proxy keeps serving
    let r = get(&format!("{}{CONFIGMAPS}", p.url()), &[]).await.unwrap();
    assert_eq!(r.status, StatusCode::OK);
    let names: Vec<String> = r.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["small", "small-streamed"]);
}

fn cluster_object(name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
    })
}

#[tokio::test]
async fn connections_over_the_limit_get_503_and_are_closed_until_one_frees() {
    let a = standin("apiserver-a", &apis_134()).await;
    let p = Proxy::start(&with(
        proxy_args("apiserver-a", &a.url(), &[]),
        &["--max-connections", "2"],
    ))
    .await;
    p.ready().await;
    let list = || req(Method::GET, CONFIGMAPS, &[], Bytes::new());

    // two keep-alive connections hold both slots
    let mut first = H1::plain(p.listen).await;
    assert_eq!(first.send(list()).await.unwrap().status, StatusCode::OK);
    let mut second = H1::plain(p.listen).await;
    assert_eq!(second.send(list()).await.unwrap().status, StatusCode::OK);

    // a third gets a retryable 503 Status, and is closed
    let mut third = H1::plain(p.listen).await;
    let r = third.send(list()).await.unwrap();
    let msg = assert_status(&r, StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable");
    assert!(msg.contains("--max-connections"), "{msg}");
    assert_eq!(r.header("retry-after"), "1", "client-go retries it");
    assert_eq!(r.header("connection"), "close");
    assert!(third.closed().await);
    // so does an HTTP/2 one (then GOAWAY)
    let mut h2 = H2::plain(p.listen).await;
    let r = h2.send(list()).await.unwrap();
    assert_status(&r, StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable");
    assert!(
        tokio::time::timeout(PATIENCE, h2.conn).await.is_ok(),
        "the HTTP/2 connection is closed"
    );
    let before = requests_for(&a, "configmaps").len();
    assert_eq!(before, 2, "refused requests never reach the API server");

    // the held connections still work
    assert_eq!(first.send(list()).await.unwrap().status, StatusCode::OK);

    // one closes: a new connection is served again
    drop(second);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let mut c = H1::plain(p.listen).await;
        if c.send(list()).await.unwrap().status == StatusCode::OK {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slot was never freed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        p.log()
            .iter()
            .any(|l| l.contains("connection limit reached")),
        "the operator is told"
    );
}

/// The server `id` in `/debug/discovery`.
async fn server_state(p: &Proxy, id: &str) -> serde_json::Value {
    let debug = get(&format!("{}/debug/discovery", p.admin_url()), &[])
        .await
        .unwrap()
        .json();
    debug["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("no {id} in {debug}"))
        .clone()
}

#[tokio::test]
async fn an_oversized_discovery_document_fails_the_fetch_and_keeps_the_last_good_view() {
    let a = standin("apiserver-a", &apis_134()).await;
    let b = standin("apiserver-b", &apis_131()).await;
    let b_addr = b.addr;
    // both fixtures are about 60 KB
    let p = Proxy::serve(&with(
        proxy_args("apiserver-a", &a.url(), &[("apiserver-b", &b.url())]),
        &["--max-discovery-document-bytes", "100000"],
    ))
    .await;
    p.ready().await;
    crate::cluster::wait_all_up(&p).await;
    let r = get(&format!("{}{OLD_ONLY}", p.url()), &[]).await.unwrap();
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let gvrs = server_state(&p, "apiserver-b").await["gvrs"].clone();

    // apiserver-b restarts serving a document over the limit (valid JSON: trailing spaces)
    b.shutdown().await;
    let padded = format!("{}{}", apis_131(), " ".repeat(200_000));
    let _b = StandIn::new("apiserver-b", &padded)
        .unwrap()
        .start(b_addr)
        .await
        .expect("restart apiserver-b on its port");
    crate::cluster::wait_discovery(&p, |servers| {
        servers.iter().any(|s| {
            s["id"] == "apiserver-b"
                && s["up"] == false
                && s["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("larger than 100000 bytes"))
        })
    })
    .await;
    let state = server_state(&p, "apiserver-b").await;
    let error = state["error"].as_str().unwrap();
    assert!(error.contains("--max-discovery-document-bytes"), "{error}");
    assert_eq!(state["gvrs"], gvrs, "the last good view is kept");

    // what only apiserver-b served is a retryable 503, not a false 404; the rest is served
    let r = get(&format!("{}{OLD_ONLY}", p.url()), &[]).await.unwrap();
    let msg = assert_status(&r, StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable");
    assert!(msg.contains("apiserver-b"), "{msg}");
    let r = get(&format!("{}{CONFIGMAPS}", p.url()), &[]).await.unwrap();
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test]
async fn an_upstream_that_accepts_and_never_answers_gets_504_within_the_timeout() {
    // the local "API server" accepts connections, reads nothing and answers nothing
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("http://{}", silent.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((c, _)) = silent.accept().await {
            conns.push(c);
        }
    });
    let p = Proxy::serve(&with(
        proxy_args("apiserver-a", &silent_url, &[]),
        &["--response-header-timeout-seconds", "1"],
    ))
    .await;
    let (list, version) = (
        format!("{}{CONFIGMAPS}", p.url()),
        format!("{}/version", p.url()),
    );
    // a create whose body all arrived is the upstream's to answer as well: still its 504
    let create = request(
        Method::POST,
        &list,
        &[("content-type", "application/json")],
        Bytes::from_static(br#"{"metadata":{"name":"cm"}}"#),
    );
    let (r1, r2, r3) = tokio::join!(get(&list, &[]), get(&version, &[]), create);
    for r in [r1.unwrap(), r2.unwrap(), r3.unwrap()] {
        let msg = assert_status(&r, StatusCode::GATEWAY_TIMEOUT, "Timeout");
        assert!(
            msg.contains("apiserver-a did not answer within 1s"),
            "{msg}"
        );
    }
    let r = get(&format!("{}/healthz", p.admin_url()), &[])
        .await
        .unwrap();
    assert_eq!(
        r.status,
        StatusCode::OK,
        "the admin listener is not held up"
    );
    held.abort();
}

#[tokio::test]
async fn a_peer_that_stalls_gets_504_and_local_requests_go_on() {
    let a = standin("apiserver-a", &apis_134()).await;
    let b = standin("apiserver-b", &apis_131()).await;
    let relay = relay::Relay::start(b.addr).await;
    // a long refresh interval: the stalled peer is still believed up when the request comes
    let mut args = proxy_args("apiserver-a", &a.url(), &[("apiserver-b", &relay.url())]);
    let at = args
        .iter()
        .position(|a| a == "--refresh-interval-seconds")
        .unwrap();
    args[at + 1] = "300".to_owned();
    let p = Proxy::serve(&with(args, &["--response-header-timeout-seconds", "1"])).await;
    p.ready().await;
    crate::cluster::wait_all_up(&p).await;
    let r = get(&format!("{}{OLD_ONLY}", p.url()), &[]).await.unwrap();
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());

    relay.stall();
    let (old, list) = (
        format!("{}{OLD_ONLY}", p.url()),
        format!("{}{CONFIGMAPS}", p.url()),
    );
    let (stalled, local) = tokio::join!(get(&old, &[]), get(&list, &[]));
    let stalled = stalled.unwrap();
    let msg = assert_status(&stalled, StatusCode::GATEWAY_TIMEOUT, "Timeout");
    assert!(
        msg.contains("apiserver-b did not answer within 1s"),
        "{msg}"
    );
    assert_eq!(local.unwrap().status, StatusCode::OK);
    let r = get(&format!("{}{CONFIGMAPS}", p.url()), &[]).await.unwrap();
    assert_eq!(r.status, StatusCode::OK, "the proxy keeps serving");
}

#[tokio::test]
async fn a_watch_outlives_the_response_header_timeout() {
    let a = standin("apiserver-a", &apis_134()).await;
    let timeout = 1;
    let p = Proxy::serve(&with(
        proxy_args("apiserver-a", &a.url(), &[]),
        &["--response-header-timeout-seconds", &timeout.to_string()],
    ))
    .await;
    p.ready().await;
    let mut c = H1::plain(p.listen).await;
    let watch = c
        .open(req(
            Method::GET,
            &format!("{CONFIGMAPS}?watch=true"),
            &[],
            Bytes::new(),
        ))
        .await;
    assert_eq!(watch.status(), StatusCode::OK);
    let mut body = watch.into_body();

    // well past the timeout, the watch still delivers
    tokio::time::sleep(Duration::from_secs(timeout * 2 + 1)).await;
    a.insert(
        "",
        "v1",
        "configmaps",
        Some("default"),
        cluster_object("late"),
    );
    let event = next_event(&mut body).await;
    assert_eq!(event["type"], "ADDED", "{event}");
    assert_eq!(event["object"]["metadata"]["name"], "late", "{event}");
}

/// The next watch event of `body` (one JSON object per line), bounded by [`PATIENCE`].
pub async fn next_event(body: &mut hyper::body::Incoming) -> serde_json::Value {
    use http_body_util::BodyExt;
    let mut buf = Vec::new();
    let read = async {
        loop {
            if let Some(end) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=end).collect();
                return serde_json::from_slice::<serde_json::Value>(&line).expect("event JSON");
            }
            let frame = body.frame().await.expect("watch open").expect("frame");
            if let Some(data) = frame.data_ref() {
                buf.extend_from_slice(data);
            }
        }
    };
    tokio::time::timeout(PATIENCE, read)
        .await
        .expect("an event within PATIENCE")
}
