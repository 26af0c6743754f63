//! Every failure mvproxy answers for itself, and the one place that turns it into a response.
//!
//! A client of a Kubernetes API server expects a `Status` object, never a proxy's error page:
//! kubectl prints its `message`, controllers retry on `503` and, crucially, treat `404` as
//! "the object is gone". So each variant says who failed and why in words an operator can act
//! on, and maps to exactly one status code, one `Status.reason` and one metric label here.
//!
//! One refusal cannot be a `Status`: a request head over `--max-request-header-bytes` is
//! refused by the HTTP layer (`431`, no body) before there is a request to answer (see
//! [`crate::limits`]).

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use mvproxy_telemetry::metrics::values;

use crate::plumbing::ServerName;

/// What kind of transport failure a [`ProxyError::Transport`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportFailure {
    /// The upstream's host name did not resolve ([`crate::upstream::ResolveError`]).
    NameResolution,
    /// Anything else: refused, reset, TLS, a body that stopped.
    Other,
}

/// Why mvproxy answered a request itself instead of returning an upstream's response.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ProxyError {
    /// The resource is served only by peers, and every one of them is down.
    #[error("{gvr} is served only by {peers}, which cannot be reached: {cause}")]
    PeersDown {
        /// The resource, `group/version/resource`.
        gvr: String,
        /// The peers that serve it.
        peers: String,
        /// Why they are down.
        cause: String,
    },
    /// No known server serves the resource, but some peer has never been reached, so mvproxy
    /// cannot rule out that it does: a 404 here could make a controller delete objects.
    #[error(
        "{gvr} is not served by any reachable server and peer {peer} has not been reached yet ({cause}); retry later"
    )]
    SurfaceUnknown {
        /// The resource, `group/version/resource`.
        gvr: String,
        /// A peer never reached.
        peer: ServerName,
        /// Why it was not.
        cause: String,
    },
    /// Connecting to or talking with an upstream failed before a response arrived.
    #[error("{upstream} {}: {cause}{}", transport_what(*.written), transport_note(*.written))]
    Transport {
        /// The upstream.
        upstream: ServerName,
        /// What failed, read off the error's types (not its text).
        failure: TransportFailure,
        /// The error and its sources in words.
        cause: String,
        /// The request could change something and some of it may have reached the upstream
        /// (the connection failed while it was being sent or answered, not before): as for
        /// [`ProxyError::Timeout`], the client is told that it may have been applied.
        written: bool,
    },
    /// The upstream accepted the connection but sent no response headers in time.
    #[error("{upstream} did not answer within {seconds}s{}", applied_note(*.written))]
    Timeout {
        /// The upstream.
        upstream: ServerName,
        /// `--response-header-timeout-seconds`.
        seconds: u64,
        /// The request could change something (not `GET`, `HEAD`, `OPTIONS` or `TRACE`) and
        /// was handed to the upstream: a server that resumes processes what it received, so
        /// the client is told that it may have been applied (a hung API server, `SIGSTOP`ped
        /// or paused, applies a create it read before it stopped once it runs again).
        written: bool,
    },
    /// The snapshot that chose a peer has no upstream for it: an inconsistency inside
    /// mvproxy, not the client's fault. Retryable: the next request reads a newer snapshot.
    #[error("internal error: peer {peer} was chosen but has no upstream; retry")]
    PeerUpstreamMissing {
        /// The peer chosen.
        peer: ServerName,
    },
    /// The request could not be turned into an upstream request (bad URI, bad header).
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The request body is over `--max-request-body-bytes` (by `Content-Length`, or counted
    /// as it streamed).
    #[error(
        "the request body is larger than the limit of {limit} bytes (--max-request-body-bytes)"
    )]
    BodyTooLarge {
        /// `--max-request-body-bytes`.
        limit: u64,
    },
    /// Reading the client's request body failed (a malformed chunk, a connection closed or an
    /// HTTP/2 stream reset mid-body): the client's fault, so a `400` that client-go does not
    /// retry, and never an upstream's failure.
    #[error("the request body could not be read: {cause}")]
    ClientBody {
        /// What failed, in words.
        cause: String,
    },
    /// A new connection arrived while `--max-connections` were open; it is closed after this.
    #[error(
        "mvproxy is serving its maximum of {limit} connections (--max-connections); retry later"
    )]
    TooManyConnections {
        /// `--max-connections`.
        limit: usize,
    },
}

/// What a `504` adds when the request may have changed something.
fn applied_note(written: bool) -> &'static str {
    if written {
        "; the request was sent and may still have been applied: read the object before sending it again"
    } else {
        ""
    }
}

/// How a transport failure began: before anything of the request reached the upstream, or
/// after some of a write may have.
fn transport_what(written: bool) -> &'static str {
    if written {
        "failed while the request was being sent or answered"
    } else {
        "could not be reached"
    }
}

/// What a `503` adds when a write may have reached the upstream.
fn transport_note(written: bool) -> &'static str {
    if written {
        "; the request may still have been applied: read the object before sending it again"
    } else {
        ""
    }
}

impl ProxyError {
    /// The HTTP status mvproxy answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::PeersDown { .. }
            | Self::SurfaceUnknown { .. }
            | Self::Transport { .. }
            | Self::PeerUpstreamMissing { .. }
            | Self::TooManyConnections { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            Self::BadRequest(_) | Self::ClientBody { .. } => StatusCode::BAD_REQUEST,
            Self::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        }
    }

    /// The Kubernetes `Status.reason`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::PeersDown { .. }
            | Self::SurfaceUnknown { .. }
            | Self::Transport { .. }
            | Self::PeerUpstreamMissing { .. }
            | Self::TooManyConnections { .. } => "ServiceUnavailable",
            Self::Timeout { .. } => "Timeout",
            Self::BadRequest(_) | Self::ClientBody { .. } => "BadRequest",
            Self::BodyTooLarge { .. } => "RequestEntityTooLarge",
        }
    }

    /// The `type` label of `mvproxy_peer_proxy_errors_total` (upstream's values), if this is a
    /// peer-proxy error at all.
    pub fn peer_error_type(&self) -> Option<&'static str> {
        match self {
            Self::PeersDown { .. }
            | Self::SurfaceUnknown { .. }
            | Self::PeerUpstreamMissing { .. } => Some(values::ENDPOINT_RESOLUTION),
            Self::Transport { .. } | Self::Timeout { .. } => Some(values::PROXY_TRANSPORT),
            Self::BadRequest(_)
            | Self::ClientBody { .. }
            | Self::BodyTooLarge { .. }
            | Self::TooManyConnections { .. } => None,
        }
    }

    /// Seconds a client should wait before retrying, for the retryable errors. A write that
    /// may have been applied is not one: client-go's REST client sends a request again,
    /// whatever its method, when a `5xx` carries `Retry-After` (k8s.io/client-go
    /// `rest/with_retry.go`, `IsNextRetry` and `checkWait`), and so would apply it twice.
    fn retry_after(&self) -> Option<u32> {
        match self {
            Self::BadRequest(_) | Self::ClientBody { .. } | Self::BodyTooLarge { .. } => None,
            Self::Timeout { written: true, .. } | Self::Transport { written: true, .. } => None,
            _ => Some(1),
        }
    }

    /// Whether the client caused it (a `4xx`): such a failure says nothing about any
    /// upstream, so it is neither logged nor counted as one.
    pub fn is_client_error(&self) -> bool {
        self.status().is_client_error()
    }

    /// The response: a Kubernetes `Status` JSON body with the status code and reason above.
    pub fn to_response(&self) -> Response<Bytes> {
        let mut details = serde_json::Map::new();
        if let Some(secs) = self.retry_after() {
            details.insert("retryAfterSeconds".to_owned(), secs.into());
        }
        let body = status_body(self.status(), self.reason(), &self.to_string(), details);
        let mut resp = Response::new(body);
        *resp.status_mut() = self.status();
        let headers = resp.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(secs) = self.retry_after() {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        resp
    }
}

/// A Kubernetes `metav1.Status` failure body.
pub fn status_body(
    code: StatusCode,
    reason: &str,
    message: &str,
    details: serde_json::Map<String, serde_json::Value>,
) -> Bytes {
    let status = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code.as_u16(),
    });
    Bytes::from(status.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_down_is_a_retryable_503_status_naming_the_peer() {
        let e = ProxyError::PeersDown {
            gvr: "resource.k8s.io/v1beta2/resourceclaims".into(),
            peers: "apiserver-b".into(),
            cause: "connection refused".into(),
        };
        let resp = e.to_response();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
        let v: serde_json::Value = serde_json::from_slice(resp.body()).unwrap();
        assert_eq!(v["kind"], "Status");
        assert_eq!(v["reason"], "ServiceUnavailable");
        assert_eq!(v["code"], 503);
        let msg = v["message"].as_str().unwrap();
        assert!(
            msg.contains("apiserver-b") && msg.contains("connection refused"),
            "{msg}"
        );
    }

    #[test]
    fn a_timed_out_write_says_it_may_still_have_been_applied_and_a_read_does_not() {
        let message = |written| {
            let e = ProxyError::Timeout {
                upstream: ServerName::from("apiserver-b"),
                seconds: 10,
                written,
            };
            let v: serde_json::Value = serde_json::from_slice(e.to_response().body()).unwrap();
            assert_eq!(v["code"], 504);
            v["message"].as_str().unwrap().to_owned()
        };
        let write = message(true);
        assert!(
            write.contains("apiserver-b") && write.contains("may still have been applied"),
            "{write}"
        );
        let read = message(false);
        assert!(!read.contains("applied"), "{read}");
    }

    #[test]
    fn a_write_cut_off_mid_exchange_says_it_may_have_been_applied_and_is_not_offered_a_retry() {
        let answer = |written| {
            ProxyError::Transport {
                upstream: ServerName::from("apiserver-b"),
                failure: TransportFailure::Other,
                cause: "connection reset by peer".into(),
                written,
            }
            .to_response()
        };
        let write = answer(true);
        assert_eq!(write.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(write.headers().get(header::RETRY_AFTER).is_none());
        let v: serde_json::Value = serde_json::from_slice(write.body()).unwrap();
        let msg = v["message"].as_str().unwrap();
        assert!(
            msg.contains("apiserver-b")
                && msg.contains("connection reset by peer")
                && msg.contains("may still have been applied"),
            "{msg}"
        );
        let unsent = answer(false);
        assert_eq!(unsent.headers()[header::RETRY_AFTER], "1");
        let v: serde_json::Value = serde_json::from_slice(unsent.body()).unwrap();
        let msg = v["message"].as_str().unwrap();
        assert!(
            msg.contains("could not be reached") && !msg.contains("applied"),
            "{msg}"
        );
    }

    #[test]
    fn each_error_maps_to_one_code_and_reason() {
        let up = ServerName::from("local");
        let cases = [
            (
                ProxyError::Timeout {
                    upstream: up.clone(),
                    seconds: 5,
                    written: false,
                },
                504,
                "Timeout",
                Some("proxy_transport"),
            ),
            (
                ProxyError::Transport {
                    upstream: up,
                    failure: TransportFailure::Other,
                    cause: "tls".into(),
                    written: false,
                },
                503,
                "ServiceUnavailable",
                Some("proxy_transport"),
            ),
            (ProxyError::BadRequest("x".into()), 400, "BadRequest", None),
            (
                ProxyError::ClientBody {
                    cause: "Invalid chunk size line".into(),
                },
                400,
                "BadRequest",
                None,
            ),
            (
                ProxyError::PeerUpstreamMissing {
                    peer: ServerName::from("apiserver-b"),
                },
                503,
                "ServiceUnavailable",
                Some("endpoint_resolution"),
            ),
            (
                ProxyError::BodyTooLarge { limit: 3 << 20 },
                413,
                "RequestEntityTooLarge",
                None,
            ),
            (
                ProxyError::TooManyConnections { limit: 4096 },
                503,
                "ServiceUnavailable",
                None,
            ),
        ];
        for (e, code, reason, ty) in cases {
            assert_eq!(e.status().as_u16(), code, "{e}");
            assert_eq!(e.reason(), reason, "{e}");
            assert_eq!(e.peer_error_type(), ty, "{e}");
            let v: serde_json::Value = serde_json::from_slice(e.to_response().body()).unwrap();
            assert_eq!(v["code"], code, "{e}");
            assert_eq!(v["reason"], reason, "{e}");
        }
        let busy = ProxyError::TooManyConnections { limit: 2 }.to_response();
        assert_eq!(
            busy.headers()[header::RETRY_AFTER],
            "1",
            "client-go retries it"
        );
        for refused in [
            ProxyError::BodyTooLarge { limit: 10 },
            ProxyError::ClientBody {
                cause: "connection closed before message completed".into(),
            },
        ] {
            assert!(
                !refused
                    .to_response()
                    .headers()
                    .contains_key(header::RETRY_AFTER),
                "retrying cannot help: {refused}"
            );
            assert!(refused.is_client_error(), "{refused}");
        }
    }
}
