//! Merged OpenAPI documents, fetched and built once per discovery snapshot, and their answer.
//!
//! A snapshot changes whenever a server's surface or state does, which is when the merge can
//! change; between two snapshots every request is answered from memory. The first request
//! after a change fetches what the merge needs (the local document and those of the peers
//! that serve something only they serve), builds the document, and requests that arrive
//! meanwhile wait for it (`tokio::sync::OnceCell`). A failed read of the local document
//! caches nothing: the request goes to the local server, which gives its own answer. A peer
//! that is down, or whose read fails, contributes its last good document (discovery keeps a
//! down server's last view too, and routes what only it serves to a `503`), or nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Response, StatusCode};
use mvproxy_telemetry::metrics::{DocumentLabels, Metrics, OpenApiMergeLabels, values};
use mvproxy_telemetry::trace::{KeyValue, RequestSpan};
use serde_json::Value;
use tokio::sync::OnceCell;

use super::fetch::{self, FetchError, JSON, PROTOBUF_V2, PROTOBUF_V2_DEPRECATED};
use super::index::{self, Index};
use super::{DocPath, Merged, v2};
use crate::discovery::Snapshot;
use crate::plumbing::ServerName;
use crate::plumbing::{Body, full};
use crate::route::openapi::peer_only_gvs;
use crate::upstream::Upstream;

/// One document a merge reads or builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    V3Index,
    V2Json,
    V2Protobuf,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Self::V3Index => values::OPENAPI_V3_INDEX,
            Self::V2Json => values::OPENAPI_V2_JSON,
            Self::V2Protobuf => values::OPENAPI_V2_PROTOBUF,
        }
    }

    fn path(self) -> &'static str {
        match self {
            Self::V3Index => "/openapi/v3",
            Self::V2Json | Self::V2Protobuf => "/openapi/v2",
        }
    }

    fn accept(self) -> &'static str {
        match self {
            Self::V3Index | Self::V2Json => JSON,
            Self::V2Protobuf => PROTOBUF_V2,
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Self::V3Index | Self::V2Json => JSON,
            Self::V2Protobuf => PROTOBUF_V2,
        }
    }
}

/// A merged document as served.
#[derive(Debug)]
struct Doc {
    body: Bytes,
    etag: String,
}

/// The documents of one snapshot.
#[derive(Debug, Default)]
struct Docs {
    v3_index: OnceCell<Arc<Doc>>,
    v2_json: OnceCell<Arc<Doc>>,
    v2_protobuf: OnceCell<Arc<Doc>>,
}

impl Docs {
    fn cell(&self, kind: Kind) -> &OnceCell<Arc<Doc>> {
        match kind {
            Kind::V3Index => &self.v3_index,
            Kind::V2Json => &self.v2_json,
            Kind::V2Protobuf => &self.v2_protobuf,
        }
    }
}

/// The merged OpenAPI documents of the current snapshot, and each server's last good one.
#[derive(Debug)]
pub struct OpenApi {
    limit: usize,
    /// The snapshot the documents belong to (held, so its address names it alone).
    current: Mutex<Option<(Arc<Snapshot>, Arc<Docs>)>>,
    last_good: Mutex<HashMap<(ServerName, Kind), Bytes>>,
}

/// Why a merge could not be built (the local document could not be read or decoded).
#[derive(Debug, thiserror::Error)]
enum MergeError {
    #[error("local server: {0}")]
    Local(FetchError),
}

impl OpenApi {
    /// Documents no larger than `limit` bytes are read (`--max-discovery-document-bytes`).
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            current: Mutex::new(None),
            last_good: Mutex::new(HashMap::new()),
        }
    }

    fn docs(&self, snap: &Arc<Snapshot>) -> Arc<Docs> {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        match &*current {
            Some((s, docs)) if Arc::ptr_eq(s, snap) => docs.clone(),
            _ => {
                let docs = Arc::new(Docs::default());
                *current = Some((snap.clone(), docs.clone()));
                docs
            }
        }
    }

    /// Answers `doc` from the snapshot's merge (building it if this is the first request), or
    /// `None` to let the local server answer: a format the merge does not render, or a local
    /// document that could not be read.
    pub(crate) async fn serve(
        &self,
        local: &Upstream,
        snap: &Arc<Snapshot>,
        span: &RequestSpan,
        metrics: &Metrics,
        doc: Merged,
        headers: &HeaderMap,
    ) -> Option<Response<Body>> {
        let kind = match doc {
            Merged::V3Index => Kind::V3Index,
            Merged::V2 => negotiate_v2(headers.get(header::ACCEPT))?,
        };
        let docs = self.docs(snap);
        let started = Instant::now();
        let mut built = false;
        let merged = docs
            .cell(kind)
            .get_or_try_init(|| {
                built = true;
                self.build(kind, local, snap)
            })
            .await;
        let took = started.elapsed();
        let merged = match merged {
            Ok(m) => m.clone(),
            Err(e) => {
                tracing::warn!(error = %e, document = kind.label(), "OpenAPI merge failed; the local server answers");
                return None;
            }
        };
        metrics
            .openapi_merges
            .get_or_create(&OpenApiMergeLabels {
                document: kind.label(),
                result: values::result(!built),
            })
            .inc();
        if built {
            metrics
                .openapi_merge_duration
                .get_or_create(&DocumentLabels {
                    document: kind.label(),
                })
                .observe(took.as_secs_f64());
        }
        if span.is_recording() {
            span.add_event(
                "openapi.merge",
                vec![
                    KeyValue::new("document", kind.label()),
                    KeyValue::new("result", values::result(!built)),
                    KeyValue::new(
                        "duration_us",
                        i64::try_from(took.as_micros()).unwrap_or(i64::MAX),
                    ),
                ],
            );
        }
        Some(respond(kind, &merged, headers))
    }

    async fn build(
        &self,
        kind: Kind,
        local: &Upstream,
        snap: &Snapshot,
    ) -> Result<Arc<Doc>, MergeError> {
        let local_doc = fetch::get(local, kind.path(), kind.accept(), false, self.limit)
            .await
            .map_err(MergeError::Local)?;
        let routed = |doc: &DocPath, peer: &ServerName| routed_to(snap, doc, peer);
        let peers = contributing_peers(snap);
        let body = match kind {
            Kind::V3Index => {
                let local: Index = decode_json(kind, &local_doc).map_err(MergeError::Local)?;
                let mut indexes = Vec::new();
                for peer in &peers {
                    if let Some(raw) = self.peer_doc(snap, peer, kind).await
                        && let Ok(i) = decode_json::<Index>(kind, &raw)
                    {
                        indexes.push((peer.clone(), i));
                    }
                }
                index::encode(&index::merge(&local, &indexes, routed)).0
            }
            Kind::V2Json => {
                let mut local: Value = decode_json(kind, &local_doc).map_err(MergeError::Local)?;
                let names = v2::Names::of_json(&local);
                let docs = self.peer_json(snap, &peers).await;
                let refs: Vec<(ServerName, &Value)> =
                    docs.iter().map(|(n, v)| (n.clone(), v)).collect();
                let selections = v2::select(&names, &refs, routed);
                let pairs: Vec<(&Value, &v2::Selection)> =
                    docs.iter().map(|(_, v)| v).zip(&selections).collect();
                v2::merge_json(&mut local, &pairs);
                serde_json::to_vec(&local).unwrap_or_default()
            }
            Kind::V2Protobuf => {
                let names = v2::Names::of_protobuf(&local_doc).map_err(|e| {
                    MergeError::Local(FetchError::Undecodable {
                        path: kind.path(),
                        cause: e.to_string(),
                    })
                })?;
                let docs = self.peer_json(snap, &peers).await;
                let refs: Vec<(ServerName, &Value)> =
                    docs.iter().map(|(n, v)| (n.clone(), v)).collect();
                let selections = v2::select(&names, &refs, routed);
                let mut pairs = Vec::new();
                for ((peer, _), sel) in docs.iter().zip(&selections) {
                    if sel.is_empty() {
                        continue;
                    }
                    if let Some(pb) = self.peer_doc(snap, peer, Kind::V2Protobuf).await {
                        pairs.push((pb, sel));
                    }
                }
                match v2::merge_protobuf(&local_doc, &pairs) {
                    Ok(b) => b,
                    Err(e) => {
                        // A peer's document that does not decode: serve the local one.
                        tracing::warn!(error = %e, "a peer's /openapi/v2 (protobuf) does not decode; not merged");
                        local_doc.to_vec()
                    }
                }
            }
        };
        let etag = index::etag_of(&body);
        Ok(Arc::new(Doc {
            body: Bytes::from(body),
            etag,
        }))
    }

    /// The peers' v2 JSON documents (for choosing what to take), those that could be read.
    async fn peer_json(&self, snap: &Snapshot, peers: &[ServerName]) -> Vec<(ServerName, Value)> {
        let mut out = Vec::new();
        for peer in peers {
            if let Some(raw) = self.peer_doc(snap, peer, Kind::V2Json).await {
                match decode_json::<Value>(Kind::V2Json, &raw) {
                    Ok(v) => out.push((peer.clone(), v)),
                    Err(e) => tracing::warn!(%peer, error = %e, "peer's OpenAPI not merged"),
                }
            }
        }
        out
    }

    /// A peer's document: fetched if the peer is up, else (or if the read fails) its last
    /// good one.
    async fn peer_doc(&self, snap: &Snapshot, peer: &ServerName, kind: Kind) -> Option<Bytes> {
        let up = snap.peer(peer).is_some_and(|e| e.up);
        if up && let Some(upstream) = snap.upstream(peer) {
            match fetch::get(upstream, kind.path(), kind.accept(), true, self.limit).await {
                Ok(body) => {
                    self.last_good
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert((peer.clone(), kind), body.clone());
                    return Some(body);
                }
                Err(e) => {
                    tracing::warn!(%peer, error = %e, "peer's OpenAPI not read; its last good document is used, if any")
                }
            }
        }
        self.last_good
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(peer.clone(), kind))
            .cloned()
    }
}

/// Peers that serve some group-version the local server does not, in name order.
fn contributing_peers(snap: &Snapshot) -> Vec<ServerName> {
    let mut peers: Vec<ServerName> = Vec::new();
    for (_, peer) in peer_only_gvs(snap) {
        if !peers.contains(&peer) {
            peers.push(peer);
        }
    }
    peers.sort();
    peers
}

/// Whether a request for `doc` may be routed to `peer`: the local server does not serve it
/// and `peer` does (after the CRD/APIService exclusion), as `crate::route::openapi` decides.
fn routed_to(snap: &Snapshot, doc: &DocPath, peer: &ServerName) -> bool {
    let Some(local) = snap.local() else {
        return false;
    };
    let (group, version) = doc.group_version();
    let local_serves = match version {
        Some(v) => local.serves_gv(group, v),
        None => local.serves_group(group),
    };
    !local_serves && snap.peers_serving_gv(group, version).contains(peer)
}

fn decode_json<T: serde::de::DeserializeOwned>(kind: Kind, body: &[u8]) -> Result<T, FetchError> {
    serde_json::from_slice(body).map_err(|e| FetchError::Undecodable {
        path: kind.path(),
        cause: e.to_string(),
    })
}

/// The v2 format a request asks for, as kube-openapi's handler chooses it: the first
/// acceptable media range by quality (absent `Accept` is `*/*`, which is JSON); `None` when
/// nothing is acceptable (the local server answers `406`).
fn negotiate_v2(accept: Option<&HeaderValue>) -> Option<Kind> {
    let accept = match accept {
        None => "*/*",
        Some(v) => v.to_str().ok()?,
    };
    let accept = if accept.trim().is_empty() {
        "*/*"
    } else {
        accept
    };
    let mut ranges: Vec<(f32, &str)> = accept
        .split(',')
        .filter_map(|range| {
            let mut params = range.split(';');
            let media = params.next()?.trim();
            let q = params
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            (q > 0.0).then_some((q, media))
        })
        .collect();
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0));
    let offered = [
        ("application/json", Kind::V2Json),
        (PROTOBUF_V2_DEPRECATED, Kind::V2Protobuf),
        (PROTOBUF_V2, Kind::V2Protobuf),
    ];
    for (_, media) in ranges {
        let (ty, sub) = media.split_once('/')?;
        for (offer, kind) in offered {
            let (oty, osub) = offer.split_once('/')?;
            if (ty == "*" || ty.eq_ignore_ascii_case(oty))
                && (sub == "*" || sub.eq_ignore_ascii_case(osub))
            {
                return Some(kind);
            }
        }
    }
    None
}

/// The answer: the document, or `304` when the client holds it (`If-None-Match`).
fn respond(kind: Kind, doc: &Doc, headers: &HeaderMap) -> Response<Body> {
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .any(|t| t.trim() == doc.etag || t.trim() == "*")
        });
    let mut resp = if fresh {
        let mut r = Response::new(full(Bytes::new()));
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        let mut r = Response::new(full(doc.body.clone()));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(kind.content_type()),
        );
        r
    };
    let h = resp.headers_mut();
    if let Ok(etag) = HeaderValue::from_str(&doc.etag) {
        h.insert(header::ETAG, etag);
    }
    if kind != Kind::V3Index {
        h.insert(header::VARY, HeaderValue::from_static("Accept"));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_negotiation_follows_kube_openapi() {
        let n = |a: &'static str| negotiate_v2(Some(&HeaderValue::from_static(a)));
        assert_eq!(negotiate_v2(None), Some(Kind::V2Json));
        assert_eq!(n("*/*"), Some(Kind::V2Json));
        assert_eq!(n(PROTOBUF_V2_DEPRECATED), Some(Kind::V2Protobuf));
        assert_eq!(n(PROTOBUF_V2), Some(Kind::V2Protobuf));
        assert_eq!(
            n("application/json;q=0.5, application/com.github.proto-openapi.spec.v2@v1.0+protobuf"),
            Some(Kind::V2Protobuf)
        );
        assert_eq!(n("application/yaml"), None);
    }
}
