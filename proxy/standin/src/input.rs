//! Reading requests: bodies (JSON, or kubectl's protobuf) and query parameters.

use std::borrow::Cow;

use http::header::CONTENT_TYPE;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;
use serde_json::Value;

use super::protobuf;
use super::respond::{self, Body, Status};
use super::store::Selector;

/// kube-apiserver's request body limit (3 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;
/// kubectl's typed clients send built-in objects in this form.
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// The body as JSON (or decoded from kubectl's protobuf), or the `Status` kube would send.
pub(super) async fn read_json(req: Request<Incoming>) -> Result<Value, Response<Body>> {
    let media_type = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default();
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) if error.downcast_ref::<LengthLimitError>().is_some() => {
            return Err(Status::failure(
                StatusCode::PAYLOAD_TOO_LARGE,
                "RequestEntityTooLarge",
                "the request body is too large".to_owned(),
            )
            .into_response());
        }
        Err(error) => return Err(respond::bad_request(format!("reading the body: {error}"))),
    };
    let unknown_format = |detail: String| {
        respond::bad_request(format!(
            "the body of the request was in an unknown format: {detail}"
        ))
    };
    match media_type.as_str() {
        "" | "application/json" => {
            serde_json::from_slice(&body).map_err(|error| unknown_format(error.to_string()))
        }
        PROTOBUF => protobuf::decode(&body)
            .ok_or_else(|| unknown_format("malformed protobuf".to_owned())),
        other => Err(Status::failure(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, {PROTOBUF} (got {other})"
            ),
        )
        .into_response()),
    }
}

pub(super) fn is_watch(query: &str) -> bool {
    query_param(query, "watch").is_some_and(|w| w == "true" || w == "1")
}

/// Narrows `selector` by `fieldSelector=metadata.name=…` and `metadata.namespace=…`, the
/// forms `kubectl get NAME -w` and controllers use; other fields, and a namespace field
/// inside a namespace path, are ignored.
pub(super) fn apply_field_selector(selector: &mut Selector, query: &str) {
    let Some(fields) = query_param(query, "fieldSelector") else {
        return;
    };
    for term in fields.split(',') {
        let Some((field, value)) = term.split_once("==").or_else(|| term.split_once('=')) else {
            continue;
        };
        match field.trim() {
            "metadata.name" => selector.name = Some(value.trim().to_owned()),
            "metadata.namespace" if selector.namespace.is_none() => {
                selector.namespace = Some(value.trim().to_owned())
            }
            _ => {}
        }
    }
}

/// The first value of `key` in a query string, percent-decoded.
pub(super) fn query_param<'a>(query: &'a str, key: &str) -> Option<Cow<'a, str>> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| percent_decode(v))
}

fn percent_decode(value: &str) -> Cow<'_, str> {
    if !value.contains(['%', '+']) {
        return Cow::Borrowed(value);
    }
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
                    .and_then(|h| std::str::from_utf8(h).ok());
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}
