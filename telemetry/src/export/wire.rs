//! What goes on the wire and how the answer is read, without the connection: the export
//! request over HTTP/protobuf or as a gRPC unary call (its 5-byte message prefix, its
//! headers), gzip, and the collector's answer: the status, `Retry-After`, `grpc-status` in
//! headers or trailers, the `ExportTraceServiceResponse`'s partial success, and a
//! `google.rpc.RetryInfo` inside `grpc-status-details-bin`, decoded by hand with the few
//! message types it needs (no generated googleapis crate for two fields).

use std::io::Write as _;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use bytes::{Buf as _, Bytes};
use http::header::{
    CONTENT_ENCODING, CONTENT_TYPE, HOST, HeaderName, HeaderValue, RETRY_AFTER, TE, USER_AGENT,
};
use http::{HeaderMap, Request, Response, Uri};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message as _;

use super::Target;
use super::retry::ExportError;

/// What the collector said of a batch it took.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Accepted {
    /// `partial_success.rejected_spans`.
    pub(super) rejected: u64,
    /// `partial_success.error_message`.
    pub(super) message: String,
}

/// gRPC's path of `TraceService.Export` (`opentelemetry/proto/collector/trace/v1/
/// trace_service.proto`).
const GRPC_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// `message` gzip-compressed.
pub(super) fn gzip(message: &[u8]) -> Bytes {
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(message.len() / 4),
        flate2::Compression::fast(),
    );
    // Writing into a Vec cannot fail.
    let _ = enc.write_all(message);
    Bytes::from(enc.finish().unwrap_or_default())
}

const PROTOBUF: HeaderValue = HeaderValue::from_static("application/x-protobuf");
const GRPC: HeaderValue = HeaderValue::from_static("application/grpc");
const GZIP: HeaderValue = HeaderValue::from_static("gzip");
const AGENT: &str = concat!("mvproxy/", env!("CARGO_PKG_VERSION"));

pub(super) fn http_request(target: &Target, message: Bytes) -> Request<Full<Bytes>> {
    let mut req = Request::new(Full::new(message));
    *req.method_mut() = http::Method::POST;
    *req.uri_mut() = target
        .endpoint
        .path_and_query()
        .map_or_else(|| Uri::from_static("/"), |p| Uri::from(p.clone()));
    let h = req.headers_mut();
    h.extend(target.headers.clone());
    if let Some(a) = target.endpoint.authority()
        && let Ok(v) = HeaderValue::from_str(a.as_str())
    {
        h.insert(HOST, v);
    }
    h.insert(CONTENT_TYPE, PROTOBUF);
    if target.gzip {
        h.insert(CONTENT_ENCODING, GZIP);
    }
    h.insert(USER_AGENT, HeaderValue::from_static(AGENT));
    req
}

/// A gRPC message behind its 5-byte prefix: the compressed flag, then its length
/// (<https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md>, "Length-Prefixed-Message").
pub(super) fn grpc_frame(message: &[u8], compressed: bool) -> Bytes {
    let mut framed = Vec::with_capacity(5 + message.len());
    framed.push(u8::from(compressed));
    framed.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    framed.extend_from_slice(message);
    Bytes::from(framed)
}

const GRPC_ENCODING: HeaderName = HeaderName::from_static("grpc-encoding");

/// A gRPC unary call of `TraceService.Export` carrying `framed` (from [`grpc_frame`]).
pub(super) fn grpc_request(target: &Target, framed: Bytes) -> Request<Full<Bytes>> {
    let mut req = Request::new(Full::new(framed));
    *req.method_mut() = http::Method::POST;
    let base = target.endpoint.path().trim_end_matches('/');
    let mut parts = target.endpoint.clone().into_parts();
    parts.path_and_query = format!("{base}{GRPC_PATH}").parse().ok();
    if let Ok(uri) = Uri::from_parts(parts) {
        *req.uri_mut() = uri;
    }
    *req.version_mut() = http::Version::HTTP_2;
    let h = req.headers_mut();
    h.extend(target.headers.clone());
    h.insert(CONTENT_TYPE, GRPC);
    if target.gzip {
        h.insert(GRPC_ENCODING, GZIP);
    }
    h.insert(TE, HeaderValue::from_static("trailers"));
    h.insert(USER_AGENT, HeaderValue::from_static(AGENT));
    req
}

const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
const GRPC_STATUS_DETAILS: HeaderName = HeaderName::from_static("grpc-status-details-bin");

/// `Retry-After` as seconds or an HTTP date (RFC 9110, section 10.2.3).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(SystemTime::now()).unwrap_or_default())
}

/// Whether the collector took the spans, and what it said of them: a 2xx over HTTP;
/// `grpc-status: 0` over gRPC, in the headers of a trailers-only answer or in the trailers.
/// The body of an accepted request is an `ExportTraceServiceResponse`, whose
/// `partial_success` says how many spans were rejected.
pub(super) async fn check(
    target: &Target,
    resp: Response<Incoming>,
) -> Result<Accepted, ExportError> {
    let status = resp.status();
    if !status.is_success() {
        let retry_after = retry_after(resp.headers());
        // Read the answer to the end, so the connection can carry the next one.
        let _ = resp.into_body().collect().await;
        return Err(ExportError::Status {
            status,
            retry_after,
        });
    }
    let (parts, body) = resp.into_parts();
    let collected = body.collect().await?;
    let trailers = if parts.headers.contains_key(GRPC_STATUS) {
        parts.headers.clone()
    } else {
        collected.trailers().cloned().unwrap_or_default()
    };
    let body = collected.to_bytes();
    if !target.grpc {
        return Ok(response(
            &body,
            parts.headers.get(CONTENT_ENCODING) == Some(&GZIP),
        ));
    }
    let field = |name| {
        trailers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
            .unwrap_or_default()
    };
    match field(GRPC_STATUS) {
        "0" => {
            // Length-Prefixed-Message: the compressed flag, the length, the message.
            let mut b = body;
            if b.len() < 5 {
                return Ok(Accepted::default());
            }
            let compressed = b.get_u8() == 1;
            let len = b.get_u32() as usize;
            Ok(response(&b[..len.min(b.len())], compressed))
        }
        code => Err(ExportError::Grpc {
            // A missing or unreadable status is UNKNOWN (2), not retried.
            code: code.parse().unwrap_or(2),
            message: field(GRPC_MESSAGE).to_owned(),
            retry_after: trailers
                .get(GRPC_STATUS_DETAILS)
                .and_then(|v| grpc_retry_delay(v.as_bytes())),
        }),
    }
}

/// The partial success of an `ExportTraceServiceResponse`; an empty or unreadable body is a
/// full success (the specification's answer to a collector that sends none).
fn response(body: &[u8], gzipped: bool) -> Accepted {
    let decoded;
    let body = if gzipped {
        let mut out = Vec::new();
        if std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(body), &mut out).is_err() {
            return Accepted::default();
        }
        decoded = out;
        &decoded[..]
    } else {
        body
    };
    ExportTraceServiceResponse::decode(body)
        .ok()
        .and_then(|r| r.partial_success)
        .map(|p| Accepted {
            rejected: u64::try_from(p.rejected_spans).unwrap_or(0),
            message: p.error_message,
        })
        .unwrap_or_default()
}

/// `google.rpc.Status` (<https://github.com/googleapis/googleapis>,
/// `google/rpc/status.proto`), as `grpc-status-details-bin` carries it.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<ProtoAny>,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoAny {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// `google.rpc.RetryInfo` (`google/rpc/error_details.proto`).
#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<ProtoDuration>,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

const RETRY_INFO: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// The `RetryInfo.retry_delay` in a `grpc-status-details-bin` value (base64, padded or not).
fn grpc_retry_delay(value: &[u8]) -> Option<Duration> {
    let raw = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(
            value
                .strip_suffix(b"==")
                .or(value.strip_suffix(b"="))
                .unwrap_or(value),
        )
        .ok()?;
    let status = RpcStatus::decode(raw.as_slice()).ok()?;
    let info = status.details.iter().find(|d| d.type_url == RETRY_INFO)?;
    let delay = RetryInfo::decode(info.value.as_slice()).ok()?.retry_delay?;
    Some(Duration::new(
        u64::try_from(delay.seconds).ok()?,
        u32::try_from(delay.nanos).ok()?,
    ))
}

#[cfg(test)]
mod tests;
