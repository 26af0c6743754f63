//! The stand-in over real loopback sockets, driven by a hyper client: its discovery
//! documents ([`documents`]), objects and their errors ([`objects`]), watches and upgrades
//! ([`watch`]), and what it records and how it stops ([`recording`]). This file holds what
//! they share: a client, the fixtures, the shapes a client reads.

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

mod documents;
mod objects;
mod recording;
mod watch;
