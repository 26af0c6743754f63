//! The discovery documents mvproxy answers itself: the merged `/apis` (aggregated or legacy)
//! and the merged legacy documents of one group or group-version
//! (`crate::discovery::group_docs`), each counted as a cache hit or a build.

use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Response, StatusCode};
use mvproxy_telemetry::metrics::{OpenApiMergeLabels, ResultLabels, values};
use mvproxy_telemetry::trace::RequestSpan;

use super::App;
use crate::discovery::Snapshot;
use crate::discovery::group_docs::{Doc, GroupDocs};
use crate::discovery::types::CONTENT_TYPE_V2;
use crate::plumbing::{Body, full};
use crate::route::{MergedDoc, MergedFormat};
use crate::spans;

const JSON: &str = "application/json";

/// Answers a discovery request with the merged document, or `None` to let the local server
/// answer: the merge changed nothing of that document, so the local server's own is right.
pub(super) fn answer(
    app: &App,
    snap: &Snapshot,
    span: &RequestSpan,
    doc: &MergedDoc,
    headers: &HeaderMap,
) -> Option<Response<Body>> {
    match doc {
        MergedDoc::Apis(format) => merged_apis(app, snap, span, *format, headers),
        MergedDoc::Group(group) => {
            merged_group_doc(app, snap, span, values::DISCOVERY_API_GROUP, headers, |d| {
                d.group(group).cloned()
            })
        }
        MergedDoc::GroupVersion { group, version } => merged_group_doc(
            app,
            snap,
            span,
            values::DISCOVERY_API_RESOURCE_LIST,
            headers,
            |d| d.version(group, version).cloned(),
        ),
    }
}

/// `GET /apis`: the aggregated document with its `ETag`, or the legacy `APIGroupList`.
fn merged_apis(
    app: &App,
    snap: &Snapshot,
    span: &RequestSpan,
    format: MergedFormat,
    headers: &HeaderMap,
) -> Option<Response<Body>> {
    let started = Instant::now();
    let (merged, hit) = snap.merged()?;
    spans::merge_event(span, hit, started.elapsed().as_micros());
    app.metrics
        .merges
        .get_or_create(&ResultLabels {
            result: values::result(hit),
        })
        .inc();
    if !hit {
        app.metrics
            .merge_duration
            .observe(merged.took.as_secs_f64());
    }
    match format {
        MergedFormat::Aggregated => Some(with_etag(
            merged.aggregated.clone(),
            &merged.etag,
            CONTENT_TYPE_V2,
            headers,
        )),
        MergedFormat::Legacy => {
            let mut resp = Response::new(full(merged.legacy.clone()?));
            let h = resp.headers_mut();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(JSON));
            h.insert(header::VARY, HeaderValue::from_static("Accept"));
            Some(resp)
        }
    }
}

/// `/apis/{group}`, `/apis/{group}/{version}` or `/api/{version}`: the snapshot's merged
/// document when it differs from the local server's (`pick` finds it), with its `ETag`.
fn merged_group_doc(
    app: &App,
    snap: &Snapshot,
    span: &RequestSpan,
    document: &'static str,
    headers: &HeaderMap,
    pick: impl FnOnce(&GroupDocs) -> Option<Doc>,
) -> Option<Response<Body>> {
    let started = Instant::now();
    let (docs, hit) = snap.group_docs()?;
    let doc = pick(&docs)?;
    spans::merge_event(span, hit, started.elapsed().as_micros());
    app.metrics
        .document_merges
        .get_or_create(&OpenApiMergeLabels {
            document,
            result: values::result(hit),
        })
        .inc();
    Some(with_etag(doc.body, &doc.etag, JSON, headers))
}

/// `body` with its `ETag`, or an empty `304` when `If-None-Match` names it (as kube-apiserver
/// answers aggregated discovery).
fn with_etag(
    body: Bytes,
    etag: &str,
    content_type: &'static str,
    headers: &HeaderMap,
) -> Response<Body> {
    let mut resp = if headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes())
    {
        let mut r = Response::new(full(Bytes::new()));
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        let mut r = Response::new(full(body));
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        r
    };
    let h = resp.headers_mut();
    if let Ok(etag) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, etag);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("public"));
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    resp
}
