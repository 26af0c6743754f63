//! Discovery documents: `Accept` negotiation, aggregated and legacy forms, every fixture.

use super::*;

#[test]
fn negotiation_follows_the_first_acceptable_range() {
    let cases: &[(Option<&str>, Format)] = &[
        (None, Format::Legacy),
        (Some(""), Format::Legacy),
        (Some("application/json"), Format::Legacy),
        (Some("application/json, */*"), Format::Legacy),
        (Some(KUBECTL_ACCEPT), Format::V2),
        (Some(V2BETA1_ACCEPT), Format::V2Beta1),
        (Some(ACCEPT_NOPEER), Format::V2),
        (
            Some(
                "application/json;as=APIGroupDiscoveryList;profile=nopeer;v=v2;g=apidiscovery.k8s.io",
            ),
            Format::V2,
        ),
        (
            Some(
                "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
            ),
            Format::Legacy,
        ),
        (
            Some(
                "application/json;q=0,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
            ),
            Format::V2,
        ),
        (
            Some("application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList"),
            Format::NotAcceptable,
        ),
        (Some("application/yaml"), Format::NotAcceptable),
    ];
    for &(accept, want) in cases {
        let header = accept.and_then(|a| http::HeaderValue::from_str(a).ok());
        assert_eq!(negotiate(header.as_ref()), want, "Accept: {accept:?}");
    }
}

#[tokio::test]
async fn aggregated_apis_is_the_given_bytes_and_legacy_is_derived() -> TestResult {
    let apis = fixture("kube-apiserver-1.34-dev/aggregated_v2.json")?;
    let server = start("agg").await?;
    let url = format!("{}/apis", server.url());

    for accept in [KUBECTL_ACCEPT, ACCEPT_NOPEER] {
        let v2 = get(&url, accept).await?;
        assert_eq!(v2.status, StatusCode::OK);
        assert_eq!(v2.content_type(), CONTENT_TYPE_V2);
        assert!(v2.body == apis.as_bytes(), "/apis is not byte-identical");
    }

    let beta = get(&url, V2BETA1_ACCEPT).await?;
    assert_eq!(beta.content_type(), CONTENT_TYPE_V2BETA1);
    let beta: ApiGroupDiscoveryList = serde_json::from_slice(&beta.body)?;
    let v2: ApiGroupDiscoveryList = serde_json::from_str(&apis)?;
    assert_eq!(beta.api_version, "apidiscovery.k8s.io/v2beta1");
    assert_eq!(beta.items, v2.items);

    let legacy = get(&url, "application/json").await?;
    assert_eq!(legacy.content_type(), "application/json");
    let legacy: ApiGroupList = serde_json::from_slice(&legacy.body)?;
    let want: Vec<_> = v2.items.iter().map(|g| g.name()).collect();
    let got: Vec<_> = legacy.groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(got, want);

    let refused = get(&url, "application/yaml").await?;
    assert_eq!(refused.status, StatusCode::NOT_ACCEPTABLE);
    assert_eq!(refused.json()?["reason"], "NotAcceptable");
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn core_group_is_served_at_api_in_both_forms() -> TestResult {
    let server = start("core").await?;
    let url = server.url();

    let aggregated = get(&format!("{url}/api"), KUBECTL_ACCEPT).await?;
    assert_eq!(aggregated.content_type(), CONTENT_TYPE_V2);
    let aggregated: ApiGroupDiscoveryList = serde_json::from_slice(&aggregated.body)?;
    let core = aggregated.items.first().ok_or("no core group")?;
    assert_eq!(core.name(), "");
    assert_eq!(
        core.versions.first().map(|v| v.version.as_str()),
        Some("v1")
    );

    let versions = get(&format!("{url}/api"), "application/json")
        .await?
        .json()?;
    assert_eq!(versions["kind"], "APIVersions");
    assert_eq!(versions["versions"], json!(["v1"]));
    assert_eq!(
        versions["serverAddressByClientCIDRs"][0]["serverAddress"],
        server.addr.to_string()
    );

    let list = get(&format!("{url}/api/v1"), KUBECTL_ACCEPT).await?;
    assert_eq!(list.content_type(), "application/json");
    let list: ApiResourceList = serde_json::from_slice(&list.body)?;
    assert_eq!(list.group_version, "v1");
    let find = |name: &str| list.resources.iter().find(|r| r.name == name);
    let pods = find("pods").ok_or("no pods")?;
    assert_eq!(
        (
            pods.kind.as_str(),
            pods.namespaced,
            pods.short_names.clone()
        ),
        ("Pod", true, vec!["po".to_owned()])
    );
    assert_eq!(pods.singular_name, "pod");
    for sub in [
        "status",
        "log",
        "exec",
        "attach",
        "portforward",
        "binding",
        "eviction",
    ] {
        assert!(find(&format!("pods/{sub}")).is_some(), "pods/{sub}");
    }
    let eviction = find("pods/eviction").ok_or("no eviction")?;
    assert_eq!(eviction.group.as_deref(), Some("policy"));
    for (name, short, namespaced) in [
        ("services", "svc", true),
        ("namespaces", "ns", false),
        ("configmaps", "cm", true),
        ("nodes", "no", false),
        ("events", "ev", true),
        ("serviceaccounts", "sa", true),
        ("endpoints", "ep", true),
        ("persistentvolumeclaims", "pvc", true),
        ("persistentvolumes", "pv", false),
    ] {
        let r = find(name).ok_or(name)?;
        assert_eq!(
            (r.short_names.clone(), r.namespaced),
            (vec![short.to_owned()], namespaced)
        );
    }
    assert!(find("secrets").is_some());
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn legacy_group_and_version_documents() -> TestResult {
    let server = start("legacy-docs").await?;
    let url = server.url();
    let group = get(&format!("{url}/apis/apps"), KUBECTL_ACCEPT)
        .await?
        .json()?;
    assert_eq!(group["kind"], "APIGroup");
    assert_eq!(group["preferredVersion"]["groupVersion"], "apps/v1");
    let list = get(&format!("{url}/apis/apps/v1"), "application/json")
        .await?
        .json()?;
    assert_eq!(list["groupVersion"], "apps/v1");
    let deployments = list["resources"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["name"] == "deployments"))
        .ok_or("no deployments")?;
    assert_eq!(deployments["kind"], "Deployment");

    for missing in [
        "/apis/nope.example.com",
        "/apis/apps/v9",
        "/apis/apps/v9/deployments",
        "/random",
    ] {
        let reply = get(&format!("{url}{missing}"), "application/json").await?;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{missing}");
        assert!(reply.content_type().starts_with("text/plain"), "{missing}");
        assert_eq!(reply.body, "404 page not found\n", "{missing}");
    }
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn legacy_only_answers_aggregated_accept_with_legacy_json() -> TestResult {
    let apis = fixture("kube-apiserver-1.31-dev/aggregated_v2.json")?;
    let server = StandIn::new("old", &apis)?
        .legacy_only()
        .git_version("v1.31.4")
        .start(([127, 0, 0, 1], 0).into())
        .await?;
    let version = get(&format!("{}/version", server.url()), "*/*")
        .await?
        .json()?;
    assert_eq!(
        (&version["minor"], &version["gitVersion"]),
        (&json!("31"), &json!("v1.31.4"))
    );
    for path in ["/api", "/apis"] {
        let reply = get(&format!("{}{path}", server.url()), KUBECTL_ACCEPT).await?;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.content_type(), "application/json", "{path}");
        let kind = if path == "/api" {
            "APIVersions"
        } else {
            "APIGroupList"
        };
        assert_eq!(reply.json()?["kind"], kind);
    }
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn the_other_fixtures_load() -> TestResult {
    let oauth = fixture("openshift-oauth-apiserver-k8s-1.34.1/aggregated_v2.json")?;
    let server = StandIn::new("oauth", &oauth)?
        .start(([127, 0, 0, 1], 0).into())
        .await?;
    let url = format!("{}/apis/oauth.openshift.io/v1/oauthclients", server.url());
    let list = get(&url, "application/json").await?.json()?;
    assert_eq!(list["kind"], "OAuthClientList");
    assert_eq!(list["apiVersion"], "oauth.openshift.io/v1");
    server.shutdown().await;
    assert!(StandIn::new("bad", "{not json").is_err());
    Ok(())
}
