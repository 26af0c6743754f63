//! What the stand-in records and names, how it stops, the timestamps it writes.

use super::*;

#[tokio::test]
async fn every_request_is_recorded_and_every_response_named() -> TestResult {
    let server = start("recorder").await?;
    let url = server.url();
    let headers = [
        ("x-kubernetes-peer-proxied", "true"),
        (
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ),
    ];
    let reply = send(
        Method::GET,
        &format!("{url}/api/v1/pods?limit=500"),
        &headers,
        "",
    )
    .await?;
    assert_eq!(
        reply.headers.get(SERVER_HEADER).map(|v| v.as_bytes()),
        Some(&b"recorder"[..])
    );
    let missing = get(&format!("{url}/nowhere"), "*/*").await?;
    assert_eq!(
        missing.headers.get(SERVER_HEADER).map(|v| v.as_bytes()),
        Some(&b"recorder"[..])
    );

    let log = server.requests();
    assert_eq!(log.len(), 2);
    assert_eq!(
        (log[0].method.clone(), log[0].path_and_query.as_str()),
        (Method::GET, "/api/v1/pods?limit=500")
    );
    assert_eq!(
        log[0]
            .headers
            .get("x-kubernetes-peer-proxied")
            .map(|v| v.as_bytes()),
        Some(&b"true"[..])
    );
    assert!(log[0].headers.contains_key("traceparent"));
    assert_eq!(log[1].path_and_query, "/nowhere");
    assert_eq!(
        log[1].headers.get(ACCEPT).map(|v| v.as_bytes()),
        Some(&b"*/*"[..])
    );
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn shutdown_closes_watches_and_releases_the_port() -> TestResult {
    let server = start("stop").await?;
    let addr = server.addr;
    let url = format!("{}/api/v1/pods?watch=true", server.url());
    let response = client()
        .request(request(Method::GET, &url, &[], "")?)
        .await?;
    let mut body = response.into_body();

    tokio::time::timeout(WAIT, server.shutdown()).await?;
    // The watch ends (cleanly or with a reset), rather than hanging.
    let ended = tokio::time::timeout(WAIT, async {
        while let Some(Ok(_)) = body.frame().await {}
    })
    .await;
    assert!(ended.is_ok(), "watch still open after shutdown");
    let rebound = tokio::net::TcpListener::bind(addr).await?;
    drop(rebound);
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    Ok(())
}

#[test]
fn timestamps_are_rfc3339_utc() {
    let at = |secs| rfc3339(std::time::UNIX_EPOCH + Duration::from_secs(secs));
    assert_eq!(at(0), "1970-01-01T00:00:00Z");
    assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
    assert_eq!(at(1_719_792_000 + 3_723), "2024-07-01T01:02:03Z");
}
