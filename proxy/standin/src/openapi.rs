//! OpenAPI documents as kube-apiserver serves them, built from what this server serves.
//!
//! `/openapi/v2` (JSON only: a protobuf-only `Accept` gets `406`), the `/openapi/v3` index
//! `{"paths": {"apis/g/v": {"serverRelativeURL": "/openapi/v3/apis/g/v?hash=…"}}}` and one
//! v3 document per group (`apis/g`) and group-version (`apis/g/v`, `api/v1`). A request with
//! the current `hash` gets `Cache-Control: public, immutable`, one with another hash a `301`
//! to the current URL, as kube-openapi's `handler3` answers. Every definition and schema is
//! named after the kind, and `ObjectMeta` says which server described it, so a test can tell
//! whose document a merge took.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use bytes::Bytes;
use http::header::{ACCEPT, CACHE_CONTROL, ETAG, IF_NONE_MATCH, LOCATION};
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use serde_json::{Value, json};

use super::catalog::Catalog;
use super::respond::{self, Body};

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// Every OpenAPI document of one server, rendered once at start.
#[derive(Debug)]
pub(super) struct OpenApiDocs {
    v2: Bytes,
    index: Bytes,
    /// `apis/g/v` → (document, hash).
    v3: BTreeMap<String, (Bytes, String)>,
}

fn hash_of(body: &[u8]) -> String {
    let mut h = DefaultHasher::new();
    body.hash(&mut h);
    format!("{:016X}", h.finish())
}

fn definition(group: &str, version: &str, kind: &str) -> String {
    let group = if group.is_empty() { "core" } else { group };
    format!("io.k8s.api.{group}.{version}.{kind}")
}

impl OpenApiDocs {
    pub(super) fn new(catalog: &Catalog, server: &str) -> Self {
        let mut paths = serde_json::Map::new();
        let mut definitions = serde_json::Map::new();
        definitions.insert(
            OBJECT_META.to_owned(),
            json!({"type": "object", "description": format!("ObjectMeta as {server} describes it")}),
        );
        let mut v3 = BTreeMap::new();
        let groups = std::iter::once(catalog.core()).chain(catalog.groups());
        for g in groups {
            let group = g.name();
            if !group.is_empty() {
                let path = format!("/apis/{group}/");
                paths.insert(
                    path.clone(),
                    json!({"get": {"operationId": format!("getAPIGroup{group}")}}),
                );
                let doc = json!({"openapi": "3.0.0", "paths": {path: {}}});
                let body = Bytes::from(serde_json::to_vec(&doc).unwrap_or_default());
                v3.insert(format!("apis/{group}"), (body.clone(), hash_of(&body)));
            }
            for v in &g.versions {
                let version = &v.version;
                let prefix = if group.is_empty() {
                    format!("/api/{version}")
                } else {
                    format!("/apis/{group}/{version}")
                };
                let mut v3_paths = serde_json::Map::new();
                let mut schemas = serde_json::Map::new();
                schemas.insert(OBJECT_META.to_owned(), definitions[OBJECT_META].clone());
                for r in &v.resources {
                    let kind = r
                        .response_kind
                        .as_ref()
                        .map(|k| k.kind.clone())
                        .unwrap_or_default();
                    let name = definition(group, version, &kind);
                    let path = format!("{prefix}/{}", r.resource);
                    paths.insert(path.clone(), json!({"get": {"responses": {"200": {"schema": {"$ref": format!("#/definitions/{name}")}}}}}));
                    v3_paths.insert(path, json!({"get": {"responses": {"200": {"content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{name}")}}}}}}}));
                    let schema = json!({
                        "type": "object",
                        "properties": {"metadata": {"$ref": format!("#/definitions/{OBJECT_META}")}},
                        "x-kubernetes-group-version-kind": [{"group": group, "version": version, "kind": kind}]
                    });
                    definitions.insert(name.clone(), schema.clone());
                    schemas.insert(name, schema);
                }
                let doc = json!({"openapi": "3.0.0", "paths": v3_paths, "components": {"schemas": schemas}});
                let body = Bytes::from(serde_json::to_vec(&doc).unwrap_or_default());
                let key = prefix.trim_start_matches('/').to_owned();
                v3.insert(key, (body.clone(), hash_of(&body)));
            }
        }
        let v2 = json!({"swagger": "2.0", "info": {"title": "Kubernetes"}, "paths": paths, "definitions": definitions});
        let index: BTreeMap<&String, Value> = v3
            .iter()
            .map(|(k, (_, hash))| {
                (
                    k,
                    json!({"serverRelativeURL": format!("/openapi/v3/{k}?hash={hash}")}),
                )
            })
            .collect();
        Self {
            v2: Bytes::from(serde_json::to_vec(&v2).unwrap_or_default()),
            index: Bytes::from(serde_json::to_vec(&json!({"paths": index})).unwrap_or_default()),
            v3,
        }
    }

    /// `GET /openapi/v2`.
    pub(super) fn v2(&self, headers: &HeaderMap) -> Response<Body> {
        let accept = headers
            .get(ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("*/*");
        let json_ok = accept.is_empty()
            || accept.split(',').any(|r| {
                let media = r.split(';').next().unwrap_or("").trim();
                matches!(media, "application/json" | "*/*" | "application/*")
            });
        if !json_ok {
            return respond::text(StatusCode::NOT_ACCEPTABLE, "");
        }
        with_etag(self.v2.clone(), &hash_of(&self.v2), headers)
    }

    /// `GET /openapi/v3`.
    pub(super) fn index(&self, headers: &HeaderMap) -> Response<Body> {
        with_etag(self.index.clone(), &hash_of(&self.index), headers)
    }

    /// `GET /openapi/v3/{key}[?hash=…]`.
    pub(super) fn document(
        &self,
        key: &str,
        query: Option<&str>,
        headers: &HeaderMap,
    ) -> Response<Body> {
        let Some((body, hash)) = self.v3.get(key) else {
            return respond::page_not_found();
        };
        let asked = query
            .unwrap_or("")
            .split('&')
            .find_map(|kv| kv.strip_prefix("hash="));
        match asked {
            Some(h) if h != hash => {
                let mut r = respond::text(StatusCode::MOVED_PERMANENTLY, "");
                if let Ok(v) = HeaderValue::from_str(&format!("/openapi/v3/{key}?hash={hash}")) {
                    r.headers_mut().insert(LOCATION, v);
                }
                r
            }
            Some(_) => {
                let mut r = with_etag(body.clone(), hash, headers);
                r.headers_mut()
                    .insert(CACHE_CONTROL, HeaderValue::from_static("public, immutable"));
                r
            }
            None => with_etag(body.clone(), hash, headers),
        }
    }
}

fn with_etag(body: Bytes, hash: &str, headers: &HeaderMap) -> Response<Body> {
    let etag = format!("\"{hash}\"");
    let mut r = if headers
        .get(IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes())
    {
        respond::bytes(StatusCode::NOT_MODIFIED, "application/json", Bytes::new())
    } else {
        respond::bytes(StatusCode::OK, "application/json", body)
    };
    r.headers_mut().remove(CACHE_CONTROL);
    if let Ok(v) = HeaderValue::from_str(&etag) {
        r.headers_mut().insert(ETAG, v);
    }
    r
}
