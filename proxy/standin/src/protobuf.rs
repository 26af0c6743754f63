//! Just enough of Kubernetes' protobuf encoding to accept what `kubectl create` sends.
//!
//! kubectl's typed clients (`kubectl create namespace`, `create configmap`, ...) send built-in
//! objects as `application/vnd.kubernetes.protobuf` and do not retry with JSON on a 415. The
//! stand-in has no schemas, so it reads the envelope (`k8s\0` + `runtime.Unknown`), the
//! `TypeMeta` and the identifying `ObjectMeta` fields (every built-in kind has its metadata
//! at field 1); everything else is dropped except a ConfigMap's `data`.

use serde_json::{Map, Value};

/// The four bytes before every protobuf-encoded Kubernetes object.
const MAGIC: &[u8] = b"k8s\0";

/// One protobuf field value; fixed-width values are skipped, never read.
enum Wire<'a> {
    Varint,
    Bytes(&'a [u8]),
    Fixed,
}

/// The object as JSON, or `None` if the body is not a well-formed Kubernetes protobuf.
pub(super) fn decode(body: &[u8]) -> Option<Value> {
    let unknown = body.strip_prefix(MAGIC)?;
    let mut object = Map::new();
    let mut raw: &[u8] = &[];
    for (field, wire) in fields(unknown)? {
        match (field, wire) {
            (1, Wire::Bytes(type_meta)) => {
                for (field, wire) in fields(type_meta)? {
                    let key = match field {
                        1 => "apiVersion",
                        2 => "kind",
                        _ => continue,
                    };
                    object.insert(key.to_owned(), string(&wire)?.into());
                }
            }
            (2, Wire::Bytes(bytes)) => raw = bytes,
            _ => {}
        }
    }
    let is_config_map = object.get("kind").and_then(Value::as_str) == Some("ConfigMap");
    for (field, wire) in fields(raw)? {
        match field {
            1 => {
                object.insert("metadata".to_owned(), object_meta(bytes(&wire)?)?);
            }
            2 if is_config_map => {
                let data = object.entry("data").or_insert_with(|| Map::new().into());
                let (key, value) = map_entry(bytes(&wire)?)?;
                if let Some(data) = data.as_object_mut() {
                    data.insert(key, value.into());
                }
            }
            _ => {}
        }
    }
    Some(object.into())
}

/// `ObjectMeta`: name, generateName, namespace, labels, annotations and finalizers.
fn object_meta(buf: &[u8]) -> Option<Value> {
    let mut meta = Map::new();
    for (field, wire) in fields(buf)? {
        match field {
            1 => insert_string(&mut meta, "name", &wire)?,
            2 => insert_string(&mut meta, "generateName", &wire)?,
            3 => insert_string(&mut meta, "namespace", &wire)?,
            11 | 12 => {
                let key = if field == 11 { "labels" } else { "annotations" };
                let (k, v) = map_entry(bytes(&wire)?)?;
                if let Some(map) = meta
                    .entry(key)
                    .or_insert_with(|| Map::new().into())
                    .as_object_mut()
                {
                    map.insert(k, v.into());
                }
            }
            14 => {
                let finalizer = string(&wire)?;
                if let Some(list) = meta
                    .entry("finalizers")
                    .or_insert_with(|| Vec::<Value>::new().into())
                    .as_array_mut()
                {
                    list.push(finalizer.into());
                }
            }
            _ => {}
        }
    }
    Some(meta.into())
}

/// Sets `key` unless the value is empty, which Go leaves out of JSON.
fn insert_string(map: &mut Map<String, Value>, key: &str, wire: &Wire<'_>) -> Option<()> {
    let value = string(wire)?;
    if !value.is_empty() {
        map.insert(key.to_owned(), value.into());
    }
    Some(())
}

/// A `map<string, string>` entry: key at field 1, value at field 2.
fn map_entry(buf: &[u8]) -> Option<(String, String)> {
    let (mut key, mut value) = (String::new(), String::new());
    for (field, wire) in fields(buf)? {
        match field {
            1 => key = string(&wire)?,
            2 => value = string(&wire)?,
            _ => {}
        }
    }
    Some((key, value))
}

fn bytes<'a>(wire: &Wire<'a>) -> Option<&'a [u8]> {
    match wire {
        Wire::Bytes(bytes) => Some(bytes),
        Wire::Varint | Wire::Fixed => None,
    }
}

fn string(wire: &Wire<'_>) -> Option<String> {
    std::str::from_utf8(bytes(wire)?).ok().map(str::to_owned)
}

/// Every field of a message, in order; `None` on malformed input.
fn fields(mut buf: &[u8]) -> Option<Vec<(u64, Wire<'_>)>> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let key = varint(&mut buf)?;
        let wire = match key & 7 {
            0 => {
                varint(&mut buf)?;
                Wire::Varint
            }
            1 => {
                buf = buf.get(8..)?;
                Wire::Fixed
            }
            2 => {
                let len = usize::try_from(varint(&mut buf)?).ok()?;
                let (value, rest) = (buf.get(..len)?, buf.get(len..)?);
                buf = rest;
                Wire::Bytes(value)
            }
            5 => {
                buf = buf.get(4..)?;
                Wire::Fixed
            }
            _ => return None,
        };
        out.push((key >> 3, wire));
    }
    Some(out)
}

/// Reads a base-128 varint off the front of `buf`.
fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = buf.split_first()?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(number: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![(number << 3) | 2, u8::try_from(bytes.len()).unwrap_or(0)];
        out.extend_from_slice(bytes);
        out
    }

    #[test]
    fn decodes_a_config_map_as_kubectl_sends_it() {
        let type_meta = [field(1, b"v1"), field(2, b"ConfigMap")].concat();
        let label = [field(1, b"app"), field(2, b"web")].concat();
        let meta = [
            field(1, b"settings"),
            field(3, b"default"),
            field(11, &label),
        ]
        .concat();
        let entry = [field(1, b"mode"), field(2, b"fast")].concat();
        let raw = [field(1, &meta), field(2, &entry)].concat();
        let unknown = [field(1, &type_meta), field(2, &raw), field(4, b"")].concat();
        let body = [MAGIC, &unknown].concat();
        assert_eq!(
            decode(&body),
            Some(serde_json::json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "settings", "namespace": "default", "labels": {"app": "web"}},
                "data": {"mode": "fast"},
            }))
        );
    }

    #[test]
    fn rejects_malformed_input_without_panicking() {
        for body in [
            &b""[..],
            b"k8s",
            b"k8s\0\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
            b"k8s\0\x12\x05ab",
            b"k8s\0\x0b",
            b"{\"kind\":\"Namespace\"}",
        ] {
            assert_eq!(decode(body), None, "{body:?}");
        }
    }
}
