//! Reading one server's API surface.
//!
//! `/api` and `/apis` are asked for with the `profile=nopeer` Accept (as client-go's `discovery/discovery_client.go`
//! `selectDiscoveryAcceptHeader` sends it with `NoPeerDiscovery`), so
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
use mvproxy_telemetry::metrics::values;

use super::legacy::group_from_legacy;
use super::types::{
    ACCEPT_NOPEER, AGGREGATED_GROUP, AGGREGATED_KIND, ApiGroupDiscovery, ApiGroupDiscoveryList,
    ApiGroupList, ApiResourceList, ApiVersions,
};
use super::view::ServerView;
use crate::discovery::side::ServerVersion;
use crate::error::{ProxyError, TransportFailure};
use crate::plumbing::causes;
use crate::upstream::Upstream;

const ACCEPT_JSON: &str = "application/json";

/// A document as fetched: aggregated (with its version) or legacy.
enum Document {
    Aggregated { v2: bool, body: Bytes },
    Legacy(Bytes),
    NotFound,
}

/// `type` label of `mvproxy_peer_discovery_sync_errors_total` when a server's host name did
/// not resolve.
pub const SYNC_ERROR_HOSTPORT_RESOLUTION: &str = values::HOSTPORT_RESOLUTION;
/// `type` label of `mvproxy_peer_discovery_sync_errors_total` for every other failure.
pub const SYNC_ERROR_FETCH_DISCOVERY: &str = values::FETCH_DISCOVERY;

/// Why a fetch failed; each message starts with the request (`GET /apis: …`).
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// No response: the server could not be reached or did not answer in time.
    #[error("GET {path}: {source}")]
    Request {
        /// The path requested.
        path: String,
        /// Why no response came.
        source: ProxyError,
    },
    /// The document is over `--max-discovery-document-bytes`, by its `Content-Length` if it
    /// declared one.
    #[error(
        "GET {path}: the document is larger than {limit} bytes (--max-discovery-document-bytes){}",
        declared.map(|len| format!(": its Content-Length is {len}")).unwrap_or_default()
    )]
    TooLarge {
        /// The path requested.
        path: String,
        /// `--max-discovery-document-bytes`.
        limit: usize,
        /// Its `Content-Length`, if it declared one.
        declared: Option<u64>,
    },
    /// The body stopped before its end.
    #[error("GET {path}: {upstream} stopped sending: {cause}")]
    Stopped {
        /// The path requested.
        path: String,
        /// The server.
        upstream: String,
        /// Why the body stopped, in words.
        cause: String,
    },
    /// An answer other than 200 or 404, with the start of its body.
    #[error("GET {path}: HTTP {status}: {body}")]
    Status {
        /// The path requested.
        path: String,
        /// The answer's status.
        status: StatusCode,
        /// The start of its body.
        body: String,
    },
    /// A legacy group-version the server listed is not there.
    #[error("GET {path}: 404 Not Found")]
    NotFound {
        /// The path requested.
        path: String,
    },
    /// Not the JSON the path serves.
    #[error("GET {path}: undecodable document: {source}")]
    Undecodable {
        /// The path requested.
        path: String,
        /// Why it does not decode.
        source: serde_json::Error,
    },
}

impl FetchError {
    /// The `type` label of `mvproxy_peer_discovery_sync_errors_total`: a failed name lookup
    /// is the peer's address failing, not its discovery.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Request {
                source:
                    ProxyError::Transport {
                        failure: TransportFailure::NameResolution,
                        ..
                    },
                ..
            } => SYNC_ERROR_HOSTPORT_RESOLUTION,
            _ => SYNC_ERROR_FETCH_DISCOVERY,
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
    Ok(ServerView::new(core, apis, raw).with_version(version(up.up).await))
}

/// Largest `/version` body read.
const MAX_VERSION_BYTES: usize = 64 << 10;

/// The server's `/version`, for the sides of the skew (`crate::skew`). Not part of
/// discovery: a failure leaves the release unknown and the fetch good, and it is not counted
/// as a rerouted request (upstream counts discovery requests only).
async fn version(up: &Upstream) -> Option<ServerVersion> {
    let resp = match up.get_response("/version", ACCEPT_JSON).await {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(server = %up.name, error = %e, "GET /version failed");
            return None;
        }
    };
    if resp.status() != StatusCode::OK {
        tracing::debug!(server = %up.name, status = %resp.status(), "GET /version failed");
        return None;
    }
    let body = Limited::new(resp.into_body(), MAX_VERSION_BYTES)
        .collect()
        .await
        .ok()?
        .to_bytes();
    ServerVersion::from_json(&body)
}

async fn legacy_resources(up: &Fetch<'_>, path: &str) -> Result<ApiResourceList, FetchError> {
    match get(up, path, ACCEPT_JSON).await? {
        Document::Legacy(body) | Document::Aggregated { body, .. } => Ok(decode(path, &body)?),
        Document::NotFound => Err(FetchError::NotFound {
            path: path.to_owned(),
        }),
    }
}

async fn get(f: &Fetch<'_>, path: &str, accept: &str) -> Result<Document, FetchError> {
    let resp = match f.up.get_response(path, accept).await {
        Ok(r) => r,
        Err(source) => {
            (f.observe)(StatusCode::SERVICE_UNAVAILABLE);
            return Err(FetchError::Request {
                path: path.to_owned(),
                source,
            });
        }
    };
    let (parts, body) = resp.into_parts();
    let (status, headers) = (parts.status, parts.headers);
    (f.observe)(status);
    let too_large = |declared| FetchError::TooLarge {
        path: path.to_owned(),
        limit: f.limit,
        declared,
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(len) = declared
        && len > f.limit as u64
    {
        return Err(too_large(Some(len)));
    }
    let body = match Limited::new(body, f.limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            return Err(too_large(None));
        }
        Err(e) => {
            return Err(FetchError::Stopped {
                path: path.to_owned(),
                upstream: f.up.name.to_string(),
                cause: causes(e.as_ref()),
            });
        }
    };
    match status {
        StatusCode::OK => Ok(match aggregated_version(&headers) {
            Some(v2) => Document::Aggregated { v2, body },
            None => Document::Legacy(body),
        }),
        StatusCode::NOT_FOUND => Ok(Document::NotFound),
        other => Err(FetchError::Status {
            path: path.to_owned(),
            status: other,
            body: String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
        }),
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

fn decode<T: serde::de::DeserializeOwned>(path: &str, body: &[u8]) -> Result<T, FetchError> {
    serde_json::from_slice(body).map_err(|source| FetchError::Undecodable {
        path: path.to_owned(),
        source,
    })
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
        let settings = crate::upstream::ClientSettings {
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
        assert_eq!(e.kind(), SYNC_ERROR_FETCH_DISCOVERY);
        assert!(matches!(e, FetchError::TooLarge { declared: None, .. }));
        assert_eq!(
            e.to_string(),
            "GET /api: the document is larger than 1024 bytes (--max-discovery-document-bytes)"
        );

        // declared by Content-Length: refused before reading
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: {AGGREGATED}\r\ncontent-length: 5000\r\n\r\n"
        );
        let up = raw_server(head, vec![vec![b' '; 5000]]).await;
        let e = fetch(&up, 1024, &|_| {}).await.unwrap_err();
        assert!(
            e.to_string().ends_with("larger than 1024 bytes (--max-discovery-document-bytes): its Content-Length is 5000"),
            "{e}"
        );

        // under the limit: /api is read and used (the fetch then fails at /apis, as this
        // server answers only once)
        let head =
            format!("HTTP/1.1 200 OK\r\ncontent-type: {AGGREGATED}\r\ncontent-length: 12\r\n\r\n");
        let up = raw_server(head, vec![br#"{"items":[]}"#.to_vec()]).await;
        let e = fetch(&up, 1024, &|_| {}).await.unwrap_err();
        assert!(e.to_string().starts_with("GET /apis: "), "{e}");
    }

    /// A real kube-apiserver answers `401` to a discovery read over the front-proxy client
    /// certificate that names no user (found against kube-apiserver 1.35.4 and 1.36.3 by
    /// `scripts/conformance/control-plane.sh`; the stand-in did not authenticate). The fetch
    /// says who it is, as upstream's peer discovery does.
    #[tokio::test]
    async fn discovery_reads_carry_upstreams_discovery_identity() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base: http::Uri = format!("http://{}", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let mut seen = Vec::new();
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut buf).await.unwrap();
                seen.extend_from_slice(&buf[..n]);
            }
            let _ = tx.send(String::from_utf8_lossy(&seen).to_lowercase());
            let _ = s
                .write_all(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n")
                .await;
        });
        let settings = crate::upstream::ClientSettings {
            tls: None,
            server_name: None,
            connect_timeout: Duration::from_secs(5),
            insecure_skip_verify: false,
        };
        let up = Upstream::new("peer".into(), base, &settings, Duration::from_secs(10)).unwrap();
        let e = fetch(&up, 1024, &|_| {}).await.unwrap_err();
        assert!(e.to_string().contains("HTTP 401"), "{e}");
        let head = rx.await.unwrap();
        for line in [
            "x-remote-user: system:apiserver\r\n",
            "x-remote-uid: system:apiserver\r\n",
            "x-remote-group: system:authenticated\r\n",
        ] {
            assert!(
                head.contains(line),
                "{line:?} missing from the request:\n{head}"
            );
        }
    }

    #[test]
    fn name_resolution_failures_are_told_apart_by_type() {
        let transport = |failure| FetchError::Request {
            path: "/api".to_owned(),
            source: ProxyError::Transport {
                upstream: "apiserver-b".into(),
                failure,
                // the words do not decide: only the failure's type does
                cause: "dns error: failed to lookup address information".to_owned(),
                written: false,
            },
        };
        assert_eq!(
            transport(TransportFailure::NameResolution).kind(),
            SYNC_ERROR_HOSTPORT_RESOLUTION
        );
        assert_eq!(
            transport(TransportFailure::Other).kind(),
            SYNC_ERROR_FETCH_DISCOVERY
        );
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_fetch_error_naming_the_request() {
        // a port the OS handed out and nothing listens on any more
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let settings = crate::upstream::ClientSettings {
            tls: None,
            server_name: None,
            connect_timeout: Duration::from_secs(5),
            insecure_skip_verify: false,
        };
        let base = format!("http://{addr}").parse().unwrap();
        let up = Upstream::new("peer".into(), base, &settings, Duration::from_secs(5)).unwrap();
        let e = fetch(&up, 1024, &|_| {}).await.unwrap_err();
        assert_eq!(e.kind(), SYNC_ERROR_FETCH_DISCOVERY);
        assert!(
            matches!(
                &e,
                FetchError::Request {
                    source: ProxyError::Transport {
                        failure: TransportFailure::Other,
                        ..
                    },
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with("GET /api: peer could not be reached: "),
            "{e}"
        );
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
