//! Single connections the test controls: HTTP/1.1 or HTTP/2, plain or TLS, so a test can keep
//! one open (a watch, a keep-alive connection) while it opens others, see which certificate a
//! handshake got, or send what a pooled client would refuse to (an oversized head); and raw
//! bytes on a TCP connection ([`raw_exchange`]) for what no HTTP client sends at all (broken
//! framing, a body cut short).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Channel, Full};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;

use super::{PATIENCE, Resp};

/// The body type of requests sent here.
pub type ReqBody = BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// A request with `headers` and `body` to `path` (absolute-path form, plus `Host`).
pub fn req(method: Method, path: &str, headers: &[(&str, &str)], body: Bytes) -> Request<ReqBody> {
    req_with(
        method,
        path,
        headers,
        Full::new(body).map_err(|e| match e {}).boxed(),
    )
}

/// A request with any body.
pub fn req_with(
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: ReqBody,
) -> Request<ReqBody> {
    let mut b = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "mvproxy");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(body).expect("request")
}

/// A body of unknown length (sent chunked over HTTP/1.1) made of `chunks`, sent one by one.
pub fn streamed(chunks: Vec<Bytes>) -> ReqBody {
    let (mut tx, body) = Channel::<Bytes, Box<dyn std::error::Error + Send + Sync>>::new(1);
    tokio::spawn(async move {
        for c in chunks {
            if tx.send_data(c).await.is_err() {
                return;
            }
        }
    });
    body.boxed()
}

/// One HTTP/1.1 connection.
pub struct H1 {
    pub sender: http1::SendRequest<ReqBody>,
    /// Ends when the connection closes.
    pub conn: JoinHandle<()>,
    /// The certificate chain the server presented (TLS only).
    pub peer_certs: Vec<CertificateDer<'static>>,
}

impl H1 {
    /// A plain connection to `addr`.
    pub async fn plain(addr: SocketAddr) -> H1 {
        let tcp = bounded(TcpStream::connect(addr))
            .await
            .expect("connect in time")
            .expect("connect");
        Self::over(TokioIo::new(tcp), Vec::new()).await
    }

    /// A TLS connection to `addr` trusting `config`'s roots, as `name`.
    pub async fn tls(addr: SocketAddr, config: Arc<rustls::ClientConfig>, name: &str) -> H1 {
        let (tls, certs) = tls_connect(addr, config, name)
            .await
            .unwrap_or_else(|e| panic!("TLS to {addr}: {e}"));
        Self::over(TokioIo::new(tls), certs).await
    }

    async fn over<I>(io: TokioIo<I>, peer_certs: Vec<CertificateDer<'static>>) -> H1
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (sender, conn) = bounded(http1::handshake(io))
            .await
            .expect("h1 handshake in time")
            .expect("h1 handshake");
        let conn = tokio::spawn(async move {
            let _ = conn.with_upgrades().await;
        });
        H1 {
            sender,
            conn,
            peer_certs,
        }
    }

    /// Sends `req` and collects the answer.
    pub async fn send(&mut self, req: Request<ReqBody>) -> Result<Resp, String> {
        bounded(async {
            self.sender.ready().await.map_err(|e| e.to_string())?;
            Resp::collect(
                self.sender
                    .send_request(req)
                    .await
                    .map_err(|e| e.to_string())?,
            )
            .await
        })
        .await?
    }

    /// Sends `req` and returns the response with its body still streaming (a watch).
    pub async fn open(&mut self, req: Request<ReqBody>) -> hyper::Response<Incoming> {
        bounded(async {
            self.sender.ready().await.expect("ready");
            self.sender.send_request(req).await.expect("response")
        })
        .await
        .expect("response in time")
    }

    /// Whether the server closed the connection (bounded wait).
    pub async fn closed(self) -> bool {
        tokio::time::timeout(PATIENCE, self.conn).await.is_ok()
    }
}

/// One HTTP/2 connection with prior knowledge (h2c), or over TLS with ALPN `h2`.
pub struct H2 {
    pub sender: http2::SendRequest<ReqBody>,
    pub conn: JoinHandle<()>,
}

impl H2 {
    /// h2c to `addr`.
    pub async fn plain(addr: SocketAddr) -> H2 {
        let tcp = bounded(TcpStream::connect(addr))
            .await
            .expect("connect in time")
            .expect("connect");
        let (sender, conn) = bounded(http2::handshake(TokioExecutor::new(), TokioIo::new(tcp)))
            .await
            .expect("h2 handshake in time")
            .expect("h2 handshake");
        let conn = tokio::spawn(async move {
            let _ = conn.await;
        });
        H2 { sender, conn }
    }

    /// Sends `req` and collects the answer.
    pub async fn send(&mut self, req: Request<ReqBody>) -> Result<Resp, String> {
        bounded(async {
            self.sender.ready().await.map_err(|e| e.to_string())?;
            Resp::collect(
                self.sender
                    .send_request(req)
                    .await
                    .map_err(|e| e.to_string())?,
            )
            .await
        })
        .await?
    }
}

/// A TLS handshake with `addr` as `name`; the stream and the server's certificates.
pub async fn tls_connect(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    name: &str,
) -> Result<
    (
        tokio_rustls::client::TlsStream<TcpStream>,
        Vec<CertificateDer<'static>>,
    ),
    String,
> {
    let tcp = bounded(TcpStream::connect(addr))
        .await?
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(name.to_owned()).map_err(|e| e.to_string())?;
    let tls = bounded(TlsConnector::from(config).connect(name, tcp))
        .await?
        .map_err(|e| e.to_string())?;
    let certs = tls
        .get_ref()
        .1
        .peer_certificates()
        .map(<[_]>::to_vec)
        .unwrap_or_default();
    Ok((tls, certs))
}

/// A client config trusting the CA in `ca_file`, offering `alpn` (e.g. `http/1.1`).
pub fn client_config(ca_file: &std::path::Path, alpn: &[&str]) -> Arc<rustls::ClientConfig> {
    mvproxy_core::tls::install_provider();
    let mut roots = rustls::RootCertStore::empty();
    for cert in mvproxy_core::tls::load_certs(ca_file).expect("CA file") {
        roots.add(cert).expect("CA");
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    Arc::new(config)
}

/// `fut`, or an error after [`PATIENCE`].
pub async fn bounded<T>(fut: impl std::future::Future<Output = T>) -> Result<T, String> {
    tokio::time::timeout(PATIENCE, fut)
        .await
        .map_err(|_| format!("nothing within {PATIENCE:?}"))
}

/// Asserts `r` is a Kubernetes `Status` failure with `code` and `reason`; returns its message.
pub fn assert_status(r: &Resp, code: StatusCode, reason: &str) -> String {
    assert_eq!(r.status, code, "{}", r.text());
    assert_eq!(r.header("content-type"), "application/json", "{}", r.text());
    let v = r.json();
    assert_eq!(v["kind"], "Status", "{v}");
    assert_eq!(v["code"], code.as_u16(), "{v}");
    assert_eq!(v["reason"], reason, "{v}");
    v["message"].as_str().unwrap_or_default().to_owned()
}

/// When [`raw_exchange`] stops reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadUntil {
    /// The server closed the connection: every response it sent on it.
    Closed,
    /// The first response is complete by its `Content-Length`, or the server closed first.
    Answered,
}

/// What came back on a raw connection, as text.
#[derive(Debug)]
pub struct RawAnswer {
    pub text: String,
}

impl RawAnswer {
    /// The first response's status code; `None` if the server closed without answering.
    pub fn code(&self) -> Option<u16> {
        self.text
            .strip_prefix("HTTP/1.1 ")
            .and_then(|rest| rest.get(..3))
            .and_then(|c| c.parse().ok())
    }

    /// The status code of every response on the connection, in order.
    pub fn codes(&self) -> Vec<u16> {
        let text = &self.text;
        text.match_indices("HTTP/1.1 ")
            .filter_map(|(i, m)| text.get(i + m.len()..i + m.len() + 3)?.parse().ok())
            .collect()
    }
}

/// Writes `bytes` to `addr` as they are, half-closes the connection if `half_close`, and reads
/// `until` the server closes it or has answered. Asserts that it did within [`PATIENCE`].
pub async fn raw_exchange(
    addr: SocketAddr,
    bytes: &[u8],
    half_close: bool,
    until: ReadUntil,
) -> RawAnswer {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(bytes).await.expect("write");
    if half_close {
        s.shutdown().await.expect("half-close");
    }
    let mut got = Vec::new();
    let read = tokio::time::timeout(PATIENCE, async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    got.extend_from_slice(&buf[..n]);
                    if until == ReadUntil::Answered && response_complete(&got) {
                        break;
                    }
                }
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the proxy neither answered nor closed");
    RawAnswer {
        text: String::from_utf8_lossy(&got).into_owned(),
    }
}

/// A response head with a `content-length` whose body has all arrived.
fn response_complete(got: &[u8]) -> bool {
    let text = String::from_utf8_lossy(got);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return false;
    };
    head.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .is_some_and(|n| body.len() >= n)
}
