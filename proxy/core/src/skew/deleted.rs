//! What a `DELETE` response says about the objects it deleted: their names, whether their
//! deletion is still pending (`metadata.deletionTimestamp`) and the finalizers it waits on.
//!
//! kube-apiserver answers a `DELETE` of an object that still has finalizers with the object,
//! `deletionTimestamp` set and the finalizers listed, and a `deletecollection` with a list of
//! such objects. kubectl asks for JSON; client-go's typed clients, those of
//! kube-controller-manager among them, for Kubernetes protobuf: the magic `k8s\0`, then a
//! `runtime.Unknown` {1: `TypeMeta` {1: apiVersion, 2: kind}, 2: raw, 3: contentEncoding,
//! 4: contentType} whose raw object has its `ObjectMeta` at field 1 (a list: `ListMeta` at 1,
//! items at 2), and `ObjectMeta` {1: name, 3: namespace, 9: deletionTimestamp,
//! 14: finalizers} (k8s.io/apimachinery v0.36.3 `pkg/runtime/generated.proto` and
//! `pkg/apis/meta/v1/generated.proto`). Both are read with the fields needed declared and
//! everything else skipped (`serde_json`, `prost`); the body is any bytes a server sent, so
//! every failure is a [`DecodeError`], never a panic.

use serde::Deserialize;

/// The protobuf envelope's magic.
const MAGIC: &[u8] = b"k8s\0";

/// `Content-Type` of Kubernetes protobuf.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// How a response body is encoded, from its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `application/json`.
    Json,
    /// `application/vnd.kubernetes.protobuf`.
    Protobuf,
}

impl Format {
    /// The format of a `Content-Type` value; `None` for any other (YAML, CBOR, a watch).
    pub fn of(content_type: &[u8]) -> Option<Format> {
        let media = content_type
            .split(|b| *b == b';')
            .next()
            .unwrap_or_default();
        let media = media.trim_ascii();
        if media.eq_ignore_ascii_case(b"application/json") {
            Some(Format::Json)
        } else if media.eq_ignore_ascii_case(PROTOBUF.as_bytes()) {
            Some(Format::Protobuf)
        } else {
            None
        }
    }
}

/// One object of a `DELETE` response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Deleted {
    /// Its namespace (`""` for a cluster-scoped object).
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Whether its deletion is pending (`deletionTimestamp` set): it waits on its finalizers.
    pub pending: bool,
    /// Its finalizers.
    pub finalizers: Vec<String>,
}

/// Why a response body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Not JSON of an object or list.
    #[error("not a JSON object: {0}")]
    Json(#[from] serde_json::Error),
    /// Not a well-formed protobuf message.
    #[error("not Kubernetes protobuf: {0}")]
    Protobuf(#[from] prost::DecodeError),
    /// Without the `k8s\0` magic.
    #[error("no Kubernetes protobuf magic")]
    NoMagic,
    /// The envelope says its raw object is encoded (Kubernetes never does).
    #[error("content encoding {0:?} not read")]
    Encoded(String),
}

/// The objects a `DELETE` response body shows: one, or the items of a list.
pub fn decode(format: Format, body: &[u8]) -> Result<Vec<Deleted>, DecodeError> {
    match format {
        Format::Json => json(body),
        Format::Protobuf => protobuf(body),
    }
}

#[derive(Deserialize)]
struct JsonObject {
    #[serde(default)]
    metadata: Option<JsonMeta>,
    #[serde(default)]
    items: Option<Vec<JsonObject>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct JsonMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    deletion_timestamp: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    finalizers: Option<Vec<String>>,
}

fn json(body: &[u8]) -> Result<Vec<Deleted>, DecodeError> {
    let object: JsonObject = serde_json::from_slice(body)?;
    Ok(match object.items {
        Some(items) => items.into_iter().filter_map(json_object).collect(),
        None => json_object(object).into_iter().collect(),
    })
}

fn json_object(object: JsonObject) -> Option<Deleted> {
    let meta = object.metadata?;
    Some(Deleted {
        name: meta.name?,
        namespace: meta.namespace.unwrap_or_default(),
        pending: meta.deletion_timestamp.is_some(),
        finalizers: meta.finalizers.unwrap_or_default(),
    })
}

/// The protobuf messages, only the fields read.
mod proto {
    /// `runtime.Unknown`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Unknown {
        #[prost(message, optional, tag = "1")]
        pub(super) type_meta: Option<TypeMeta>,
        #[prost(bytes = "vec", tag = "2")]
        pub(super) raw: Vec<u8>,
        #[prost(string, tag = "3")]
        pub(super) content_encoding: String,
    }

    /// `runtime.TypeMeta`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct TypeMeta {
        #[prost(string, tag = "1")]
        pub(super) api_version: String,
        #[prost(string, tag = "2")]
        pub(super) kind: String,
    }

    /// Any object: its `ObjectMeta` at field 1.
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Object {
        #[prost(message, optional, tag = "1")]
        pub(super) metadata: Option<ObjectMeta>,
    }

    /// Any list: its items at field 2, each an object.
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct List {
        #[prost(message, repeated, tag = "2")]
        pub(super) items: Vec<Object>,
    }

    /// `metav1.ObjectMeta`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct ObjectMeta {
        #[prost(string, tag = "1")]
        pub(super) name: String,
        #[prost(string, tag = "3")]
        pub(super) namespace: String,
        #[prost(message, optional, tag = "9")]
        pub(super) deletion_timestamp: Option<Time>,
        #[prost(string, repeated, tag = "14")]
        pub(super) finalizers: Vec<String>,
    }

    /// `metav1.Time`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Time {
        #[prost(int64, tag = "1")]
        pub(super) seconds: i64,
        #[prost(int32, tag = "2")]
        pub(super) nanos: i32,
    }
}

/// The kind and the raw object of a Kubernetes protobuf body (`k8s\0`, then `runtime.Unknown`).
pub fn unwrap_protobuf(body: &[u8]) -> Result<(String, Vec<u8>), DecodeError> {
    use prost::Message;
    let envelope = body.strip_prefix(MAGIC).ok_or(DecodeError::NoMagic)?;
    let unknown = proto::Unknown::decode(envelope)?;
    if !unknown.content_encoding.is_empty() {
        return Err(DecodeError::Encoded(unknown.content_encoding));
    }
    let kind = unknown.type_meta.map(|t| t.kind).unwrap_or_default();
    Ok((kind, unknown.raw))
}

fn protobuf(body: &[u8]) -> Result<Vec<Deleted>, DecodeError> {
    use prost::Message;
    let (kind, raw) = unwrap_protobuf(body)?;
    let unknown = proto::Unknown {
        type_meta: None,
        raw,
        content_encoding: String::new(),
    };
    let objects = if kind.ends_with("List") {
        proto::List::decode(&unknown.raw[..])?.items
    } else {
        vec![proto::Object::decode(&unknown.raw[..])?]
    };
    Ok(objects
        .into_iter()
        .filter_map(|o| o.metadata)
        .filter(|m| !m.name.is_empty())
        .map(|m| Deleted {
            name: m.name,
            namespace: m.namespace,
            pending: m.deletion_timestamp.is_some(),
            finalizers: m.finalizers,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    const FINALIZER: &str = "scheduling.k8s.io/podgroup-protection";

    fn waiting(name: &str) -> Deleted {
        Deleted {
            namespace: "team-a".into(),
            name: name.into(),
            pending: true,
            finalizers: vec![FINALIZER.into()],
        }
    }

    fn meta(name: &str, pending: bool) -> proto::ObjectMeta {
        proto::ObjectMeta {
            name: name.into(),
            namespace: "team-a".into(),
            deletion_timestamp: pending.then_some(proto::Time {
                seconds: 1_790_000_000,
                nanos: 0,
            }),
            finalizers: vec![FINALIZER.into()],
        }
    }

    fn envelope(kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        proto::Unknown {
            type_meta: Some(proto::TypeMeta {
                api_version: "scheduling.k8s.io/v1alpha2".into(),
                kind: kind.into(),
            }),
            raw,
            content_encoding: String::new(),
        }
        .encode(&mut out)
        .expect("a Vec grows");
        out
    }

    #[test]
    fn a_json_delete_response_shows_the_pending_object_and_its_finalizers() {
        let body = br#"{"kind":"PodGroup","apiVersion":"scheduling.k8s.io/v1alpha2",
            "metadata":{"name":"train-1","namespace":"team-a","uid":"u",
            "deletionTimestamp":"2026-12-02T14:00:00Z","deletionGracePeriodSeconds":0,
            "finalizers":["scheduling.k8s.io/podgroup-protection"],
            "managedFields":[{"manager":"kubectl"}]},"spec":{"minCount":2}}"#;
        assert_eq!(
            decode(Format::Json, body).unwrap(),
            vec![waiting("train-1")]
        );
    }

    #[test]
    fn a_json_deletecollection_response_shows_every_item_and_a_status_shows_none() {
        let body = br#"{"kind":"PodGroupList","apiVersion":"scheduling.k8s.io/v1alpha2",
            "metadata":{"resourceVersion":"9"},"items":[
            {"metadata":{"name":"train-1","namespace":"team-a",
              "deletionTimestamp":"2026-12-02T14:00:00Z",
              "finalizers":["scheduling.k8s.io/podgroup-protection"]}},
            {"metadata":{"name":"gone","namespace":"team-a"}}]}"#;
        let gone = Deleted {
            namespace: "team-a".into(),
            name: "gone".into(),
            ..Deleted::default()
        };
        assert_eq!(
            decode(Format::Json, body).unwrap(),
            vec![waiting("train-1"), gone]
        );
        let status = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success"}"#;
        assert_eq!(decode(Format::Json, status).unwrap(), vec![]);
    }

    #[test]
    fn a_protobuf_delete_response_shows_the_pending_object_and_its_finalizers() {
        let raw = proto::Object {
            metadata: Some(meta("train-1", true)),
        }
        .encode_to_vec();
        let body = envelope("PodGroup", raw);
        assert_eq!(
            decode(Format::Protobuf, &body).unwrap(),
            vec![waiting("train-1")]
        );
    }

    #[test]
    fn a_protobuf_list_shows_its_items_not_its_list_meta() {
        let raw = proto::List {
            items: vec![
                proto::Object {
                    metadata: Some(meta("train-1", true)),
                },
                proto::Object {
                    metadata: Some(meta("train-2", false)),
                },
            ],
        }
        .encode_to_vec();
        // ListMeta at field 1 (resourceVersion "9" at its field 2), as a server writes it
        let mut with_list_meta = vec![0x0a, 0x03, 0x12, 0x01, b'9'];
        with_list_meta.extend(raw);
        let got = decode(Format::Protobuf, &envelope("PodGroupList", with_list_meta)).unwrap();
        let mut second = waiting("train-2");
        second.pending = false;
        assert_eq!(got, vec![waiting("train-1"), second]);
    }

    #[test]
    fn any_bytes_are_an_error_or_objects_never_a_panic() {
        assert!(matches!(
            decode(Format::Protobuf, b"{\"kind\":\"PodGroup\"}"),
            Err(DecodeError::NoMagic)
        ));
        assert!(matches!(
            decode(Format::Protobuf, b"k8s\0\x0a\xff\xff"),
            Err(DecodeError::Protobuf(_))
        ));
        assert!(matches!(
            decode(Format::Json, b"k8s\0"),
            Err(DecodeError::Json(_))
        ));
        let mut state = 0x2545_f491_u32;
        for len in 0..400 {
            let mut body = MAGIC.to_vec();
            body.extend((0..len).map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                state.to_le_bytes()[0]
            }));
            let _ = decode(Format::Protobuf, &body);
            let _ = decode(Format::Json, &body[4..]);
        }
    }

    #[test]
    fn content_types_are_read_as_servers_write_them() {
        assert_eq!(
            Format::of(b"application/json; charset=utf-8"),
            Some(Format::Json)
        );
        assert_eq!(
            Format::of(b"application/vnd.kubernetes.protobuf"),
            Some(Format::Protobuf)
        );
        assert_eq!(
            Format::of(b"application/vnd.kubernetes.protobuf;stream=watch"),
            Some(Format::Protobuf)
        );
        assert_eq!(Format::of(b"application/yaml"), None);
        assert_eq!(Format::of(b"application/cbor"), None);
    }
}
