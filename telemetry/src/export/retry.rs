//! Which failures are worth another try, and when: the OTLP specification's retryable answers
//! (<https://opentelemetry.io/docs/specs/otlp/#failures> and `#failures-1`), and the
//! exponential backoff with jitter used when the collector does not say when to come back.

use std::time::Duration;

use http::StatusCode;

/// What failed in one export request.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExportError {
    #[error("connecting to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("TLS with {addr}: {source}")]
    Tls {
        addr: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Http(#[from] hyper::Error),
    #[error("the collector answered {status}")]
    Status {
        status: StatusCode,
        retry_after: Option<Duration>,
    },
    #[error("the collector answered grpc-status {code}: {message}")]
    Grpc {
        code: u32,
        message: String,
        retry_after: Option<Duration>,
    },
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("starting the export runtime: {0}")]
    Runtime(std::io::Error),
    /// From `opentelemetry-otlp`'s exporter, in the comparison build (`super::otlp_crate`).
    #[cfg(feature = "otlp-crate")]
    #[error("opentelemetry-otlp: {0}")]
    Crate(String),
}

/// Whether and when a failed request may be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Retry {
    No,
    /// Yes, after the delay the collector asked for, if it did.
    Yes(Option<Duration>),
}

impl ExportError {
    /// The OTLP specification's retryable failures
    /// (<https://opentelemetry.io/docs/specs/otlp/#retryable-response-codes>, and
    /// `#otlpgrpc-response` for gRPC).
    pub(super) fn retry(&self) -> Retry {
        match self {
            Self::Connect { .. } | Self::Tls { .. } | Self::Http(_) | Self::Timeout(_) => {
                Retry::Yes(None)
            }
            Self::Status {
                status,
                retry_after,
            } => match status.as_u16() {
                429 | 502 | 503 | 504 => Retry::Yes(*retry_after),
                _ => Retry::No,
            },
            Self::Grpc {
                code, retry_after, ..
            } => match code {
                // CANCELLED, DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE, UNAVAILABLE, DATA_LOSS
                1 | 4 | 10 | 11 | 14 | 15 => Retry::Yes(*retry_after),
                // RESOURCE_EXHAUSTED: only when the server says when to come back.
                8 if retry_after.is_some() => Retry::Yes(*retry_after),
                _ => Retry::No,
            },
            Self::Runtime(_) => Retry::No,
            #[cfg(feature = "otlp-crate")]
            Self::Crate(_) => Retry::No,
        }
    }
}

/// Exponential backoff with full jitter: the n-th wait is uniform in `[0, min(cap, base ×
/// 2^n)]` (<https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/>; the
/// OTLP specification asks for "exponential backoff with jitter" without fixing the numbers).
#[derive(Debug)]
pub(super) struct Backoff {
    next: Duration,
}

const BACKOFF_BASE: Duration = Duration::from_millis(100);
const BACKOFF_CAP: Duration = Duration::from_secs(5);

impl Backoff {
    pub(super) fn new() -> Self {
        Self { next: BACKOFF_BASE }
    }

    pub(super) fn wait(&mut self) -> Duration {
        let ceiling = self.next;
        self.next = (self.next * 2).min(BACKOFF_CAP);
        ceiling.mul_f64(fastrand::f64())
    }
}

#[cfg(test)]
mod tests;
