//! The request body limit: counted as the body streams, refused up front by `Content-Length`,
//! and the rest of a refused HTTP/1.1 body drained within bounds.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, header};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use crate::classify::RequestInfo;
use crate::error::ProxyError;

/// Most of a refused HTTP/1.1 body read and thrown away (see `drain`).
pub const DRAIN_BYTES: u64 = 64 << 20;

/// Longest time spent on that.
pub const REFUSED_BODY_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads and discards the rest of a refused HTTP/1.1 request body, so a client still writing
/// it can finish and then read the `413`: if the connection closed under it (hyper closes
/// one whose request body was not read), it would see a write error instead of the answer.
/// Bounded by [`DRAIN_BYTES`] and [`REFUSED_BODY_DRAIN_TIMEOUT`], so refusing costs no more than that.
/// HTTP/2 needs none of this: the stream is reset and the connection goes on.
fn drain<B>(mut body: B, version: http::Version)
where
    B: HttpBody<Data = Bytes> + Send + Unpin + 'static,
{
    if version >= http::Version::HTTP_2 {
        return;
    }
    tokio::spawn(async move {
        let mut left = DRAIN_BYTES;
        let _ = tokio::time::timeout(REFUSED_BODY_DRAIN_TIMEOUT, async {
            while let Some(Ok(frame)) = body.frame().await {
                let len = frame.data_ref().map_or(0, |d| d.len() as u64);
                match left.checked_sub(len) {
                    Some(l) => left = l,
                    None => return,
                }
            }
        })
        .await;
    });
}

/// A request body that fails once more than its limit has streamed through, and that tells
/// a failure to read the client's body apart from an upstream's (see [`BodyLimit::explain`]).
///
/// Generic over the client's body (hyper's [`Incoming`] on the listener), so the request path
/// can be driven without a socket.
#[derive(Debug)]
pub struct LimitedBody<B = Incoming> {
    /// `None` once the limit was passed (the rest is being drained).
    inner: Option<B>,
    version: http::Version,
    /// Bytes still allowed.
    remaining: u64,
    limit: u64,
    seen: Arc<Seen>,
}

/// What the body saw, for the [`BodyLimit`] that explains the request's failure. One `Arc` per
/// request (each count taken and dropped is a locked instruction, bench/PERF_NOTES.md,
/// thirty-eighth round).
#[derive(Debug, Default)]
struct Seen {
    failed: OnceLock<BodyFailure>,
    /// The last read of the client's body found nothing yet: the body is waiting on the
    /// client, not on the upstream (which reads it only as fast as it takes it).
    waiting_on_client: AtomicBool,
}

/// How a client's request body failed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum BodyFailure {
    TooLarge,
    Read(String),
}

/// The error a [`LimitedBody`] fails with when the body goes over its limit.
#[derive(Debug, thiserror::Error)]
#[error("the request body is larger than {limit} bytes")]
pub struct BodyTooLarge {
    /// `--max-request-body-bytes`.
    pub limit: u64,
}

/// The error a [`LimitedBody`] fails with when reading the client's body failed: a malformed
/// chunk, a connection closed or an HTTP/2 stream reset before the body's end.
#[derive(Debug, thiserror::Error)]
#[error("reading the client's request body: {cause}")]
pub struct ClientBodyFailed {
    /// What failed, in words.
    pub cause: String,
}

impl<B> HttpBody for LimitedBody<B>
where
    B: HttpBody<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<crate::plumbing::BoxError>,
{
    type Data = Bytes;
    type Error = crate::plumbing::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(Some(Err(Box::new(BodyTooLarge { limit: this.limit }))));
        };
        let polled = Pin::new(inner).poll_frame(cx);
        this.seen
            .waiting_on_client
            .store(polled.is_pending(), Ordering::Relaxed);
        match polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let len = data.len() as u64;
                    if len > this.remaining {
                        let _ = this.seen.failed.set(BodyFailure::TooLarge);
                        if let Some(rest) = this.inner.take() {
                            drain(rest, this.version);
                        }
                        return Poll::Ready(Some(Err(Box::new(BodyTooLarge {
                            limit: this.limit,
                        }))));
                    }
                    this.remaining -= len;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                let e: crate::plumbing::BoxError = e.into();
                let cause = crate::plumbing::causes(&*e);
                let _ = this.seen.failed.set(BodyFailure::Read(cause.clone()));
                Poll::Ready(Some(Err(Box::new(ClientBodyFailed { cause }))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), HttpBody::size_hint)
    }
}

/// Tells, after the request was forwarded, whether its body failed on the client's side.
#[derive(Debug)]
pub struct BodyLimit {
    limit: u64,
    seen: Arc<Seen>,
}

impl BodyLimit {
    /// A failure to forward while the client's body had failed is the client's: the `413` of
    /// a body over the limit, or the `400` of a body that could not be read, whatever the
    /// upstream connection reported after it was aborted. So is a response-header timeout
    /// that passed while the body was still waiting for the client's next bytes (a client
    /// sending slowly, or stopped mid-body): the upstream cannot answer a request it has not
    /// received, and a `504` would make client-go send the same body again. A timeout while
    /// the body had all arrived, or was waiting for the upstream to take more, stays the
    /// upstream's `504`.
    pub fn explain<T>(&self, result: Result<T, ProxyError>) -> Result<T, ProxyError> {
        if let Err(ProxyError::Timeout { seconds, .. }) = &result
            && self.seen.failed.get().is_none()
            && self.seen.waiting_on_client.load(Ordering::Relaxed)
        {
            return Err(ProxyError::ClientBody {
                cause: format!(
                    "it had not all arrived after {seconds}s (--response-header-timeout-seconds)"
                ),
            });
        }
        match (result, self.seen.failed.get()) {
            (Err(_), Some(BodyFailure::TooLarge)) => {
                Err(ProxyError::BodyTooLarge { limit: self.limit })
            }
            (Err(_), Some(BodyFailure::Read(cause))) => Err(ProxyError::ClientBody {
                cause: cause.clone(),
            }),
            (other, _) => other,
        }
    }
}

/// Puts the body limit on `req`: refused at once when its `Content-Length` is over `limit`,
/// else counted as it streams. The `proxy` subresource is not limited (see the module docs).
pub fn limit_body<B>(
    req: Request<B>,
    info: &RequestInfo,
    limit: u64,
) -> Result<(Request<LimitedBody<B>>, BodyLimit), ProxyError>
where
    B: HttpBody<Data = Bytes> + Send + Unpin + 'static,
{
    let limit = match info {
        RequestInfo::Resource(r) if r.subresource.as_deref() == Some("proxy") => u64::MAX,
        _ => limit,
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let version = req.version();
    if declared.is_some_and(|n| n > limit) {
        drain(req.into_body(), version);
        return Err(ProxyError::BodyTooLarge { limit });
    }
    let seen = Arc::new(Seen::default());
    let req = req.map(|inner| LimitedBody {
        inner: Some(inner),
        version,
        remaining: limit,
        limit,
        seen: seen.clone(),
    });
    Ok((req, BodyLimit { limit, seen }))
}
