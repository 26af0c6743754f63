//! Reading one server's OpenAPI document for a merge.
//!
//! As mvproxy's own discovery reads (`crate::discovery::fetch`): the discovery identity
//! (OpenAPI is readable by every authenticated user, the `system:discovery` ClusterRole), the
//! upstream's TLS and pool, and on a peer the `X-Kubernetes-Peer-Proxied` mark, so that a
//! peer behind its own mvproxy answers with its own document. No body is read past
//! `--max-discovery-document-bytes`.

use bytes::Bytes;
use http::StatusCode;
use http::header::{self, HeaderMap, HeaderValue};

use crate::error::ProxyError;
use crate::upstream::PEER_PROXIED;
use crate::upstream::{Upstream, discovery_identity};

/// `Accept` for JSON documents.
pub const JSON: &str = "application/json";
/// `Accept` and `Content-Type` of the v2 document as protobuf (kube-openapi
/// `pkg/handler/handler.go`, `subTypeProtobuf`).
pub const PROTOBUF_V2: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
/// The name client-go sends (`discovery/discovery_client.go`, `openAPIV2mimePb`), which
/// kube-openapi still accepts and answers with [`PROTOBUF_V2`].
pub const PROTOBUF_V2_DEPRECATED: &str =
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// Why a server's document could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// No response.
    #[error("GET {path}: {source}")]
    Request {
        /// The path.
        path: &'static str,
        /// Why.
        source: ProxyError,
    },
    /// An answer other than 200.
    #[error("GET {path}: HTTP {status}")]
    Status {
        /// The path.
        path: &'static str,
        /// The answer's status.
        status: StatusCode,
    },
    /// Not the document the path serves.
    #[error("GET {path}: undecodable document: {cause}")]
    Undecodable {
        /// The path.
        path: &'static str,
        /// Why it does not decode.
        cause: String,
    },
}

/// GETs `path` from `up` with `accept`, reading at most `limit` bytes.
pub async fn get(
    up: &Upstream,
    path: &'static str,
    accept: &'static str,
    peer: bool,
    limit: usize,
) -> Result<Bytes, FetchError> {
    let mut headers = HeaderMap::new();
    headers.insert(header::ACCEPT, HeaderValue::from_static(accept));
    discovery_identity(&mut headers);
    if peer {
        headers.insert(PEER_PROXIED, HeaderValue::from_static("true"));
    }
    let resp = up
        .open(path, headers)
        .await
        .map_err(|source| FetchError::Request { path, source })?;
    let (parts, body) = resp.into_parts();
    let body = up
        .collect(path, body, limit)
        .await
        .map_err(|source| FetchError::Request { path, source })?;
    if parts.status != StatusCode::OK {
        return Err(FetchError::Status {
            path,
            status: parts.status,
        });
    }
    Ok(body)
}
