//! The stand-in over real loopback sockets, driven by a hyper client.

use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE, TRANSFER_ENCODING};
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use serde::Deserialize;

use super::discovery::{
    ApiGroupDiscoveryList, CONTENT_TYPE_V2, CONTENT_TYPE_V2BETA1, Format, negotiate,
};
use super::respond::NOT_SERVED;
use super::store::rfc3339;
use super::{Running, SERVER_HEADER, StandIn};

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// What kubectl 1.30–1.36 sends for `/api` and `/apis`.
const KUBECTL_ACCEPT: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
const V2BETA1_ACCEPT: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
/// What mvproxy sends to read one server's own discovery (`profile=nopeer` first).
const ACCEPT_NOPEER: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
const WAIT: Duration = Duration::from_secs(5);

/// Legacy `APIGroupList`, as a client reads it.
#[derive(Deserialize)]
struct ApiGroupList {
    groups: Vec<NamedGroup>,
}

#[derive(Deserialize)]
struct NamedGroup {
    name: String,
}

/// Legacy `APIResourceList`, as a client reads it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ApiResourceList {
    group_version: String,
    resources: Vec<LegacyResource>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LegacyResource {
    name: String,
    kind: String,
    namespaced: bool,
    #[serde(default)]
    short_names: Vec<String>,
    singular_name: String,
    group: Option<String>,
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Reply {
    fn json(&self) -> TestResult<Value> {
        Ok(serde_json::from_slice(&self.body)?)
    }

    fn content_type(&self) -> &str {
        self.headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }
}

fn fixture(path: &str) -> TestResult<String> {
    let full = format!(
        "{}/../../fixtures/discovery/{path}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&full).map_err(|e| format!("read {full}: {e}").into())
}

async fn start(name: &str) -> TestResult<Running> {
    let apis = fixture("kube-apiserver-1.34-dev/aggregated_v2.json")?;
    Ok(StandIn::new(name, &apis)?
        .start(([127, 0, 0, 1], 0).into())
        .await?)
}

fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

fn request(
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> TestResult<Request<Full<Bytes>>> {
    let mut builder = Request::builder().method(method).uri(url);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    Ok(builder.body(Full::new(Bytes::copy_from_slice(body.as_bytes())))?)
}

async fn send(
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> TestResult<Reply> {
    let response = client()
        .request(request(method, url, headers, body)?)
        .await?;
    let (parts, body) = response.into_parts();
    Ok(Reply {
        status: parts.status,
        headers: parts.headers,
        body: body.collect().await?.to_bytes(),
    })
}

async fn get(url: &str, accept: &str) -> TestResult<Reply> {
    send(Method::GET, url, &[("accept", accept)], "").await
}

async fn post(url: &str, body: &Value) -> TestResult<Reply> {
    let headers = [("content-type", "application/json")];
    send(Method::POST, url, &headers, &body.to_string()).await
}

/// The next watch event line, waiting at most [`WAIT`].
async fn next_event(body: &mut Incoming, pending: &mut Vec<u8>) -> TestResult<Value> {
    loop {
        if let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            return Ok(serde_json::from_slice(&line)?);
        }
        let frame = tokio::time::timeout(WAIT, body.frame())
            .await?
            .ok_or("watch ended")??;
        if let Ok(data) = frame.into_data() {
            pending.extend_from_slice(&data);
        }
    }
}

fn names(list: &Value) -> Vec<&str> {
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i["metadata"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default()
}

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

#[tokio::test]
async fn create_get_list_and_delete_have_kube_shapes() -> TestResult {
    let server = start("crud").await?;
    let pods = format!("{}/api/v1/namespaces/default/pods", server.url());

    let created = post(
        &pods,
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}}),
    )
    .await?;
    assert_eq!(created.status, StatusCode::CREATED);
    let created = created.json()?;
    let meta = &created["metadata"];
    assert_eq!(meta["namespace"], "default");
    assert_eq!(meta["uid"].as_str().map(str::len), Some(36));
    let first_rv: u64 = meta["resourceVersion"].as_str().ok_or("rv")?.parse()?;
    let timestamp = meta["creationTimestamp"].as_str().ok_or("timestamp")?;
    assert_eq!(
        (timestamp.len(), &timestamp[10..11], &timestamp[19..]),
        (20, "T", "Z")
    );

    let duplicate = post(&pods, &json!({"metadata": {"name": "a"}})).await?;
    assert_eq!(duplicate.status, StatusCode::CONFLICT);
    assert_eq!(
        duplicate.json()?,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "pods \"a\" already exists", "reason": "AlreadyExists",
               "details": {"name": "a", "kind": "pods"}, "code": 409})
    );

    let other = format!("{}/api/v1/namespaces/other/pods", server.url());
    let second = post(&other, &json!({"metadata": {"generateName": "b-"}}))
        .await?
        .json()?;
    let second_rv: u64 = second["metadata"]["resourceVersion"]
        .as_str()
        .ok_or("rv")?
        .parse()?;
    assert!(second_rv > first_rv);
    assert!(
        second["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("b-") && n.len() == 7)
    );

    let got = get(&format!("{pods}/a"), "application/json")
        .await?
        .json()?;
    assert_eq!(
        (got["kind"].clone(), got["metadata"]["name"].clone()),
        (json!("Pod"), json!("a"))
    );

    let all = get(&format!("{}/api/v1/pods", server.url()), "application/json")
        .await?
        .json()?;
    assert_eq!(
        (all["kind"].clone(), all["apiVersion"].clone()),
        (json!("PodList"), json!("v1"))
    );
    assert_eq!(all["metadata"]["resourceVersion"], second_rv.to_string());
    assert_eq!(names(&all).len(), 2);
    assert!(all["items"].as_array().is_some_and(|i| {
        i.iter()
            .all(|o| o["kind"] == "Pod" && o["apiVersion"] == "v1")
    }));
    let default = get(&pods, "application/json").await?.json()?;
    assert_eq!(names(&default), ["a"]);

    let body = json!({"metadata": {"name": "a"}, "spec": {"nodeName": "n1"}}).to_string();
    let headers = [("content-type", "application/json")];
    let updated = send(Method::PUT, &format!("{pods}/a"), &headers, &body)
        .await?
        .json()?;
    assert_eq!(updated["spec"]["nodeName"], "n1");
    assert_eq!(updated["metadata"]["uid"], meta["uid"]);
    assert_ne!(
        updated["metadata"]["resourceVersion"],
        meta["resourceVersion"]
    );

    let deleted = send(Method::DELETE, &format!("{pods}/a"), &[], "").await?;
    assert_eq!(deleted.status, StatusCode::OK);
    let gone = get(&format!("{pods}/a"), "application/json").await?;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    assert_eq!(
        gone.json()?,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "pods \"a\" not found", "reason": "NotFound",
               "details": {"name": "a", "kind": "pods"}, "code": 404})
    );
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn not_found_shapes_depend_on_what_is_missing() -> TestResult {
    let server = start("404").await?;
    let url = server.url();

    let missing = get(
        &format!("{url}/apis/apps/v1/namespaces/default/deployments/web"),
        "application/json",
    )
    .await?;
    assert_eq!(
        missing.json()?,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "deployments.apps \"web\" not found", "reason": "NotFound",
               "details": {"name": "web", "group": "apps", "kind": "deployments"}, "code": 404})
    );

    for path in [
        "/apis/apps/v1/widgets",
        "/api/v1/namespaces/default/widgets/x",
        "/api/v1/namespaces/default/pods/x/nope",
    ] {
        let reply = get(&format!("{url}{path}"), "application/json").await?;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(reply.content_type(), "application/json", "{path}");
        assert_eq!(reply.body, NOT_SERVED, "{path}");
    }

    // 1.34 serves storagemigration v1alpha1, not the v1beta1 of 1.35.
    let later = get(
        &format!("{url}/apis/storagemigration.k8s.io/v1beta1/storageversionmigrations"),
        "application/json",
    )
    .await?;
    assert_eq!(
        (later.status, later.body),
        (StatusCode::NOT_FOUND, Bytes::from("404 page not found\n"))
    );

    for path in ["/healthz", "/readyz", "/livez"] {
        let reply = get(&format!("{url}{path}"), "*/*").await?;
        assert_eq!(
            (reply.status, reply.body),
            (StatusCode::OK, Bytes::from("ok"))
        );
    }
    let version = get(&format!("{url}/version"), "application/json")
        .await?
        .json()?;
    assert_eq!(
        (version["major"].clone(), version["minor"].clone()),
        (json!("1"), json!("34"))
    );
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn objects_are_shared_across_versions_and_status_is_the_object() -> TestResult {
    let server = start("versions").await?;
    server.insert(
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        Some("ns"),
        json!({"metadata": {"name": "h"}}),
    );
    let v1 = get(
        &format!(
            "{}/apis/autoscaling/v1/namespaces/ns/horizontalpodautoscalers/h",
            server.url()
        ),
        "application/json",
    )
    .await?
    .json()?;
    assert_eq!(v1["apiVersion"], "autoscaling/v1");
    assert_eq!(v1["kind"], "HorizontalPodAutoscaler");

    server.insert(
        "",
        "v1",
        "pods",
        None,
        json!({"metadata": {"name": "p", "namespace": "web"}}),
    );
    let status = get(
        &format!("{}/api/v1/namespaces/web/pods/p/status", server.url()),
        "application/json",
    )
    .await?;
    assert_eq!(status.status, StatusCode::OK);
    assert_eq!(status.json()?["metadata"]["name"], "p");
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn bad_input_gets_status_answers_not_panics() -> TestResult {
    let server = start("bad").await?;
    let pods = format!("{}/api/v1/namespaces/default/pods", server.url());
    let cases: &[(Method, &str, &str, &str, StatusCode)] = &[
        (
            Method::POST,
            "",
            "application/json",
            "{",
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "",
            "application/json",
            "[1]",
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::POST,
            "",
            "application/json",
            "{\"metadata\":{}}",
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::POST,
            "",
            "application/json",
            "{\"metadata\":7}",
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::POST,
            "",
            "application/json",
            "{\"metadata\":{\"name\":\"x\",\"namespace\":\"other\"}}",
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "",
            "application/yaml",
            "metadata: {}",
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
        (
            Method::POST,
            "",
            "application/vnd.kubernetes.protobuf",
            "k8s\0\u{ff}",
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::PATCH,
            "/x",
            "application/merge-patch+json",
            "{}",
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            Method::PUT,
            "/missing",
            "application/json",
            "{\"metadata\":{\"name\":\"missing\"}}",
            StatusCode::NOT_FOUND,
        ),
        (
            Method::PUT,
            "/a",
            "application/json",
            "{\"metadata\":{\"name\":\"b\"}}",
            StatusCode::BAD_REQUEST,
        ),
        (Method::GET, "/x/exec", "", "", StatusCode::BAD_REQUEST),
        (
            Method::GET,
            "?watch=true&resourceVersion=%zz&timeoutSeconds=1",
            "",
            "",
            StatusCode::OK,
        ),
    ];
    for (method, suffix, content_type, body, want) in cases {
        let headers = [("content-type", *content_type)];
        let reply = send(method.clone(), &format!("{pods}{suffix}"), &headers, body).await?;
        assert_eq!(reply.status, *want, "{method} {suffix} {body:?}");
    }
    let weird = [
        "/api/v1/namespaces",
        "/api/v1/namespaces/",
        "//api//v1",
        "/apis/apps/v1/namespaces/x",
        "/%ff",
        "/api/v1/nodes/n/status",
    ];
    for path in weird {
        let reply = get(&format!("{}{path}", server.url()), "application/json").await?;
        assert!(
            reply.status.is_success() || reply.status.is_client_error(),
            "{path}: {}",
            reply.status
        );
    }
    server.shutdown().await;
    Ok(())
}

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
