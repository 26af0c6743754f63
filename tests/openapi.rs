//! OpenAPI across the skew through mvproxy, with stand-ins of two releases: the merged
//! `/openapi/v3` index, a group-version's document from the server that serves it, the
//! hash scheme's caching and redirect, and the merged `/openapi/v2`.

use http::StatusCode;
use integration::*;
use serde_json::Value;

use crate::cluster::Cluster;

/// Served by the 1.31 stand-in (`apiserver-b`) only.
const B_ONLY: &str = "apis/flowcontrol.apiserver.k8s.io/v1beta3";
/// Served by the 1.34 stand-in (`apiserver-a`) only.
const A_ONLY: &str = "apis/resource.k8s.io/v1beta2";

async fn json_of(url: &str) -> Value {
    let r = get(url, &[("accept", "application/json")]).await.unwrap();
    assert_eq!(r.status, StatusCode::OK, "{url}");
    r.json()
}

#[tokio::test]
async fn the_v3_index_lists_every_servers_group_versions_and_each_url_reaches_its_document() {
    let c = Cluster::start().await;
    let merged = json_of(&format!("{}/openapi/v3", c.proxy_a.url())).await;
    let own_a = json_of(&format!("{}/openapi/v3", c.a.url())).await;
    let own_b = json_of(&format!("{}/openapi/v3", c.b.url())).await;
    for (k, v) in own_a["paths"].as_object().expect("paths") {
        assert_eq!(&merged["paths"][k], v, "the local server's entry {k}");
    }
    assert!(own_a["paths"].get(B_ONLY).is_none());
    assert_eq!(merged["paths"][B_ONLY], own_b["paths"][B_ONLY]);
    assert_eq!(merged["paths"][A_ONLY], own_a["paths"][A_ONLY]);

    let r = get(&format!("{}/openapi/v3", c.proxy_a.url()), &[])
        .await
        .unwrap();
    let etag = r.header("etag");
    assert_eq!(etag.len(), 130, "quoted SHA-512: {etag}");
    let again = get(
        &format!("{}/openapi/v3", c.proxy_a.url()),
        &[("if-none-match", &etag)],
    )
    .await
    .unwrap();
    assert_eq!(again.status, StatusCode::NOT_MODIFIED);

    // The URL from the index, through the proxy: the peer's document, cacheable for good.
    let url = merged["paths"][B_ONLY]["serverRelativeURL"]
        .as_str()
        .expect("URL")
        .to_owned();
    let through = get(&format!("{}{url}", c.proxy_a.url()), &[])
        .await
        .unwrap();
    assert_eq!(through.status, StatusCode::OK);
    assert_eq!(through.header("x-standin-server"), "apiserver-b");
    assert_eq!(through.header("cache-control"), "public, immutable");
    let straight = get(&format!("{}{url}", c.b.url()), &[]).await.unwrap();
    assert_eq!(through.body, straight.body);
    // The peer's request was marked as proxied, so its proxy served it locally.
    assert!(c.b.requests().iter().any(|r| {
        r.path_and_query == url
            && r.headers
                .get("x-kubernetes-peer-proxied")
                .is_some_and(|v| v == "true")
    }));

    // A stale hash: the serving server's own redirect to the current one.
    let stale = get(
        &format!("{}/openapi/v3/{B_ONLY}?hash=0000", c.proxy_a.url()),
        &[],
    )
    .await
    .unwrap();
    assert_eq!(stale.status, StatusCode::MOVED_PERMANENTLY);
    assert_eq!(stale.header("location"), url);

    // What the local server serves is its own document; nobody's is its 404.
    let local = get(&format!("{}/openapi/v3/{A_ONLY}", c.proxy_a.url()), &[])
        .await
        .unwrap();
    assert_eq!(local.header("x-standin-server"), "apiserver-a");
    let nobody = get(
        &format!("{}/openapi/v3/apis/nobody.example.com/v1", c.proxy_a.url()),
        &[],
    )
    .await
    .unwrap();
    assert_eq!(nobody.status, StatusCode::NOT_FOUND);

    // The other proxy merges the other way round.
    let merged_b = json_of(&format!("{}/openapi/v3", c.proxy_b.url())).await;
    assert_eq!(merged_b["paths"][A_ONLY], own_a["paths"][A_ONLY]);
    assert_eq!(merged_b["paths"][B_ONLY], own_b["paths"][B_ONLY]);
}

#[tokio::test]
async fn v2_is_the_local_document_plus_the_peers_paths_and_definitions_for_what_only_it_serves() {
    let c = Cluster::start().await;
    let v2 = format!("{}/openapi/v2", c.proxy_a.url());
    let merged = json_of(&v2).await;
    let own_a = json_of(&format!("{}/openapi/v2", c.a.url())).await;
    let own_b = json_of(&format!("{}/openapi/v2", c.b.url())).await;
    for field in ["paths", "definitions"] {
        for (k, v) in own_a[field].as_object().expect(field) {
            assert_eq!(&merged[field][k], v, "the local server's {field} {k}");
        }
    }
    let flowschemas = "/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas";
    assert!(own_a["paths"].get(flowschemas).is_none());
    assert_eq!(merged["paths"][flowschemas], own_b["paths"][flowschemas]);
    let kind = "io.k8s.api.flowcontrol.apiserver.k8s.io.v1beta3.FlowSchema";
    assert_eq!(merged["definitions"][kind], own_b["definitions"][kind]);
    // Paths of group-versions both serve are the local server's only.
    let b_paths = own_b["paths"].as_object().expect("paths");
    let m_paths = merged["paths"].as_object().expect("paths");
    for k in m_paths.keys() {
        assert!(
            own_a["paths"].get(k).is_some() || b_paths.contains_key(k),
            "{k} from nowhere"
        );
    }

    let r = get(&v2, &[]).await.unwrap();
    assert_eq!(r.header("vary"), "Accept");
    let etag = r.header("etag");
    let again = get(&v2, &[("if-none-match", &etag)]).await.unwrap();
    assert_eq!(again.status, StatusCode::NOT_MODIFIED);

    // The stand-in renders no protobuf: the local server's 406 reaches the client.
    let pb = get(
        &v2,
        &[(
            "accept",
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
        )],
    )
    .await
    .unwrap();
    assert_eq!(pb.status, StatusCode::NOT_ACCEPTABLE);

    let metrics = get(&format!("{}/metrics", c.proxy_a.admin_url()), &[])
        .await
        .unwrap()
        .text();
    assert!(
        metrics.contains(r#"mvproxy_openapi_merges_total{document="v2_json",result="miss"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"mvproxy_openapi_merges_total{document="v2_json",result="hit"} 2"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"mvproxy_openapi_merge_duration_seconds_count{document="v2_json"} 1"#)
    );
}
