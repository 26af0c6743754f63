//! Reading one server's API surface.
//!
//! `/api` and `/apis` are asked for with the `profile=nopeer` Accept (mvp-spec §5 item 21), so
//! a peer that merges discovery itself still tells only its own surface. A response counts as
//! aggregated only if it is a 200 whose `Content-Type` names `APIGroupDiscoveryList` v2 or
//! v2beta1 (kubernetes#119662); anything else is read as legacy discovery and completed with
//! one request per group-version, as client-go does for old releases.
//!
//! No document is read past `--max-discovery-document-bytes` (refused up front by its
//! `Content-Length`, or when the count passes the limit): a peer must not be able to make
//! mvproxy hold an endless body. Such a fetch fails like any other, saying the size, so the
//! server is marked down and its last good view is kept.

use bytes::Bytes;
use http::{HeaderMap, StatusCode, header};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::legacy::group_from_legacy;
use super::snapshot::ServerView;
use super::types::{
    ACCEPT_NOPEER, AGGREGATED_GROUP, AGGREGATED_KIND, ApiGroupDiscovery, ApiGroupDiscoveryList,
    ApiGroupList, ApiResourceList, ApiVersions,
};
use crate::error::ProxyError;
use crate::forward::{Upstream, causes};

const ACCEPT_JSON: &str = "application/json";

/// A document as fetched: aggregated (with its version) or legacy.
enum Document {
    Aggregated { v2: bool, body: Bytes },
    Legacy(Bytes),
    NotFound,
}

/// Why a fetch failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FetchError {
    /// The `type` label of `mvproxy_peer_discovery_sync_errors_total`: `hostport_resolution`
    /// when the server's host name did not resolve, `fetch_discovery` otherwise.
    pub kind: &'static str,
    pub message: String,
}

impl From<String> for FetchError {
    fn from(message: String) -> Self {
        Self {
            kind: "fetch_discovery",
            message,
        }
    }
}

/// One server's fetch: the upstream, the largest document read, and what to tell about each
/// response (upstream counts peer discovery fetches as rerouted requests).
struct Fetch<'a> {
    up: &'a Upstream,
    limit: usize,
    observe: &'a (dyn Fn(StatusCode) + Sync),
}

/// Fetches the server's core and named groups, reading no document over `limit` bytes;
/// `observe` sees the status of every response (503 for a request that got none).
pub async fn fetch(
    up: &Upstream,
    limit: usize,
    observe: &(dyn Fn(StatusCode) + Sync),
) -> Result<ServerView, FetchError> {
    let up = &Fetch { up, limit, observe };
    let core = match get(up, "/api", ACCEPT_NOPEER).await? {
        Document::NotFound => Vec::new(),
        Document::Aggregated { body, .. } => decode::<ApiGroupDiscoveryList>("/api", &body)?.items,
        Document::Legacy(body) => {
            let versions: ApiVersions = decode("/api", &body)?;
            let mut lists = Vec::new();
            for v in versions.versions {
                let path = format!("/api/{v}");
                lists.push((v, legacy_resources(up, &path).await?));
            }
            vec![group_from_legacy("", lists)]
        }
    };
    let (apis, raw) = match get(up, "/apis", ACCEPT_NOPEER).await? {
        Document::NotFound => (Vec::new(), None),
        Document::Aggregated { v2, body } => {
            let items = decode::<ApiGroupDiscoveryList>("/apis", &body)?.items;
            (items, v2.then_some(body))
        }
        Document::Legacy(body) => {
            let list: ApiGroupList = decode("/apis", &body)?;
            let mut groups: Vec<ApiGroupDiscovery> = Vec::new();
            for g in list.groups {
                let mut lists = Vec::new();
                for v in g.versions {
                    let path = format!("/apis/{}", v.group_version);
                    lists.push((v.version, legacy_resources(up, &path).await?));
                }
                groups.push(group_from_legacy(&g.name, lists));
            }
            (groups, None)
        }
    };
    Ok(ServerView::new(core, apis, raw))
}

async fn legacy_resources(up: &Fetch<'_>, path: &str) -> Result<ApiResourceList, FetchError> {
    match get(up, path, ACCEPT_JSON).await? {
        Document::Legacy(body) | Document::Aggregated { body, .. } => Ok(decode(path, &body)?),
        Document::NotFound => Err(format!("GET {path}: 404 Not Found").into()),
    }
}

async fn get(f: &Fetch<'_>, path: &str, accept: &str) -> Result<Document, FetchError> {
    let resp = match f.up.get_response(path, accept).await {
        Ok(r) => r,
        Err(e) => {
            (f.observe)(StatusCode::SERVICE_UNAVAILABLE);
            return Err(FetchError {
                kind: error_kind(&e),
                message: format!("GET {path}: {e}"),
            });
        }
    };
    let (parts, body) = resp.into_parts();
    let (status, headers) = (parts.status, parts.headers);
    (f.observe)(status);
    let too_large = || {
        format!(
            "GET {path}: the document is larger than {} bytes (--max-discovery-document-bytes)",
            f.limit
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(len) = declared
        && len > f.limit as u64
    {
        return Err(format!("{}: its Content-Length is {len}", too_large()).into());
    }
    let body = match Limited::new(body, f.limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            return Err(too_large().into());
        }
        Err(e) => {
            return Err(format!(
                "GET {path}: {} stopped sending: {}",
                f.up.name,
                causes(e.as_ref())
            )
            .into());
        }
    };
    match status {
        StatusCode::OK => Ok(match aggregated_version(&headers) {
            Some(v2) => Document::Aggregated { v2, body },
            None => Document::Legacy(body),
        }),
        StatusCode::NOT_FOUND => Ok(Document::NotFound),
        other => Err(format!(
            "GET {path}: HTTP {other}: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        )
        .into()),
    }
}

/// A name that did not resolve (told by the error's type, see [`crate::forward::classify`]):
/// the peer's address, not its discovery, is what failed.
fn error_kind(e: &ProxyError) -> &'static str {
    match e {
        ProxyError::Unresolved { .. } => "hostport_resolution",
        _ => "fetch_discovery",
    }
}

/// `Some(true)` for v2, `Some(false)` for v2beta1, `None` for anything else.
pub fn aggregated_version(headers: &HeaderMap) -> Option<bool> {
    let ct = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let mut params = ct
        .split(';')
        .skip(1)
        .filter_map(|p| p.trim().split_once('='));
    let (mut g, mut v, mut kind) = (None, None, None);
    for (key, value) in params.by_ref() {
        match key {
            "g" => g = Some(value),
            "v" => v = Some(value),
            "as" => kind = Some(value),
            _ => {}
        }
    }
    if g != Some(AGGREGATED_GROUP) || kind != Some(AGGREGATED_KIND) {
        return None;
    }
    match v {
        Some("v2") => Some(true),
        Some("v2beta1") => Some(false),
        _ => None,
    }
}

fn decode<T: serde::de::DeserializeOwned>(path: &str, body: &[u8]) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| format!("GET {path}: undecodable document: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server answering its first request with `head` then `chunks` (raw bytes).
    async fn raw_server(head: String, chunks: Vec<Vec<u8>>) -> Upstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base: http::Uri = format!("http://{}", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let mut seen = Vec::new();
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut buf).await.unwrap();
                seen.extend_from_slice(&buf[..n]);
            }
            s.write_all(head.as_bytes()).await.unwrap();
            for c in chunks {
                if s.write_all(&c).await.is_err() {
                    return;
                }
            }
            let _ = s.shutdown().await;
        });
        let settings = crate::forward::ClientSettings {
            tls: None,
            server_name: None,
            connect_timeout: Duration::from_secs(5),
            insecure_skip_verify: false,
        };
        Upstream::new("peer".into(), base, &settings, Duration::from_secs(10)).unwrap()
    }

    const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

    #[tokio::test]
    async fn a_document_over_the_limit_fails_the_fetch_saying_the_size() {
        // streamed without a length: stopped once the count passes the limit
        let chunk = |n: usize| format!("{n:x}\r\n{}\r\n", " ".repeat(n)).into_bytes();
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: {AGGREGATED}\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        let up = raw_server(head, (0..5).map(|_| chunk(1000)).collect()).await;
        let e = fetch(&up, 1024, &|_| {}).await.unwrap_err();
        assert_eq!(e.kind, "fetch_discovery");
        assert_eq!(
            e.message,
            "GET /api: the document is larger than 1024 bytes (--max-discovery-document-bytes)"
        );

        // declared by Content-Length: refused before reading
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: {AGGREGATED}\r\ncontent-length: 5000\r\n\r\n"
        );
        let up = raw_server(head, vec![vec![b' '; 5000]]).await;
        let e = fetch(&up, 1024, &|_| {}).await.unwrap_err();
        assert!(
            e.message.ends_with("larger than 1024 bytes (--max-discovery-document-bytes): its Content-Length is 5000"),
            "{e}"
        );

        // under the limit: /api is read and used (the fetch then fails at /apis, as this
        // server answers only once)
        let head =
            format!("HTTP/1.1 200 OK\r\ncontent-type: {AGGREGATED}\r\ncontent-length: 12\r\n\r\n");
        let up = raw_server(head, vec![br#"{"items":[]}"#.to_vec()]).await;
        let e = fetch(&up, 1024, &|_| {}).await.unwrap_err();
        assert!(e.message.starts_with("GET /apis: "), "{e}");
    }

    fn upstream_at(url: &str) -> Upstream {
        let settings = crate::forward::ClientSettings {
            tls: None,
            server_name: None,
            connect_timeout: Duration::from_secs(5),
            insecure_skip_verify: false,
        };
        Upstream::new(
            "peer".into(),
            url.parse().unwrap(),
            &settings,
            Duration::from_secs(10),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn name_resolution_failures_are_told_apart_by_type() {
        // a label over 63 characters: the resolver refuses it without asking any DNS server
        let host = format!("{}.invalid", "a".repeat(70));
        let e = fetch(&upstream_at(&format!("http://{host}:80")), 1024, &|_| {})
            .await
            .unwrap_err();
        assert_eq!(e.kind, "hostport_resolution", "{e}");
        assert!(e.message.contains(&host), "names the host: {e}");

        // a port nobody listens on: the peer's discovery failed, not its address
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", closed.local_addr().unwrap());
        drop(closed);
        let e = fetch(&upstream_at(&url), 1024, &|_| {}).await.unwrap_err();
        assert_eq!(e.kind, "fetch_discovery", "{e}");
    }

    #[test]
    fn aggregated_content_types() {
        let cases = [
            (
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
                Some(true),
            ),
            (
                "application/json; as=APIGroupDiscoveryList; v=v2beta1; g=apidiscovery.k8s.io",
                Some(false),
            ),
            ("application/json", None),
            (
                "application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList",
                None,
            ),
            ("text/plain", None),
        ];
        for (ct, want) in cases {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
            assert_eq!(aggregated_version(&h), want, "{ct}");
        }
        assert_eq!(aggregated_version(&HeaderMap::new()), None);
    }
}
