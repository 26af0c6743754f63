//! mvproxy and the stand-in read discovery independently (the stand-in shares no code with
//! mvproxy, so a bug in one cannot pass both sides of the end-to-end tests). These tests hold
//! both to what real servers do: `Accept` negotiation as kube-apiserver answers real clients,
//! and the legacy documents of a real scrape (`fixtures/discovery/k0s-v1.21.0-legacy`, see
//! its README) and of kube-apiserver 1.34's `/apis`.

use http::{HeaderValue, StatusCode};
use integration::*;
use mvproxy_core::discovery::legacy::{api_group, group_from_legacy, group_list, resource_list};
use mvproxy_core::discovery::negotiate::{DiscoveryFormat, negotiate};
use mvproxy_core::discovery::types::{ACCEPT_NOPEER, ApiGroupDiscoveryList, ApiResourceList};
use serde_json::Value;

const K0S: &str = "k0s-v1.21.0-legacy";

/// What a request negotiated, in words both sides can be mapped to.
fn core_answer(accept: Option<&str>) -> &'static str {
    let header = accept.map(|a| HeaderValue::from_str(a).unwrap());
    match negotiate(header.as_ref()) {
        // nopeer matters to mvproxy only (a single server has no peers to leave out)
        DiscoveryFormat::AggregatedV2 { .. } => "v2",
        DiscoveryFormat::AggregatedV2Beta1 => "v2beta1",
        DiscoveryFormat::Legacy => "legacy",
        DiscoveryFormat::Unsupported => "none",
    }
}

fn standin_answer(r: &Resp) -> &'static str {
    match (r.status, r.header("content-type").as_str()) {
        (
            StatusCode::OK,
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        ) => "v2",
        (
            StatusCode::OK,
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
        ) => "v2beta1",
        (StatusCode::OK, "application/json") => "legacy",
        (StatusCode::NOT_ACCEPTABLE, _) => "none",
        (status, ct) => panic!("unexpected answer {status} {ct}"),
    }
}

#[tokio::test]
async fn both_negotiate_accept_as_kube_apiserver_answers_real_clients() {
    let apis = fixture("kube-apiserver-1.34-dev/aggregated_v2.json");
    let server = StandIn::new("negotiate", &apis)
        .unwrap()
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let cases: &[(Option<&str>, &str)] = &[
        (None, "legacy"),
        (Some(""), "legacy"),
        (Some("application/json"), "legacy"),
        (Some("*/*"), "legacy"),
        (Some("application/json, */*"), "legacy"),
        // kubectl and client-go 1.30–1.36
        (
            Some(
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
            ),
            "v2",
        ),
        // client-go 1.26–1.29
        (
            Some(
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
            ),
            "v2beta1",
        ),
        // what mvproxy itself sends to read one server
        (Some(ACCEPT_NOPEER), "v2"),
        // parameters in another order
        (
            Some("application/json;as=APIGroupDiscoveryList;v=v2;g=apidiscovery.k8s.io"),
            "v2",
        ),
        // protobuf first: skipped for the JSON range after it
        (
            Some(
                "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
            ),
            "v2",
        ),
        // a refused range (q=0) is skipped
        (
            Some(
                "application/json;q=0,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
            ),
            "v2",
        ),
        (Some("application/yaml"), "none"),
        (
            Some("application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList"),
            "none",
        ),
    ];
    let url = format!("{}/apis", server.url());
    for &(accept, want) in cases {
        let headers: Vec<(&str, &str)> = accept.map(|a| ("accept", a)).into_iter().collect();
        let r = get(&url, &headers).await.unwrap();
        assert_eq!(core_answer(accept), want, "mvproxy, Accept: {accept:?}");
        assert_eq!(standin_answer(&r), want, "stand-in, Accept: {accept:?}");
    }
    server.shutdown().await;
}

/// A fixture with what aggregated discovery cannot carry taken out (`storageVersionHash`),
/// and the `apiVersion` that 1.21 left out of `extensions/v1beta1`'s list put back (a quirk of
/// that deprecated group's installation; every other list of the scrape has it).
fn legacy_fixture(rel: &str) -> Value {
    let mut doc: Value = serde_json::from_str(&fixture(&format!("{K0S}/{rel}"))).unwrap();
    if rel == "apis/extensions/v1beta1/index.json" {
        doc.as_object_mut()
            .unwrap()
            .insert("apiVersion".to_owned(), "v1".into());
    }
    if let Some(resources) = doc.get_mut("resources").and_then(Value::as_array_mut) {
        for r in resources {
            r.as_object_mut().unwrap().remove("storageVersionHash");
        }
    }
    doc
}

#[tokio::test]
async fn both_render_a_real_servers_legacy_documents() {
    // The scrape's groups in its order, each built back into aggregated form from its
    // legacy resource lists, as mvproxy does on fetch from an old release.
    let scraped = legacy_fixture("apis/index.json");
    let mut groups = Vec::new();
    for g in scraped["groups"].as_array().unwrap() {
        let name = g["name"].as_str().unwrap();
        let versions = g["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                let version = v["version"].as_str().unwrap().to_owned();
                let list: ApiResourceList = serde_json::from_value(legacy_fixture(&format!(
                    "apis/{name}/{version}/index.json"
                )))
                .unwrap();
                (version, list)
            })
            .collect();
        groups.push(group_from_legacy(name, versions));
    }
    let apis = serde_json::to_string(&ApiGroupDiscoveryList::v2(groups.clone())).unwrap();
    let server = StandIn::new("k0s", &apis)
        .unwrap()
        .legacy_only()
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let served = |path: String| {
        let url = format!("{}{path}", server.url());
        async move {
            get(&url, &[("accept", "application/json")])
                .await
                .unwrap()
                .json()
        }
    };

    assert_eq!(served("/apis".to_owned()).await, scraped, "stand-in /apis");
    let mvproxy_list = serde_json::to_value(group_list(&groups)).unwrap();
    assert_eq!(mvproxy_list, scraped, "mvproxy's APIGroupList");
    for group in &groups {
        let name = group.name();
        let want = legacy_fixture(&format!("apis/{name}/index.json"));
        assert_eq!(
            served(format!("/apis/{name}")).await,
            want,
            "stand-in {name}"
        );
        let mvproxy_group = serde_json::to_value(api_group(group)).unwrap();
        assert_eq!(mvproxy_group, want, "mvproxy's APIGroup {name}");
        for v in &group.versions {
            let rel = format!("apis/{name}/{}", v.version);
            let want = legacy_fixture(&format!("{rel}/index.json"));
            assert_eq!(served(format!("/{rel}")).await, want, "stand-in {rel}");
            let mvproxy_list = serde_json::to_value(resource_list(name, v)).unwrap();
            assert_eq!(mvproxy_list, want, "mvproxy's APIResourceList {rel}");
        }
    }
    server.shutdown().await;
}

#[tokio::test]
async fn both_derive_the_same_group_list_from_kube_apiserver_1_34() {
    let apis = fixture("kube-apiserver-1.34-dev/aggregated_v2.json");
    let doc: ApiGroupDiscoveryList = serde_json::from_str(&apis).unwrap();
    let server = StandIn::new("1.34", &apis)
        .unwrap()
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let url = format!("{}/apis", server.url());
    let standin = get(&url, &[("accept", "application/json")])
        .await
        .unwrap()
        .json();
    assert_eq!(
        standin,
        serde_json::to_value(group_list(&doc.items)).unwrap()
    );
    let first = &doc.items[0];
    let url = format!("{}/apis/{}", server.url(), first.name());
    let standin = get(&url, &[]).await.unwrap().json();
    assert_eq!(standin, serde_json::to_value(api_group(first)).unwrap());
    server.shutdown().await;
}
