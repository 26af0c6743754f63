//! The `/openapi/v2` merge, in JSON and in protobuf.
//!
//! Upstream's aggregator merges whole specs (kube-openapi `pkg/aggregator/aggregator.go`,
//! `MergeSpecsIgnorePathConflictRenamingDefinitionsAndParameters`, as kube-aggregator's
//! `pkg/controllers/openapi/aggregator` uses it for APIServices,
//! <https://github.com/kubernetes/kube-openapi/blob/master/pkg/aggregator/aggregator.go>):
//! paths, then definitions and parameters, renaming a definition that differs. Across a skew
//! the two specs describe the same built-in API twice, so mvproxy merges less: from a peer
//! it takes only the paths of the group-versions routed to it (`/apis/{group}/{version}/…`,
//! and `/apis/{group}/` when the local server lacks the whole group), then the definitions
//! and shared parameters those paths reference, transitively, that the local document does
//! not have. A definition both have is the local one (a shared type such as `ObjectMeta`
//! described as the local release has it), so nothing is renamed and every document the
//! local server serves is unchanged in the merge.
//!
//! The protobuf form is gnostic's `openapi.v2.Document`
//! (<https://github.com/google/gnostic/blob/main/openapiv2/OpenAPIv2.proto>), which
//! kube-openapi produces from the JSON (`pkg/handler/handler.go`, `ToProtoBinary`). No
//! maintained crate carries gnostic's types, and mvproxy needs none of a schema's fields: it
//! reads only the three named lists it merges (`Document.paths` = 8 with `Paths.path` = 2,
//! `Document.definitions` = 9 and `Document.parameters` = 10 with `additional_properties` =
//! 1, each entry a `name` = 1 and a `value` = 2 kept as its encoded bytes) with `prost`, and
//! appends the chosen entries to the local document as a second encoded `Document`:
//! protobuf parses concatenated messages as one, appending to repeated fields and merging
//! embedded messages (<https://protobuf.dev/programming-guides/encoding/#last-one-wins>).

use std::collections::{BTreeSet, HashSet};

use bytes::Bytes;
use serde_json::Value;

use super::DocPath;
use crate::plumbing::ServerName;

/// What the local document already has, by name.
#[derive(Debug, Default)]
pub struct Names {
    /// Its paths.
    pub paths: HashSet<String>,
    /// Its definitions.
    pub definitions: HashSet<String>,
    /// Its shared parameters.
    pub parameters: HashSet<String>,
}

impl Names {
    /// The names in a JSON document.
    pub fn of_json(doc: &Value) -> Self {
        let keys = |field: &str| -> HashSet<String> {
            doc.get(field)
                .and_then(Value::as_object)
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default()
        };
        Self {
            paths: keys("paths"),
            definitions: keys("definitions"),
            parameters: keys("parameters"),
        }
    }

    /// The names in a protobuf document.
    pub fn of_protobuf(doc: &[u8]) -> Result<Self, prost::DecodeError> {
        let parts = proto::Parts::decode(doc)?;
        let names = |list: Vec<proto::Named>| list.into_iter().map(|n| n.name).collect();
        Ok(Self {
            paths: names(parts.paths.map(|p| p.path).unwrap_or_default()),
            definitions: names(
                parts
                    .definitions
                    .map(|d| d.additional_properties)
                    .unwrap_or_default(),
            ),
            parameters: names(
                parts
                    .parameters
                    .map(|d| d.additional_properties)
                    .unwrap_or_default(),
            ),
        })
    }

    fn add(&mut self, selection: &Selection) {
        self.paths.extend(selection.paths.iter().cloned());
        self.definitions
            .extend(selection.definitions.iter().cloned());
        self.parameters.extend(selection.parameters.iter().cloned());
    }
}

/// What to take from one peer's document.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// Paths.
    pub paths: BTreeSet<String>,
    /// Definitions.
    pub definitions: BTreeSet<String>,
    /// Shared parameters (`#/parameters/…`).
    pub parameters: BTreeSet<String>,
}

impl Selection {
    /// Nothing to take.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }
}

/// The group-version (or group) document a v2 path belongs to: `/apis/{g}/{v}/…`,
/// `/apis/{g}/`, `/api/{v}/…`.
pub fn doc_of_path(path: &str) -> Option<DocPath> {
    if let Some(rest) = path.strip_prefix("/apis/") {
        let mut parts = rest.split('/');
        let group = parts.next().filter(|g| !g.is_empty())?;
        return match parts.next() {
            Some("") | None => Some(DocPath::Group {
                group: group.to_owned(),
            }),
            Some(version) => Some(DocPath::GroupVersion {
                group: group.to_owned(),
                version: version.to_owned(),
            }),
        };
    }
    let rest = path.strip_prefix("/api/")?;
    let version = rest.split('/').next().filter(|v| !v.is_empty())?;
    Some(DocPath::Core {
        version: version.to_owned(),
    })
}

/// Chooses what to take from each peer's JSON document (`peers` in name order): the paths
/// of documents `routed_to` that peer that neither the local document nor an earlier peer
/// has, and what they reference that is not there yet.
pub fn select(
    local: &Names,
    peers: &[(ServerName, &Value)],
    routed_to: impl Fn(&DocPath, &ServerName) -> bool,
) -> Vec<Selection> {
    let mut have = Names {
        paths: local.paths.clone(),
        definitions: local.definitions.clone(),
        parameters: local.parameters.clone(),
    };
    let mut out = Vec::with_capacity(peers.len());
    for (peer, doc) in peers {
        let mut sel = Selection::default();
        let mut pending: Vec<&Value> = Vec::new();
        if let Some(paths) = doc.get("paths").and_then(Value::as_object) {
            for (path, item) in paths {
                if have.paths.contains(path) {
                    continue;
                }
                if doc_of_path(path).is_some_and(|d| routed_to(&d, peer)) {
                    sel.paths.insert(path.clone());
                    pending.push(item);
                }
            }
        }
        while let Some(v) = pending.pop() {
            let mut refs = Vec::new();
            collect_refs(v, &mut refs);
            for r in refs {
                if let Some(name) = r.strip_prefix("#/definitions/") {
                    if have.definitions.contains(name) || sel.definitions.contains(name) {
                        continue;
                    }
                    if let Some(def) = doc.pointer(&format!("/definitions/{}", escape(name))) {
                        sel.definitions.insert(name.to_owned());
                        pending.push(def);
                    }
                } else if let Some(name) = r.strip_prefix("#/parameters/") {
                    if have.parameters.contains(name) || sel.parameters.contains(name) {
                        continue;
                    }
                    if let Some(p) = doc.pointer(&format!("/parameters/{}", escape(name))) {
                        sel.parameters.insert(name.to_owned());
                        pending.push(p);
                    }
                }
            }
        }
        have.add(&sel);
        out.push(sel);
    }
    out
}

/// A JSON pointer token (RFC 6901): `~` and `/` escaped.
fn escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

fn collect_refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(o) => {
            for (k, v) in o {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => out.push(r),
                    _ => collect_refs(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

/// Adds each peer's selection to the local JSON document.
pub fn merge_json(local: &mut Value, peers: &[(&Value, &Selection)]) {
    for (doc, sel) in peers {
        for (field, names) in [
            ("paths", &sel.paths),
            ("definitions", &sel.definitions),
            ("parameters", &sel.parameters),
        ] {
            let Some(from) = doc.get(field).and_then(Value::as_object) else {
                continue;
            };
            let Some(into) = local.as_object_mut().map(|o| {
                o.entry(field)
                    .or_insert_with(|| Value::Object(Default::default()))
            }) else {
                continue;
            };
            let Some(into) = into.as_object_mut() else {
                continue;
            };
            for name in names {
                if let Some(v) = from.get(name) {
                    into.insert(name.clone(), v.clone());
                }
            }
        }
    }
}

/// The local protobuf document with each peer's selection appended.
pub fn merge_protobuf(
    local: &Bytes,
    peers: &[(Bytes, &Selection)],
) -> Result<Vec<u8>, prost::DecodeError> {
    let mut out = local.to_vec();
    for (doc, sel) in peers {
        let parts = proto::Parts::decode(doc)?;
        let keep = |list: Vec<proto::Named>, names: &BTreeSet<String>| -> Vec<proto::Named> {
            list.into_iter()
                .filter(|n| names.contains(&n.name))
                .collect()
        };
        let add = proto::Parts {
            paths: parts.paths.map(|p| proto::Paths {
                path: keep(p.path, &sel.paths),
            }),
            definitions: parts.definitions.map(|d| proto::NamedList {
                additional_properties: keep(d.additional_properties, &sel.definitions),
            }),
            parameters: parts.parameters.map(|d| proto::NamedList {
                additional_properties: keep(d.additional_properties, &sel.parameters),
            }),
        };
        out.extend(proto::Parts::encode(&add));
    }
    Ok(out)
}

/// The parts of gnostic's `openapi.v2.Document` that are merged; every other field is
/// skipped when read and never written.
pub(crate) mod proto {
    use bytes::Bytes;
    use prost::Message;

    /// `Document`, fields 8 (`paths`), 9 (`definitions`), 10 (`parameters`).
    #[derive(Clone, PartialEq, Message)]
    pub(crate) struct Parts {
        #[prost(message, optional, tag = "8")]
        pub(crate) paths: Option<Paths>,
        #[prost(message, optional, tag = "9")]
        pub(crate) definitions: Option<NamedList>,
        #[prost(message, optional, tag = "10")]
        pub(crate) parameters: Option<NamedList>,
    }

    /// `Paths`: `repeated NamedPathItem path = 2` (its vendor extensions, 1, are skipped).
    #[derive(Clone, PartialEq, Message)]
    pub(crate) struct Paths {
        #[prost(message, repeated, tag = "2")]
        pub(crate) path: Vec<Named>,
    }

    /// `Definitions` and `ParameterDefinitions`: `repeated Named… additional_properties = 1`.
    #[derive(Clone, PartialEq, Message)]
    pub(crate) struct NamedList {
        #[prost(message, repeated, tag = "1")]
        pub(crate) additional_properties: Vec<Named>,
    }

    /// `NamedPathItem`, `NamedSchema`, `NamedParameter`: the value kept encoded.
    #[derive(Clone, PartialEq, Message)]
    pub(crate) struct Named {
        #[prost(string, tag = "1")]
        pub(crate) name: String,
        #[prost(bytes = "bytes", tag = "2")]
        pub(crate) value: Bytes,
    }

    impl Parts {
        pub(crate) fn decode(doc: &[u8]) -> Result<Self, prost::DecodeError> {
            <Self as Message>::decode(doc)
        }

        pub(crate) fn encode(&self) -> Vec<u8> {
            self.encode_to_vec()
        }
    }
}

#[cfg(test)]
mod tests;
