//! Watches (existing then new events, from a resource version) and upgraded tunnels.

use super::*;

#[tokio::test]
async fn watch_streams_existing_then_new_events() -> TestResult {
    let server = start("watch").await?;
    server.insert(
        "apps",
        "v1",
        "deployments",
        Some("default"),
        json!({"metadata": {"name": "old"}}),
    );
    let url = format!(
        "{}/apis/apps/v1/namespaces/default/deployments?watch=true",
        server.url()
    );
    let response = client()
        .request(request(Method::GET, &url, &[], "")?)
        .await?;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers().get(CONTENT_TYPE).map(|v| v.as_bytes()),
        Some(&b"application/json"[..])
    );
    assert_eq!(
        response
            .headers()
            .get(TRANSFER_ENCODING)
            .map(|v| v.as_bytes()),
        Some(&b"chunked"[..])
    );
    let mut body = response.into_body();
    let mut pending = Vec::new();

    let first = next_event(&mut body, &mut pending).await?;
    assert_eq!(
        (
            first["type"].clone(),
            first["object"]["metadata"]["name"].clone()
        ),
        (json!("ADDED"), json!("old"))
    );
    assert_eq!(
        (
            first["object"]["kind"].clone(),
            first["object"]["apiVersion"].clone()
        ),
        (json!("Deployment"), json!("apps/v1"))
    );

    // Other namespaces and resources are not this watch's business.
    server.insert(
        "apps",
        "v1",
        "deployments",
        Some("elsewhere"),
        json!({"metadata": {"name": "skip"}}),
    );
    server.insert(
        "apps",
        "v1",
        "replicasets",
        Some("default"),
        json!({"metadata": {"name": "skip"}}),
    );
    server.insert(
        "apps",
        "v1",
        "deployments",
        Some("default"),
        json!({"metadata": {"name": "new"}}),
    );
    let added = next_event(&mut body, &mut pending).await?;
    assert_eq!(
        (
            added["type"].clone(),
            added["object"]["metadata"]["name"].clone()
        ),
        (json!("ADDED"), json!("new"))
    );

    server.insert(
        "apps",
        "v1",
        "deployments",
        Some("default"),
        json!({"metadata": {"name": "new"}, "spec": {"replicas": 3}}),
    );
    let modified = next_event(&mut body, &mut pending).await?;
    assert_eq!(
        modified["object"]["metadata"]["uid"],
        added["object"]["metadata"]["uid"]
    );
    assert_eq!(
        (
            modified["type"].clone(),
            modified["object"]["spec"]["replicas"].clone()
        ),
        (json!("MODIFIED"), json!(3))
    );

    send(
        Method::DELETE,
        &format!(
            "{}/apis/apps/v1/namespaces/default/deployments/old",
            server.url()
        ),
        &[],
        "",
    )
    .await?;
    let deleted = next_event(&mut body, &mut pending).await?;
    assert_eq!(
        (
            deleted["type"].clone(),
            deleted["object"]["metadata"]["name"].clone()
        ),
        (json!("DELETED"), json!("old"))
    );
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn watch_from_a_resource_version_replays_only_later_events() -> TestResult {
    let server = start("watch-rv").await?;
    let cms = format!("{}/api/v1/namespaces/default/configmaps", server.url());
    post(&cms, &json!({"metadata": {"name": "before"}})).await?;
    let rv = get(&cms, "application/json").await?.json()?["metadata"]["resourceVersion"]
        .as_str()
        .ok_or("rv")?
        .to_owned();
    post(&cms, &json!({"metadata": {"name": "after"}})).await?;

    let url = format!("{cms}?watch=1&resourceVersion={rv}&fieldSelector=metadata.name%3Dafter");
    let response = client()
        .request(request(Method::GET, &url, &[], "")?)
        .await?;
    let mut body = response.into_body();
    let mut pending = Vec::new();
    let replayed = next_event(&mut body, &mut pending).await?;
    assert_eq!(replayed["object"]["metadata"]["name"], "after");

    let url = format!("{cms}?watch=true&timeoutSeconds=1");
    let response = client()
        .request(request(Method::GET, &url, &[], "")?)
        .await?;
    let all = tokio::time::timeout(WAIT, response.into_body().collect())
        .await??
        .to_bytes();
    assert_eq!(
        all.split(|&b| b == b'\n').filter(|l| !l.is_empty()).count(),
        2
    );
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn upgrade_answers_101_and_echoes_the_tunnel() -> TestResult {
    let server = start("tunnel").await?;
    let stream = tokio::net::TcpStream::connect(server.addr).await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(stream)).await?;
    tokio::spawn(connection.with_upgrades());
    let req = Request::post("/api/v1/namespaces/default/pods/x/exec?command=sh&stdin=true")
        .header("host", server.addr.to_string())
        .header("connection", "Upgrade")
        .header("upgrade", "SPDY/3.1")
        .header("x-stream-protocol-version", "v5.channel.k8s.io")
        .header("x-stream-protocol-version", "v4.channel.k8s.io")
        .body(Full::default())?;
    let response = sender.send_request(req).await?;
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    assert_eq!(header("upgrade").as_deref(), Some("SPDY/3.1"));
    assert_eq!(
        header("x-stream-protocol-version").as_deref(),
        Some("v5.channel.k8s.io")
    );
    assert_eq!(header(SERVER_HEADER).as_deref(), Some("tunnel"));

    let mut tunnel = TokioIo::new(hyper::upgrade::on(response).await?);
    for message in [&b"hello through the tunnel"[..], b"\x00\x01binary\xff"] {
        tunnel.write_all(message).await?;
        let mut echoed = vec![0; message.len()];
        tokio::time::timeout(WAIT, tunnel.read_exact(&mut echoed)).await??;
        assert_eq!(echoed, message);
    }

    // A plain request to the same subresource is not upgraded.
    let plain = get(
        &format!("{}/api/v1/namespaces/default/pods/x/exec", server.url()),
        "*/*",
    )
    .await?;
    assert_eq!(plain.status, StatusCode::BAD_REQUEST);
    server.shutdown().await;
    Ok(())
}
