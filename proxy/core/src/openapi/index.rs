//! The `/openapi/v3` index and its merge.
//!
//! kube-openapi writes the index as `{"paths": {"apis/apps/v1": {"serverRelativeURL":
//! "/openapi/v3/apis/apps/v1?hash=<SHA-512 of the document, hex>"}}}`, keys sorted (Go's
//! `encoding/json` on a map), and serves it with `ETag: "<SHA-512 of the index, hex>"`
//! (`pkg/handler3/handler.go`: `OpenAPIV3Discovery`, `getGroupBytes`, `HandleDiscovery`,
//! <https://github.com/kubernetes/kube-openapi/blob/master/pkg/handler3/handler.go>). The merge
//! keeps every local entry byte for byte and adds, for each key the local server lacks, the
//! entry of the first peer in name order that the request for it would be routed to. Each
//! URL is the serving server's own, so its hash is the hash of the document that server
//! returns: the client's hash-keyed cache stays true.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha512};

use super::DocPath;
use crate::plumbing::ServerName;

/// The index document.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Index {
    /// Document path (`apis/apps/v1`) → where to get it.
    pub paths: BTreeMap<String, Entry>,
}

/// One document in the index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// `/openapi/v3/<path>?hash=<hash>`.
    #[serde(rename = "serverRelativeURL")]
    pub server_relative_url: String,
}

/// The local index plus, for each path the local index lacks, the entry of the first peer
/// (`peers` in name order) for which `routed_to(doc, peer)` holds: the peer a request for
/// that document may be sent to. Paths that name no group-version (`version`, `logs`) come
/// from the local index only.
pub fn merge(
    local: &Index,
    peers: &[(ServerName, Index)],
    routed_to: impl Fn(&DocPath, &ServerName) -> bool,
) -> Index {
    let mut merged = local.clone();
    for (peer, index) in peers {
        for (key, entry) in &index.paths {
            if merged.paths.contains_key(key) {
                continue;
            }
            let Some(doc) = DocPath::parse(key) else {
                continue;
            };
            if routed_to(&doc, peer) {
                merged.paths.insert(key.clone(), entry.clone());
            }
        }
    }
    merged
}

/// The body as kube-openapi writes it (compact, keys sorted) and its quoted `ETag`.
pub fn encode(index: &Index) -> (Vec<u8>, String) {
    let body = serde_json::to_vec(index).unwrap_or_default();
    let etag = etag_of(&body);
    (body, etag)
}

/// kube-openapi's `computeETag`, quoted: the SHA-512 of the body in upper-case hex.
pub fn etag_of(body: &[u8]) -> String {
    let digest = Sha512::digest(body);
    let mut s = String::with_capacity(2 + digest.len() * 2);
    s.push('"');
    for b in digest {
        s.push_str(&format!("{b:02X}"));
    }
    s.push('"');
    s
}

#[cfg(test)]
mod tests;
