//! The connection to the collector: one kept alive (HTTP/1.1 for OTLP/HTTP, HTTP/2 for
//! gRPC, over TLS for an `https://` endpoint), driven by the export thread's own
//! single-threaded Tokio runtime, and the export of one batch over it with the retries the
//! OTLP specification allows ([`super::retry`]) until a deadline.

use std::time::Instant;

use bytes::Bytes;
use http::Response;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry::KeyValue;

use super::Target;
use super::retry::{Backoff, ExportError, Retry};
use super::stats::{ExportStats, Outcome};
use super::wire::{self, Accepted};
use crate::otlp::{self, SpanRecord};

/// How an export of one batch ended.
#[derive(Debug)]
pub(crate) enum Sent {
    Accepted(Accepted),
    /// Not retryable: the batch is dropped.
    Refused(ExportError),
    /// Retryable, but the time ran out.
    GaveUp(ExportError),
}

/// One kept-alive connection to the collector, and the batch's encoding.
pub(crate) struct Client {
    rt: tokio::runtime::Runtime,
    pub(super) target: Target,
    conn: Option<Conn>,
    /// The encoded attributes of the `Resource` every batch carries.
    resource: Vec<u8>,
    /// The encoding buffer, reused.
    buf: Vec<u8>,
}

enum Conn {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

impl Client {
    /// A client of `target`, with the runtime that drives its connection; it connects on the
    /// first export. Every batch is sent under a `Resource` with `resource`'s attributes.
    pub(super) fn new(target: Target, resource: &[KeyValue]) -> Result<Self, ExportError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ExportError::Runtime)?;
        Ok(Self {
            rt,
            target,
            conn: None,
            resource: otlp::resource(resource.iter().map(|kv| (kv.key.as_str(), &kv.value))),
            buf: Vec::new(),
        })
    }

    /// Encodes `batch` (`crate::otlp`) and exports it; the batch is left as it was, for the
    /// caller to put back in the queue when the export gave up.
    #[allow(
        clippy::ptr_arg,
        reason = "the signature of otlp_crate's, which takes the spans out of the batch"
    )]
    pub(super) fn send(
        &mut self,
        batch: &mut Vec<SpanRecord>,
        until: Instant,
        stats: &ExportStats,
    ) -> Sent {
        let mut buf = std::mem::take(&mut self.buf);
        otlp::request(&self.resource, batch, &mut buf);
        let sent = self.export(&buf, until, stats);
        self.buf = buf;
        sent
    }

    /// Sends `message` (an encoded `ExportTraceServiceRequest`), retrying what the
    /// specification calls retryable until `until`.
    fn export(&mut self, message: &[u8], until: Instant, stats: &ExportStats) -> Sent {
        let payload = if self.target.gzip {
            wire::gzip(message)
        } else {
            Bytes::copy_from_slice(message)
        };
        let body = if self.target.grpc {
            wire::grpc_frame(&payload, self.target.gzip)
        } else {
            payload
        };
        let mut backoff = Backoff::new();
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let timeout = self.target.timeout.min(left);
            let (rt, target, conn) = (&self.rt, &self.target, &mut self.conn);
            let result = rt.block_on(async {
                tokio::time::timeout(timeout, send(target, conn, body.clone()))
                    .await
                    .unwrap_or(Err(ExportError::Timeout(timeout)))
            });
            let e = match result {
                Ok(accepted) => return Sent::Accepted(accepted),
                Err(e) => e,
            };
            if matches!(e, ExportError::Timeout(_)) {
                // A request may still be in flight on it: start the next one afresh.
                self.conn = None;
            }
            let Retry::Yes(asked) = e.retry() else {
                return Sent::Refused(e);
            };
            let wait = asked.unwrap_or_else(|| backoff.wait());
            if Instant::now() + wait >= until {
                return Sent::GaveUp(e);
            }
            stats.request(Outcome::Retry);
            self.rt.block_on(async { tokio::time::sleep(wait).await });
        }
    }
}

/// Posts `body`, on the kept connection if it is still open; a kept connection that turns
/// out closed before the request went out is replaced once.
async fn send(
    target: &Target,
    conn: &mut Option<Conn>,
    body: Bytes,
) -> Result<Accepted, ExportError> {
    let mut replaced = false;
    loop {
        let (mut c, reused) = match conn.take() {
            Some(c) if !c.is_closed() => (c, true),
            _ => (connect(target).await?, false),
        };
        match c.send(target, body.clone()).await {
            Ok(resp) => {
                let checked = wire::check(target, resp).await;
                *conn = Some(c);
                return checked;
            }
            Err(e)
                if reused
                    && !replaced
                    && (e.is_canceled() || e.is_closed() || e.is_incomplete_message()) =>
            {
                replaced = true;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

async fn connect(target: &Target) -> Result<Conn, ExportError> {
    let host = target.endpoint.host().unwrap_or_default();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let default_port = if target.tls.is_some() { 443 } else { 80 };
    let port = target.endpoint.port_u16().unwrap_or(default_port);
    let addr = || format!("{host}:{port}");
    let tcp = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|source| ExportError::Connect {
            addr: addr(),
            source,
        })?;
    let _ = tcp.set_nodelay(true);
    let Some(tls) = &target.tls else {
        return handshake(target.grpc, TokioIo::new(tcp)).await;
    };
    let name =
        rustls_pki_types::ServerName::try_from(host.to_owned()).map_err(|e| ExportError::Tls {
            addr: addr(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
        })?;
    let stream = tokio_rustls::TlsConnector::from(tls.clone())
        .connect(name, tcp)
        .await
        .map_err(|source| ExportError::Tls {
            addr: addr(),
            source,
        })?;
    handshake(target.grpc, TokioIo::new(stream)).await
}

async fn handshake<I>(grpc: bool, io: I) -> Result<Conn, ExportError>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    Ok(if grpc {
        let (send, conn) = http2::handshake(TokioExecutor::new(), io).await?;
        tokio::spawn(conn);
        Conn::H2(send)
    } else {
        let (send, conn) = http1::handshake(io).await?;
        tokio::spawn(conn);
        Conn::H1(send)
    })
}

impl Conn {
    fn is_closed(&self) -> bool {
        match self {
            Self::H1(s) => s.is_closed(),
            Self::H2(s) => s.is_closed(),
        }
    }

    async fn send(
        &mut self,
        target: &Target,
        body: Bytes,
    ) -> Result<Response<Incoming>, hyper::Error> {
        match self {
            Self::H1(s) => {
                s.ready().await?;
                s.send_request(wire::http_request(target, body)).await
            }
            Self::H2(s) => {
                s.ready().await?;
                s.send_request(wire::grpc_request(target, body)).await
            }
        }
    }
}
