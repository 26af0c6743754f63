//! Response bodies and the response shapes kube-apiserver uses.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderValue, Response, StatusCode};
use hyper::body::{Frame, SizeHint};
use serde::Serialize;
use tokio::sync::mpsc;

/// The exact body kube-apiserver sends for a resource it does not serve in a served
/// group-version; clients (and mvproxy) tell it apart from a missing object by this shape.
pub(super) const NOT_SERVED: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}"#;

const JSON: &str = "application/json";

/// A whole body, or a stream of chunks (a watch) that ends when the sender is dropped.
#[derive(Debug)]
pub(super) enum Body {
    Full(Option<Bytes>),
    Stream(mpsc::Receiver<Bytes>),
}

/// `metav1.Status` with its fields in kube's order.
#[derive(Debug, Serialize)]
pub(super) struct Status {
    kind: &'static str,
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    metadata: Empty,
    status: &'static str,
    message: String,
    reason: &'static str,
    details: Details,
    code: u16,
}

/// `metav1.StatusDetails`; absent fields are left out as kube's `omitempty` does.
#[derive(Debug, Default, Serialize)]
pub(super) struct Details {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) group: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) kind: Option<String>,
}

#[derive(Debug, Serialize)]
struct Empty {}

// === impl Body ===

impl Body {
    pub(super) fn empty() -> Self {
        Self::Full(None)
    }
}

impl From<Bytes> for Body {
    fn from(bytes: Bytes) -> Self {
        Self::Full(Some(bytes))
    }
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Self::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Self::Stream(chunks) => chunks.poll_recv(cx).map(|c| c.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Self::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Full(bytes) => SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64)),
            Self::Stream(_) => SizeHint::default(),
        }
    }
}

// === impl Status ===

impl Status {
    /// A `Failure` status.
    pub(super) fn failure(code: StatusCode, reason: &'static str, message: String) -> Self {
        Self {
            kind: "Status",
            api_version: "v1",
            metadata: Empty {},
            status: "Failure",
            message,
            reason,
            details: Details::default(),
            code: code.as_u16(),
        }
    }

    pub(super) fn with_details(mut self, details: Details) -> Self {
        self.details = details;
        self
    }

    pub(super) fn into_response(self) -> Response<Body> {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        json(code, &self)
    }
}

/// A response with `body` as `content_type`.
pub(super) fn bytes(code: StatusCode, content_type: &str, body: Bytes) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = code;
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(content_type) {
        headers.insert(CONTENT_TYPE, value);
    }
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    response
}

/// `value` as `application/json`.
pub(super) fn json<T: Serialize>(code: StatusCode, value: &T) -> Response<Body> {
    match serde_json::to_vec(value) {
        Ok(body) => bytes(code, JSON, body.into()),
        Err(error) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("encoding: {error}"),
        ),
    }
}

/// A `text/plain` response.
pub(super) fn text(code: StatusCode, body: &str) -> Response<Body> {
    bytes(
        code,
        "text/plain; charset=utf-8",
        Bytes::copy_from_slice(body.as_bytes()),
    )
}

/// What Go's `http.NotFound` writes, for paths outside every served group-version.
pub(super) fn page_not_found() -> Response<Body> {
    text(StatusCode::NOT_FOUND, "404 page not found\n")
}

/// The `Status` for a resource this server does not serve.
pub(super) fn not_served() -> Response<Body> {
    bytes(
        StatusCode::NOT_FOUND,
        JSON,
        Bytes::from_static(NOT_SERVED.as_bytes()),
    )
}

/// 500, kube-apiserver's answer to a read of an object stored at a version its scheme lacks
/// (`k8s.io/apiserver/pkg/storage/errors.go` `NewCorruptObjError`, the message of the scheme's
/// `notRegisteredErr`).
pub(super) fn undecodable(
    u: &super::Undecodable,
    namespace: Option<&str>,
    name: Option<&str>,
) -> Response<Body> {
    let group = u.group();
    let qualified = if group.is_empty() {
        u.resource.clone()
    } else {
        format!("{}.{group}", u.resource)
    };
    let key = format!(
        "/registry/{}/{}/{}",
        u.resource,
        namespace.unwrap_or("default"),
        name.unwrap_or("stored-earlier")
    );
    let message = format!(
        "failed to read one or more {qualified} from the storage: StorageError: corrupt object, \
         Code: 7, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: object not decodable: \
         no kind \"{}\" is registered for version \"{}\" in scheme \"pkg/runtime/scheme.go:111\"",
        u.kind, u.group_version
    );
    Status::failure(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", message).into_response()
}

/// 405, for a verb the resource's discovery entry does not list.
pub(super) fn method_not_allowed() -> Response<Body> {
    Status::failure(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource".to_owned(),
    )
    .into_response()
}

/// 400 with `message`.
pub(super) fn bad_request(message: String) -> Response<Body> {
    Status::failure(StatusCode::BAD_REQUEST, "BadRequest", message).into_response()
}
