//! Ended spans as an OTLP `ExportTraceServiceRequest`, encoded straight from mvproxy's own
//! span records.
//!
//! The SDK's exporter converts each span into the generated protobuf structs first (a `String`
//! for every attribute key and value) and then encodes those; at every request sampled that
//! was about a third of the proxy's CPU. Here the wire format is written directly from the
//! records, keys and values borrowed. The messages and field numbers are those of
//! `opentelemetry/proto/trace/v1/trace.proto`, `common/v1/common.proto` and
//! `resource/v1/resource.proto` (<https://github.com/open-telemetry/opentelemetry-proto>); the
//! tests decode the output with the generated types of `opentelemetry-proto`.

use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanContext, SpanKind, TraceState};
use opentelemetry::{Array, KeyValue, Value};

/// A span that has ended, as the request thread hands it to the exporter.
#[derive(Debug)]
pub(crate) struct SpanRecord {
    pub(crate) context: SpanContext,
    /// The parent's span id, and whether the parent came from another process.
    pub(crate) parent: Option<([u8; 8], bool)>,
    pub(crate) name: std::borrow::Cow<'static, str>,
    pub(crate) kind: SpanKind,
    pub(crate) start: SystemTime,
    pub(crate) end: SystemTime,
    pub(crate) attributes: Vec<KeyValue>,
    pub(crate) events: Vec<Event>,
    pub(crate) error: bool,
}

/// A span event.
#[derive(Debug)]
pub(crate) struct Event {
    pub(crate) name: &'static str,
    pub(crate) time: SystemTime,
    pub(crate) attributes: Vec<KeyValue>,
}

/// `ExportTraceServiceRequest` bytes for `spans`, under `resource` (the encoded attributes of
/// a `Resource` message, from [`resource`]) and the instrumentation scope `mvproxy` at
/// mvproxy's version.
pub(crate) fn request(resource: &[u8], spans: &[SpanRecord], out: &mut Vec<u8>) {
    out.clear();
    // ExportTraceServiceRequest.resource_spans = 1
    nested(out, 1, |rs| {
        // ResourceSpans.resource = 1
        bytes(rs, 1, resource);
        // ResourceSpans.scope_spans = 2
        nested(rs, 2, |ss| {
            // ScopeSpans.scope = 1: InstrumentationScope.name = 1
            nested(ss, 1, |scope| {
                string(scope, 1, SCOPE);
                // InstrumentationScope.version = 2
                string(scope, 2, env!("CARGO_PKG_VERSION"));
            });
            for span in spans {
                // ScopeSpans.spans = 2
                nested(ss, 2, |s| self::span(s, span));
            }
        });
    });
}

/// The instrumentation scope of every span.
pub(crate) const SCOPE: &str = "mvproxy";

/// The body of a `Resource` message with these attributes.
pub(crate) fn resource<'a>(attributes: impl IntoIterator<Item = (&'a str, &'a Value)>) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in attributes {
        // Resource.attributes = 1
        nested(&mut out, 1, |kv| key_value(kv, k, v));
    }
    out
}

fn span(out: &mut Vec<u8>, s: &SpanRecord) {
    let sc = &s.context;
    bytes(out, 1, &sc.trace_id().to_bytes());
    bytes(out, 2, &sc.span_id().to_bytes());
    if sc.trace_state() != &TraceState::NONE {
        string(out, 3, &sc.trace_state().header());
    }
    if let Some((parent, _)) = &s.parent {
        bytes(out, 4, parent);
    }
    string(out, 5, &s.name);
    uint(out, 6, kind(&s.kind));
    fixed64(out, 7, unix_nanos(s.start));
    fixed64(out, 8, unix_nanos(s.end));
    for kv in &s.attributes {
        nested(out, 9, |o| key_value(o, kv.key.as_str(), &kv.value));
    }
    for e in &s.events {
        nested(out, 11, |o| {
            fixed64(o, 1, unix_nanos(e.time));
            string(o, 2, e.name);
            for kv in &e.attributes {
                nested(o, 3, |o| key_value(o, kv.key.as_str(), &kv.value));
            }
        });
    }
    if s.error {
        // Status.code = 3: STATUS_CODE_ERROR
        nested(out, 15, |o| uint(o, 3, 2));
    }
    fixed32(out, 16, flags(sc, s.parent.map(|(_, remote)| remote)));
}

/// `Span.flags`: the W3C trace flags in bits 0-7, and whether the parent is remote (bits 8
/// and 9, `SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK` and `SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK`).
fn flags(sc: &SpanContext, parent_remote: Option<bool>) -> u32 {
    let mut flags = u32::from(sc.trace_flags().to_u8()) | 0x100;
    if parent_remote == Some(true) {
        flags |= 0x200;
    }
    flags
}

fn kind(kind: &SpanKind) -> u64 {
    match kind {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    }
}

fn unix_nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn key_value(out: &mut Vec<u8>, key: &str, value: &Value) {
    string(out, 1, key);
    nested(out, 2, |o| any_value(o, value));
}

/// An `AnyValue`: one field of its `oneof` always written, even a zero or an empty string.
fn any_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::String(s) => string(out, 1, s.as_str()),
        Value::Bool(b) => uint(out, 2, u64::from(*b)),
        Value::I64(i) => int(out, 3, *i),
        Value::F64(f) => fixed64(out, 4, f.to_bits()),
        Value::Array(a) => nested(out, 5, |o| array(o, a)),
        other => string(out, 1, &other.to_string()),
    }
}

fn array(out: &mut Vec<u8>, a: &Array) {
    // ArrayValue.values = 1
    match a {
        Array::Bool(v) => v
            .iter()
            .for_each(|b| nested(out, 1, |o| uint(o, 2, u64::from(*b)))),
        Array::I64(v) => v.iter().for_each(|i| nested(out, 1, |o| int(o, 3, *i))),
        Array::F64(v) => v
            .iter()
            .for_each(|f| nested(out, 1, |o| fixed64(o, 4, f.to_bits()))),
        Array::String(v) => v
            .iter()
            .for_each(|s| nested(out, 1, |o| string(o, 1, s.as_str()))),
        other => nested(out, 1, |o| string(o, 1, &other.to_string())),
    }
}

// The protobuf wire format (https://protobuf.dev/programming-guides/encoding/).

const VARINT: u64 = 0;
const I64: u64 = 1;
const LEN: u64 = 2;
const I32: u64 = 5;

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn tag(out: &mut Vec<u8>, field: u64, wire: u64) {
    varint(out, field << 3 | wire);
}

fn uint(out: &mut Vec<u8>, field: u64, v: u64) {
    tag(out, field, VARINT);
    varint(out, v);
}

fn int(out: &mut Vec<u8>, field: u64, v: i64) {
    // int64: two's complement, ten bytes for a negative number.
    uint(out, field, v as u64);
}

fn fixed64(out: &mut Vec<u8>, field: u64, v: u64) {
    tag(out, field, I64);
    out.extend_from_slice(&v.to_le_bytes());
}

fn fixed32(out: &mut Vec<u8>, field: u64, v: u32) {
    tag(out, field, I32);
    out.extend_from_slice(&v.to_le_bytes());
}

fn bytes(out: &mut Vec<u8>, field: u64, b: &[u8]) {
    tag(out, field, LEN);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn string(out: &mut Vec<u8>, field: u64, s: &str) {
    bytes(out, field, s.as_bytes());
}

/// A length-delimited field whose body `body` writes: the body is written in place after a
/// one-byte length, which is all most bodies need (under 128 bytes: an attribute, an event);
/// a longer body is moved to make room for its length, once.
fn nested(out: &mut Vec<u8>, field: u64, body: impl FnOnce(&mut Vec<u8>)) {
    tag(out, field, LEN);
    let at = out.len();
    out.push(0);
    body(out);
    let end = out.len();
    let len = (end - at - 1) as u64;
    if len < 0x80 {
        out[at] = len as u8;
        return;
    }
    let (mut prefix, mut n, mut v) = ([0u8; 10], 0, len);
    while v >= 0x80 {
        prefix[n] = (v as u8) | 0x80;
        v >>= 7;
        n += 1;
    }
    prefix[n] = v as u8;
    n += 1;
    out.resize(end + n - 1, 0);
    out.copy_within(at + 1..end, at + n);
    out[at..at + n].copy_from_slice(&prefix[..n]);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use opentelemetry::trace::{SpanId, TraceFlags, TraceId};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use prost::Message as _;

    use super::*;

    fn record(parent: Option<([u8; 8], bool)>, error: bool) -> SpanRecord {
        let t0 = UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
        SpanRecord {
            context: SpanContext::new(
                TraceId::from_bytes([7; 16]),
                SpanId::from_bytes([9; 8]),
                TraceFlags::SAMPLED,
                false,
                TraceState::from_key_value([("vendor", "x")]).unwrap(),
            ),
            parent,
            name: "GET /api/{version}/{resource}".into(),
            kind: SpanKind::Server,
            start: t0,
            end: t0 + Duration::from_micros(250),
            attributes: vec![
                KeyValue::new("url.path", "/api/v1/pods"),
                KeyValue::new("server.port", 6443_i64),
                KeyValue::new("negative", -3_i64),
                KeyValue::new("zero", 0_i64),
                KeyValue::new("empty", ""),
                KeyValue::new("ok", true),
                KeyValue::new("ratio", 0.25),
                KeyValue::new(
                    "list",
                    Value::Array(opentelemetry::Array::String(vec!["a".into(), "b".into()])),
                ),
            ],
            events: vec![Event {
                name: "discovery.lookup",
                time: t0 + Duration::from_micros(10),
                attributes: vec![KeyValue::new("result", "hit")],
            }],
            error,
        }
    }

    fn decode(spans: &[SpanRecord]) -> ExportTraceServiceRequest {
        let service = Value::from("proxy-a");
        let res = resource([("service.name", &service)]);
        let mut out = Vec::new();
        request(&res, spans, &mut out);
        ExportTraceServiceRequest::decode(out.as_slice()).unwrap()
    }

    #[test]
    fn the_official_types_decode_every_field() {
        let req = decode(&[record(Some(([5; 8], true)), true), record(None, false)]);
        let rs = &req.resource_spans[0];
        let res = rs.resource.as_ref().unwrap();
        assert_eq!(res.attributes[0].key, "service.name");
        let ss = &rs.scope_spans[0];
        assert_eq!(ss.scope.as_ref().unwrap().name, "mvproxy");
        assert_eq!(ss.spans.len(), 2);
        let s = &ss.spans[0];
        assert_eq!(s.trace_id, vec![7; 16]);
        assert_eq!(s.span_id, vec![9; 8]);
        assert_eq!(s.parent_span_id, vec![5; 8]);
        assert_eq!(s.trace_state, "vendor=x");
        assert_eq!(s.name, "GET /api/{version}/{resource}");
        assert_eq!(s.kind, 2, "SPAN_KIND_SERVER");
        assert_eq!(s.start_time_unix_nano, 1_700_000_000_123_456_789);
        assert_eq!(s.end_time_unix_nano - s.start_time_unix_nano, 250_000);
        assert_eq!(s.flags, 0x301, "sampled, parent known to be remote");
        assert_eq!(s.status.as_ref().unwrap().code, 2, "STATUS_CODE_ERROR");
        let attrs: Vec<(&str, Option<&Any>)> = s
            .attributes
            .iter()
            .map(|kv| {
                (
                    kv.key.as_str(),
                    kv.value.as_ref().and_then(|v| v.value.as_ref()),
                )
            })
            .collect();
        assert_eq!(
            attrs[0],
            ("url.path", Some(&Any::StringValue("/api/v1/pods".into())))
        );
        assert_eq!(attrs[1], ("server.port", Some(&Any::IntValue(6443))));
        assert_eq!(attrs[2], ("negative", Some(&Any::IntValue(-3))));
        assert_eq!(
            attrs[3],
            ("zero", Some(&Any::IntValue(0))),
            "a zero is still set"
        );
        assert_eq!(attrs[4], ("empty", Some(&Any::StringValue(String::new()))));
        assert_eq!(attrs[5], ("ok", Some(&Any::BoolValue(true))));
        assert_eq!(attrs[6], ("ratio", Some(&Any::DoubleValue(0.25))));
        let Some(Any::ArrayValue(list)) = attrs[7].1 else {
            panic!("{:?}", attrs[7]);
        };
        assert_eq!(list.values.len(), 2);
        let e = &s.events[0];
        assert_eq!(e.name, "discovery.lookup");
        assert_eq!(e.time_unix_nano - s.start_time_unix_nano, 10_000);
        assert_eq!(e.attributes[0].key, "result");
        let root = &ss.spans[1];
        assert!(root.parent_span_id.is_empty(), "a root span has no parent");
        assert_eq!(root.status, None, "unset");
        assert_eq!(root.flags, 0x101, "sampled, no remote parent");
    }

    #[test]
    fn a_large_batch_keeps_its_lengths() {
        // Lengths past one varint byte at every level of nesting.
        let spans: Vec<SpanRecord> = (0..300).map(|_| record(None, false)).collect();
        let req = decode(&spans);
        assert_eq!(req.resource_spans[0].scope_spans[0].spans.len(), 300);
    }
}
