//! What a user sees through the proxies: one cluster, no false 404, streaming watches, a fast
//! and clear 503 when the only server that could answer is down.

use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use integration::*;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::cluster::{Cluster, object, wait_discovery};

fn names(out: &str) -> Vec<&str> {
    out.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect()
}

#[tokio::test]
async fn kubectl_api_resources_lists_the_union_of_both_releases() {
    let c = Cluster::start().await;
    for proxy in [&c.proxy_a, &c.proxy_b] {
        let (ok, out, err) = Kubectl::new(&proxy.url())
            .run(&["api-resources", "-o", "name"])
            .await;
        assert!(ok, "{err}");
        let listed = names(&out);
        for want in [
            "podschedulingcontexts.resource.k8s.io", // 1.31 only
            "resourceclasses.resource.k8s.io",       // 1.31 only
            "leasecandidates.coordination.k8s.io",   // 1.34 only
            "mutatingadmissionpolicies.admissionregistration.k8s.io", // 1.34 only
            "deployments.apps",
            "pods",
        ] {
            assert!(
                listed.contains(&want),
                "{want} missing via {}: {listed:?}",
                proxy.url()
            );
        }
    }
    // Without the proxy, the old server alone does not list what only the new one serves:
    // the union above is mvproxy's doing.
    let (ok, out, err) = Kubectl::new(&c.b.url())
        .run(&["api-resources", "-o", "name"])
        .await;
    assert!(ok, "{err}");
    assert!(!names(&out).contains(&"leasecandidates.coordination.k8s.io"));
}

#[tokio::test]
async fn kubectl_get_of_a_peer_only_resource_is_proxied_in_one_hop() {
    let c = Cluster::start().await;
    c.b.insert(
        "resource.k8s.io",
        "v1alpha3",
        "podschedulingcontexts",
        Some("default"),
        object("resource.k8s.io/v1alpha3", "PodSchedulingContext", "psc-1"),
    );
    c.a.insert(
        "coordination.k8s.io",
        "v1beta1",
        "leasecandidates",
        Some("default"),
        object("coordination.k8s.io/v1beta1", "LeaseCandidate", "lc-1"),
    );

    let (ok, out, err) = Kubectl::new(&c.proxy_a.url())
        .run(&[
            "get",
            "podschedulingcontexts.v1alpha3.resource.k8s.io",
            "-n",
            "default",
            "-o",
            "name",
        ])
        .await;
    assert!(ok, "{err}");
    assert_eq!(names(&out), ["podschedulingcontext.resource.k8s.io/psc-1"]);
    // and the other way round, old proxy → new server
    let (ok, out, err) = Kubectl::new(&c.proxy_b.url())
        .run(&[
            "get",
            "leasecandidates.v1beta1.coordination.k8s.io",
            "-n",
            "default",
            "-o",
            "name",
        ])
        .await;
    assert!(ok, "{err}");
    assert_eq!(names(&out), ["leasecandidate.coordination.k8s.io/lc-1"]);

    // The old server received it once, marked as proxied; the new one never saw it.
    let at_b = requests_for(&c.b, "podschedulingcontexts");
    assert_eq!(at_b.len(), 1, "{at_b:?}");
    assert_eq!(at_b[0].headers["x-kubernetes-peer-proxied"], "true");
    assert!(requests_for(&c.a, "podschedulingcontexts").is_empty());

    let metrics = get(&format!("{}/metrics", c.proxy_a.admin_url()), &[])
        .await
        .unwrap()
        .text();
    assert!(
        metrics.contains(r#"mvproxy_rerouted_request_total{code="200",group="resource.k8s.io",version="v1alpha3",resource="podschedulingcontexts"} 1"#),
        "{metrics}"
    );

    // Lists and watches per client, what shows a relist storm: kubectl's list above, then a
    // `kubectl get` is one more list, a `kubectl get --watch` a watch.
    let (list, watch) = kubectl_lists(&c.proxy_a).await;
    assert_eq!((list, watch), (1, 0), "the peer-only list");
    let (ok, _, err) = Kubectl::new(&c.proxy_a.url())
        .run(&["get", "configmaps", "-n", "default", "-o", "name"])
        .await;
    assert!(ok, "{err}");
    assert_eq!(
        kubectl_lists(&c.proxy_a).await,
        (2, 0),
        "kubectl get configmaps"
    );
    // Bound to a name: the cache directory goes when the test ends, after kubectl is killed
    // (a temporary would remove it while kubectl still writes there).
    let kubectl = Kubectl::new(&c.proxy_a.url());
    let mut watching = kubectl
        .command(&[
            "get",
            "configmaps",
            "-n",
            "default",
            "--watch",
            "-o",
            "name",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("kubectl --watch");
    let deadline = Instant::now() + PATIENCE;
    while !requests_for(&c.a, "configmaps")
        .iter()
        .any(|r| r.path_and_query.contains("watch"))
    {
        assert!(
            Instant::now() < deadline,
            "the watch never reached apiserver-a"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // counted on arrival, while the watch is still open
    let (_, watch) = kubectl_lists(&c.proxy_a).await;
    assert_eq!(watch, 1, "kubectl get configmaps --watch");
    // held open from its answer until the client goes away
    until_watches_open(&c.proxy_a, 1).await;
    let _ = watching.kill().await;
    until_watches_open(&c.proxy_a, 0).await;
}

/// Waits (at most `PATIENCE`) until `mvproxy_client_watches_open` of client `kubectl` on
/// `proxy`'s `/metrics` reads `want`.
async fn until_watches_open(proxy: &Proxy, want: u64) {
    let series = "mvproxy_client_watches_open{client=\"kubectl\"} ";
    let deadline = Instant::now() + PATIENCE;
    loop {
        let text = get(&format!("{}/metrics", proxy.admin_url()), &[])
            .await
            .unwrap()
            .text();
        let open = text
            .lines()
            .find_map(|l| l.strip_prefix(series))
            .map_or(0, |v| v.parse().unwrap_or_else(|e| panic!("{v}: {e}")));
        if open == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "kubectl's watches open: {open}, want {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `mvproxy_client_requests_total` of client `kubectl` on `proxy`'s `/metrics`: lists,
/// watches (0 for a series not there).
async fn kubectl_lists(proxy: &Proxy) -> (u64, u64) {
    let text = get(&format!("{}/metrics", proxy.admin_url()), &[])
        .await
        .unwrap()
        .text();
    let count = |verb: &str| {
        let series =
            format!("mvproxy_client_requests_total{{client=\"kubectl\",verb=\"{verb}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&series))
            .map_or(0, |v| v.parse().unwrap_or_else(|e| panic!("{v}: {e}")))
    };
    (count("list"), count("watch"))
}

#[tokio::test]
async fn resources_both_serve_never_leave_the_local_server_and_unknown_ones_get_its_404() {
    let c = Cluster::start().await;
    let k = Kubectl::new(&c.proxy_a.url());
    for args in [
        ["get", "pods", "-A"],
        ["get", "deployments", "-A"],
        ["get", "flowschemas", "-A"],
    ] {
        let (ok, _, err) = k.run(&args).await;
        assert!(ok, "{args:?}: {err}");
    }
    for path in ["/pods", "/deployments", "/flowschemas"] {
        assert!(
            requests_for(&c.b, path).is_empty(),
            "{path} reached the peer"
        );
        assert!(
            !requests_for(&c.a, path).is_empty(),
            "{path} did not reach local"
        );
    }

    // served by nobody: the local server's own 404, unchanged
    let r = get(
        &format!("{}/apis/example.com/v1/widgets", c.proxy_a.url()),
        &[],
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.header("x-standin-server"), "apiserver-a");
    assert_eq!(r.text().trim_end(), "404 page not found");
    let r = get(
        &format!(
            "{}/apis/apps/v1/namespaces/default/widgets",
            c.proxy_a.url()
        ),
        &[],
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.header("x-standin-server"), "apiserver-a");
    assert_eq!(r.json()["reason"], "NotFound");
    // a peer's own 404 for an object it serves the kind of comes back unchanged too
    let r = get(&format!("{}{OLD_ONLY}/nope", c.proxy_a.url()), &[])
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.header("x-standin-server"), "apiserver-b");
}

#[tokio::test]
async fn the_loop_guard_keeps_a_proxied_request_local() {
    let c = Cluster::start().await;
    let r = get(
        &format!("{}{OLD_ONLY}", c.proxy_a.url()),
        &[("x-kubernetes-peer-proxied", "true")],
    )
    .await
    .unwrap();
    assert_eq!(
        r.header("x-standin-server"),
        "apiserver-a",
        "served locally, not proxied again"
    );
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(requests_for(&c.b, "podschedulingcontexts").is_empty());
}

#[tokio::test]
async fn kubectl_watch_streams_events_through_the_peer_hop() {
    let c = Cluster::start().await;
    let kubectl = Kubectl::new(&c.proxy_a.url());
    let mut watch = kubectl
        .command(&[
            "get",
            "podschedulingcontexts.v1alpha3.resource.k8s.io",
            "-n",
            "default",
            "-w",
            "-o",
            "name",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl -w");
    let mut lines = BufReader::new(watch.stdout.take().expect("stdout")).lines();
    // wait until the watch is established at the old server, then create objects there
    let deadline = Instant::now() + PATIENCE;
    while !requests_for(&c.b, "podschedulingcontexts")
        .iter()
        .any(|r| r.path_and_query.contains("watch"))
    {
        assert!(
            Instant::now() < deadline,
            "the watch never reached apiserver-b"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for name in ["w-1", "w-2"] {
        c.b.insert(
            "resource.k8s.io",
            "v1alpha3",
            "podschedulingcontexts",
            Some("default"),
            object("resource.k8s.io/v1alpha3", "PodSchedulingContext", name),
        );
        let line = tokio::time::timeout(PATIENCE, lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("event for {name} never arrived: not streamed"))
            .expect("read")
            .expect("line");
        assert_eq!(
            line.trim(),
            format!("podschedulingcontext.resource.k8s.io/{name}")
        );
    }
    let _ = watch.kill().await;
}

#[tokio::test]
async fn upgrades_are_tunnelled_through_the_peer_hop() {
    let c = Cluster::start().await;
    let mut s = tokio::net::TcpStream::connect(c.proxy_a.listen)
        .await
        .unwrap();
    let req = format!(
        "POST {OLD_ONLY}/psc-1/status HTTP/1.1\r\nHost: {}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nContent-Length: 0\r\n\r\n",
        c.proxy_a.listen
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(PATIENCE, s.read(&mut byte))
            .await
            .expect("101 in time")
            .unwrap();
        assert_eq!(
            n,
            1,
            "closed before the response head: {}",
            String::from_utf8_lossy(&head)
        );
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("x-standin-server: apiserver-b"), "{head}");
    s.write_all(b"hello through two proxies").await.unwrap();
    let mut echo = vec![0u8; 25];
    tokio::time::timeout(PATIENCE, s.read_exact(&mut echo))
        .await
        .expect("echo in time")
        .unwrap();
    assert_eq!(&echo, b"hello through two proxies");
}

#[tokio::test]
async fn a_down_peer_gives_a_fast_503_status_never_a_404_and_local_traffic_carries_on() {
    let c = Cluster::start().await;
    let Cluster {
        a,
        b: _b,
        proxy_a,
        proxy_b,
        ..
    } = c;
    proxy_b.kill().await;

    // Before and after mvproxy notices the peer is down, the answer is a 503 Status.
    for round in 0..2 {
        let started = Instant::now();
        let r = get(&format!("{}{OLD_ONLY}", proxy_a.url()), &[])
            .await
            .unwrap();
        assert_eq!(
            r.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "round {round}: {}",
            r.text()
        );
        let v = r.json();
        assert_eq!(v["kind"], "Status");
        assert_eq!(v["reason"], "ServiceUnavailable");
        assert_eq!(v["code"], 503);
        let msg = v["message"].as_str().unwrap();
        assert!(msg.contains("apiserver-b"), "names the peer: {msg}");
        assert!(r.header("retry-after") == "1", "retryable");
        assert!(started.elapsed() < PATIENCE, "bounded");
        if round == 0 {
            wait_discovery(&proxy_a, |s| {
                s.iter()
                    .any(|s| s["id"] == "apiserver-b" && s["up"] == false)
            })
            .await;
        }
    }
    // local traffic is unaffected
    let r = get(&format!("{}{PODS}", proxy_a.url()), &[]).await.unwrap();
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("x-standin-server"), "apiserver-a");
    // and what only the down peer served is still not a 404 after several refreshes
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let r = get(&format!("{}{OLD_ONLY}", proxy_a.url()), &[])
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    drop(a);

    let metrics = get(&format!("{}/metrics", proxy_a.admin_url()), &[])
        .await
        .unwrap()
        .text();
    assert!(
        metrics.contains(r#"mvproxy_peer_up{peer="apiserver-b"} 0"#),
        "{metrics}"
    );
    assert!(metrics.contains(r#"mvproxy_peer_proxy_errors_total{type="endpoint_resolution",group="resource.k8s.io",version="v1alpha3",resource="podschedulingcontexts"}"#), "{metrics}");
}

#[tokio::test]
async fn a_peer_never_seen_makes_unknown_resources_a_503_until_it_is() {
    let a = standin("apiserver-a", &apis_134()).await;
    // apiserver-b's listeners are bound, not yet served: its address is known, nothing
    // answers there
    let sockets_b = bind_sockets().await;
    let url_b = format!("http://{}", sockets_b.proxy.local_addr().unwrap());
    let mut args_a = proxy_args("apiserver-a", &a.url(), &[("apiserver-b", &url_b)]);
    // a connection to b is accepted by the kernel and never answered: give up on it soon
    args_a.extend([
        "--response-header-timeout-seconds".to_owned(),
        "1".to_owned(),
    ]);
    let proxy_a = Proxy::in_process(bind_sockets().await, &args_a).await;
    proxy_a.ready().await;
    // apiserver-b has never answered: mvproxy cannot know it does not serve this
    let r = get(&format!("{}{OLD_ONLY}", proxy_a.url()), &[])
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text());
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("apiserver-b")
    );
    // a resource local serves is served
    let r = get(&format!("{}{NEW_ONLY}", proxy_a.url()), &[])
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::OK);

    // once apiserver-b has been seen (a proxy in front of the old server on that port),
    // the peer-only resource is routed and a GVR nobody serves gets the local 404
    let b = standin("apiserver-b", &apis_131()).await;
    let proxy_b = Proxy::in_process(sockets_b, &proxy_args("apiserver-b", &b.url(), &[])).await;
    proxy_b.ready().await;
    crate::cluster::wait_all_up(&proxy_a).await;
    let r = get(&format!("{}{OLD_ONLY}", proxy_a.url()), &[])
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.header("x-standin-server"), "apiserver-b");
    let r = get(
        &format!("{}/apis/example.com/v1/widgets", proxy_a.url()),
        &[],
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.header("x-standin-server"), "apiserver-a");
}

#[tokio::test]
async fn request_bodies_and_credentials_reach_the_peer_as_sent() {
    let c = Cluster::start().await;
    let body = serde_json::to_vec(&object(
        "resource.k8s.io/v1alpha3",
        "PodSchedulingContext",
        "created",
    ))
    .unwrap();
    let r = request(
        Method::POST,
        &format!("{}{OLD_ONLY}?fieldManager=kubectl", c.proxy_a.url()),
        &[
            ("authorization", "Bearer secret-token"),
            ("impersonate-user", "alice"),
            ("content-type", "application/json"),
            ("x-remote-user", "system:admin"),
        ],
        body.into(),
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    let at_b = requests_for(&c.b, "podschedulingcontexts");
    let seen = &at_b[0];
    assert_eq!(
        seen.path_and_query,
        format!("{OLD_ONLY}?fieldManager=kubectl"),
        "query byte for byte"
    );
    assert_eq!(seen.headers["authorization"], "Bearer secret-token");
    assert_eq!(seen.headers["impersonate-user"], "alice");
    assert!(
        !seen.headers.contains_key("x-remote-user"),
        "a client's identity headers are never trusted"
    );
    assert_eq!(
        seen.headers["host"],
        c.b.addr.to_string(),
        "Host is rewritten on each hop"
    );
    let r = get(&format!("{}{OLD_ONLY}/created", c.proxy_a.url()), &[])
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::OK);
}

/// What the client of a watch across the peer hop reads after the peer's proxy is killed
/// between two events: `None` for a clean end of stream, `Some(error)` for a reset.
async fn watch_end_after_the_peer_dies(http2: bool) -> Option<String> {
    use http_body_util::BodyExt;
    use integration::conn::{H1, H2, req};

    let Cluster {
        a: _a,
        b,
        proxy_a,
        proxy_b,
        ..
    } = Cluster::start_processes().await; // killed below: a process that dies
    let watch = req(
        Method::GET,
        &format!("{OLD_ONLY}?watch=true"),
        &[],
        bytes::Bytes::new(),
    );
    let (resp, _keep) = if http2 {
        let mut h2 = H2::plain(proxy_a.listen).await;
        h2.sender.ready().await.expect("h2 ready");
        let resp = tokio::time::timeout(PATIENCE, h2.sender.send_request(watch))
            .await
            .expect("watch headers in time")
            .expect("watch opened");
        (resp, (Some(h2), None))
    } else {
        let mut h1 = H1::plain(proxy_a.listen).await;
        (h1.open(watch).await, (None, Some(h1)))
    };
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    b.insert(
        "resource.k8s.io",
        "v1alpha3",
        "podschedulingcontexts",
        Some("default"),
        object("resource.k8s.io/v1alpha3", "PodSchedulingContext", "w-1"),
    );
    let event = crate::limits::next_event(&mut body).await;
    assert_eq!(event["object"]["metadata"]["name"], "w-1", "{event}");
    // the peer's proxy goes away between two events: proxy A's upstream stream breaks
    proxy_b.kill().await;
    let end = tokio::time::timeout(PATIENCE, async {
        loop {
            match body.frame().await {
                None => return None,
                Some(Err(e)) => return Some(e.to_string()),
                // HTTP/2 may end the stream with an empty DATA frame
                Some(Ok(frame)) if frame.data_ref().is_some_and(|d| d.is_empty()) => {}
                Some(Ok(frame)) => panic!("no more events were sent, got {frame:?}"),
            }
        }
    })
    .await
    .expect("the watch ends when its upstream breaks: no hang");
    drop(proxy_a);
    end
}

/// A watch whose upstream breaks between two events ends as a server timeout ends it, so
/// client-go resumes from its last resourceVersion; a reset (HTTP/2 `RST_STREAM`, a chunked
/// body cut short) is reported as an `ERROR` event by client-go and printed by kubectl.
#[tokio::test]
async fn a_watch_across_the_peer_hop_ends_cleanly_when_the_peer_dies_over_http2() {
    assert_eq!(watch_end_after_the_peer_dies(true).await, None);
}

#[tokio::test]
async fn a_watch_across_the_peer_hop_ends_cleanly_when_the_peer_dies_over_http1() {
    assert_eq!(watch_end_after_the_peer_dies(false).await, None);
}
