//! Peer-aggregated discovery as clients see it: the merged `/apis`, `profile=nopeer`
//! passthrough, ETag and 304, the legacy extension, and `/debug/discovery`.

use http::StatusCode;
use integration::*;

use crate::cluster::Cluster;

fn gvs(doc: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    for g in doc["items"].as_array().expect("items") {
        for v in g["versions"].as_array().expect("versions") {
            out.push(format!(
                "{}/{}",
                g["metadata"]["name"].as_str().unwrap_or(""),
                v["version"].as_str().unwrap_or("")
            ));
        }
    }
    out
}

#[tokio::test]
async fn merged_apis_is_the_union_with_etag_vary_and_304() {
    let c = Cluster::start().await;
    let url = format!("{}/apis", c.proxy_a.url());
    let r = get(&url, &[("accept", V2)]).await.unwrap();
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.header("content-type"),
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    assert_eq!(r.header("vary"), "Accept");
    assert_eq!(r.header("cache-control"), "public");
    let etag = r.header("etag");
    assert_eq!(etag.len(), 130, "quoted SHA-512: {etag}");
    let listed = gvs(&r.json());
    for want in [
        "flowcontrol.apiserver.k8s.io/v1beta3", // 1.31 only
        "resource.k8s.io/v1beta2",              // 1.34 only
        "resource.k8s.io/v1alpha3",
        "coordination.k8s.io/v1beta1",    // 1.34 only
        "authentication.k8s.io/v1alpha1", // 1.31 only
    ] {
        assert!(
            listed.contains(&want.to_owned()),
            "{want} missing: {listed:?}"
        );
    }
    // Both proxies merge the same inputs into the same bytes.
    let from_b = get(&format!("{}/apis", c.proxy_b.url()), &[("accept", V2)])
        .await
        .unwrap();
    assert_eq!(
        from_b.body, r.body,
        "same inputs, same bytes, whichever proxy answers"
    );
    assert_eq!(from_b.header("etag"), etag);

    let again = get(&url, &[("accept", V2), ("if-none-match", &etag)])
        .await
        .unwrap();
    assert_eq!(again.status, StatusCode::NOT_MODIFIED);
    assert!(again.body.is_empty());
    let stale = get(&url, &[("accept", V2), ("if-none-match", "\"0000\"")])
        .await
        .unwrap();
    assert_eq!(stale.status, StatusCode::OK);

    // /apis is merged by mvproxy itself: the local server never saw those requests
    assert!(
        c.a.requests()
            .iter()
            .all(|r| !(r.path_and_query == "/apis" && r.headers["accept"] == V2))
    );

    let metrics = get(&format!("{}/metrics", c.proxy_a.admin_url()), &[])
        .await
        .unwrap()
        .text();
    assert!(
        metrics.contains(r#"mvproxy_discovery_merges_total{result="miss"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"mvproxy_discovery_merges_total{result="hit"} 2"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn nopeer_passes_the_local_document_through_untouched() {
    // one proxy without peers, so that no peer's discovery fetch is counted as nopeer
    let a = standin("apiserver-a", &apis_134()).await;
    let proxy = Proxy::serve(&proxy_args("apiserver-a", &a.url(), &[])).await;
    proxy.ready().await;
    let r = get(&format!("{}/apis", proxy.url()), &[("accept", NOPEER)])
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.body,
        apis_134().as_bytes(),
        "byte-identical to local's document"
    );
    assert_eq!(r.header("x-standin-server"), "apiserver-a");
    // /api is never merged
    let r = get(&format!("{}/api", proxy.url()), &[("accept", V2)])
        .await
        .unwrap();
    assert_eq!(r.header("x-standin-server"), "apiserver-a");
    let metrics = get(&format!("{}/metrics", proxy.admin_url()), &[])
        .await
        .unwrap()
        .text();
    assert!(
        metrics.contains("mvproxy_discovery_nopeer_requests_total 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn legacy_clients_see_merged_groups_and_peer_only_group_versions() {
    let c = Cluster::start().await;
    // proxy in front of the old server: its legacy group list gains the new versions
    let r = get(
        &format!("{}/apis", c.proxy_b.url()),
        &[("accept", "application/json")],
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::OK);
    let v = r.json();
    assert_eq!(v["kind"], "APIGroupList");
    let resource = v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "resource.k8s.io")
        .expect("resource.k8s.io");
    let versions: Vec<_> = resource["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_str().unwrap())
        .collect();
    assert!(
        versions.contains(&"v1beta2") && versions.contains(&"v1alpha3"),
        "{versions:?}"
    );

    // a group-version only the new server serves is answered by it
    let r = get(
        &format!("{}/apis/resource.k8s.io/v1beta2", c.proxy_b.url()),
        &[],
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("x-standin-server"), "apiserver-a");
    assert_eq!(r.json()["groupVersion"], "resource.k8s.io/v1beta2");
    // one both serve with the same resources is the local server's own document
    let r = get(&format!("{}/apis/apps/v1", c.proxy_b.url()), &[])
        .await
        .unwrap();
    assert_eq!(r.header("x-standin-server"), "apiserver-b");
}

/// The resource names of an `APIResourceList`, sorted.
fn resource_names(list: &serde_json::Value) -> Vec<String> {
    let mut names: Vec<String> = list["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_group_version_both_releases_serve_lists_the_resources_of_both() {
    let c = Cluster::start().await;
    // resource.k8s.io/v1alpha3: 1.31 serves podschedulingcontexts and the *parameters
    // resources there, 1.34 serves devicetaintrules, which 1.31 does not.
    let own = |url: String| async move { get(&url, &[]).await.unwrap().json() };
    let path = "/apis/resource.k8s.io/v1alpha3";
    let of_a = own(format!("{}{path}", c.a.url())).await;
    let of_b = own(format!("{}{path}", c.b.url())).await;
    let mut union = resource_names(&of_a);
    union.extend(resource_names(&of_b));
    union.sort();
    union.dedup();
    assert!(
        union.len() > resource_names(&of_a).len() && union.len() > resource_names(&of_b).len(),
        "each release serves something the other does not: {union:?}"
    );
    for proxy in [&c.proxy_a, &c.proxy_b] {
        let r = get(&format!("{}{path}", proxy.url()), &[]).await.unwrap();
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        assert_eq!(r.header("x-standin-server"), "", "answered by mvproxy");
        let list = r.json();
        assert_eq!(list["kind"], "APIResourceList");
        assert_eq!(list["groupVersion"], "resource.k8s.io/v1alpha3");
        assert_eq!(resource_names(&list), union);

        // ETag and 304, as for the merged /apis
        let etag = r.header("etag");
        assert_eq!(etag.len(), 130, "quoted SHA-512: {etag}");
        let again = get(
            &format!("{}{path}", proxy.url()),
            &[("if-none-match", &etag)],
        )
        .await
        .unwrap();
        assert_eq!(again.status, StatusCode::NOT_MODIFIED);

        // profile=nopeer: the local server's own
        let r = get(
            &format!("{}{path}", proxy.url()),
            &[("accept", "application/json;profile=nopeer")],
        )
        .await
        .unwrap();
        assert_ne!(r.header("x-standin-server"), "");
    }

    // APIGroup: the versions of both, preferred as the merged /apis says
    let r = get(&format!("{}/apis/resource.k8s.io", c.proxy_b.url()), &[])
        .await
        .unwrap();
    let group = r.json();
    assert_eq!(group["kind"], "APIGroup", "{group}");
    let versions: Vec<&str> = group["versions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["version"].as_str())
        .collect();
    let merged = get(&format!("{}/apis", c.proxy_b.url()), &[("accept", V2)])
        .await
        .unwrap()
        .json();
    let merged_versions: Vec<&str> = merged["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == "resource.k8s.io")
        .unwrap()["versions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["version"].as_str())
        .collect();
    assert_eq!(versions, merged_versions);
    assert_eq!(group["preferredVersion"]["version"], merged_versions[0]);

    let metrics = get(&format!("{}/metrics", c.proxy_b.admin_url()), &[])
        .await
        .unwrap()
        .text();
    for want in [
        r#"mvproxy_discovery_document_merges_total{document="apiresourcelist",result="miss"} 1"#,
        r#"mvproxy_discovery_document_merges_total{document="apiresourcelist",result="hit"} 1"#,
        r#"mvproxy_discovery_document_merges_total{document="apigroup",result="hit"} 1"#,
    ] {
        assert!(metrics.contains(want), "{want}: {metrics}");
    }
}

#[tokio::test]
async fn a_legacy_only_server_is_read_and_merged() {
    // an old release that serves no aggregated discovery, as a peer of the new one
    let a = standin("apiserver-a", &apis_134()).await;
    let old = StandIn::new("apiserver-old", &apis_131())
        .unwrap()
        .legacy_only()
        .start("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let proxy = Proxy::serve(&proxy_args(
        "apiserver-a",
        &a.url(),
        &[("apiserver-old", &old.url())],
    ))
    .await;
    proxy.ready().await;
    crate::cluster::wait_all_up(&proxy).await;
    let r = get(&format!("{}/apis", proxy.url()), &[("accept", V2)])
        .await
        .unwrap();
    assert!(gvs(&r.json()).contains(&"flowcontrol.apiserver.k8s.io/v1beta3".to_owned()));
    let debug = get(&format!("{}/debug/discovery", proxy.admin_url()), &[])
        .await
        .unwrap()
        .json();
    let old_entry = debug["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "apiserver-old")
        .unwrap()
        .clone();
    assert!(old_entry["gvrs"].as_u64().unwrap() > 50, "{old_entry}");
    // the old server is the direct peer here (no mvproxy in front): routed to it
    let r = get(
        &format!(
            "{}/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas",
            proxy.url()
        ),
        &[],
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.header("x-standin-server"), "apiserver-old");
}

#[tokio::test]
async fn debug_discovery_shows_each_server_and_the_skew() {
    let c = Cluster::start().await;
    let v = get(&format!("{}/debug/discovery", c.proxy_a.admin_url()), &[])
        .await
        .unwrap()
        .json();
    let servers = v["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 2);
    let local = &servers[0];
    assert_eq!(local["id"], "apiserver-a");
    assert_eq!(local["local"], true);
    assert_eq!(local["up"], true);
    assert!(local["last_fetch"].as_f64().is_some());
    let skew = v["skew"].as_array().unwrap();
    let find = |gvr: &str| {
        skew.iter()
            .find(|s| s["gvr"] == gvr)
            .map(|s| s["servers"].clone())
    };
    assert_eq!(
        find("resource.k8s.io/v1alpha3/podschedulingcontexts"),
        Some(serde_json::json!(["apiserver-b"]))
    );
    assert_eq!(
        find("coordination.k8s.io/v1beta1/leasecandidates"),
        Some(serde_json::json!(["apiserver-a"]))
    );
    assert_eq!(
        find("apps/v1/deployments"),
        None,
        "served everywhere: no skew"
    );
}
