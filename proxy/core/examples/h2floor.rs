//! The floor of the HTTP/2 design `bench/PERF_NOTES.md` (tenth round) measures: a bare HTTP/2
//! relay with nothing of mvproxy in it, to learn what the `h2` crate and rustls cost on the real
//! path when driven without hyper's tasks and channels.
//!
//! hyper runs a task per HTTP/2 stream on the server side, and on the client side a dispatch
//! task fed by a channel that spawns a task per request and answers through a oneshot. Here
//! each client connection is one task: it accepts the connection's streams and drives every
//! stream's relay itself (a `FuturesUnordered`); a relay sends its request straight into the
//! shared upstream connection through `h2::client::SendRequest` (a lock and a wake-up, no
//! channel) and polls the answer itself. One upstream connection serves every client, as
//! mvproxy's pool does at this load (up to 100 streams per connection).
//!
//! It takes the flags `bench/realpath.py` gives mvproxy (`--listen`, `--local`,
//! `--local-ca-file`, `--tls-cert-file`, `--tls-key-file`, `--admin-listen`; the rest are
//! ignored), speaks HTTP/2 only, and answers `/readyz` on the admin address. It is a
//! measurement, not a proxy: no routing, identity, limits, spans, metrics or timeouts, and a
//! stream's error ends only that stream. `H2FLOOR_STREAMS=task` relays each stream in a task of
//! its own instead, as hyper's server does, and `H2FLOOR_UPSTREAM=hyper` sends requests through
//! hyper's HTTP/2 client (as mvproxy did until the eighteenth round of `bench/PERF_NOTES.md`;
//! requests without a body only); `H2FLOOR_SERVER=hyper` serves clients with hyper's server
//! (requests without a body only). With both it is a bare hyper relay, hyper's structure and
//! none of mvproxy's work; with the server only, hyper's server sends each request through
//! `h2`'s client directly, as mvproxy does. Together they tell the costs apart.
//! With `H2FLOOR_SERVER=hyper` it offers HTTP/1.1 too (ALPN `h2`, `http/1.1`) and serves an
//! HTTP/1.1 client with hyper's HTTP/1.1 server, each request sent on as an HTTP/2 stream, as
//! mvproxy does: the floor of the HTTP/1.1 rows (`bench/PERF_NOTES.md`, fourteenth round).
//! Run it with
//! `PROTOS=h2 bench/realpath.sh mvproxy=target/release/mvproxy floor=target/release/examples/h2floor`
//! (a variant through a wrapper script that sets its variables).

use std::collections::HashMap;
use std::error::Error;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use h2::RecvStream;
use h2::client::SendRequest;
use h2::server::SendResponse;
use http::{Request, Uri};
use http_body::Frame;
use http_body_util::{BodyExt, Either, Empty};
use mvproxy_core::tls;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

type BoxError = Box<dyn Error + Send + Sync>;

/// The shipped `mvproxy` links jemalloc (`proxy/cli/src/main.rs`); the floor links it too, so
/// the two differ in mvproxy's own work only (`bench/PERF_NOTES.md`, thirty-fourth round, "The
/// floor with jemalloc").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The shared upstream connection's handle, through `h2` itself or through hyper's client.
#[derive(Clone)]
enum Upstream {
    H2(SendRequest<Bytes>),
    Hyper(hyper::client::conn::http2::SendRequest<Empty<Bytes>>),
}

fn main() -> Result<(), BoxError> {
    let args = flags(std::env::args().skip(1))?;
    let flag = |name: &str| {
        args.get(name)
            .cloned()
            .ok_or_else(|| format!("h2floor: --{name} is required"))
    };
    let (listen, local, ca) = (flag("listen")?, flag("local")?, flag("local-ca-file")?);
    let (cert, key) = (flag("tls-cert-file")?, flag("tls-key-file")?);
    tls::install_provider();
    let mut server = rustls::ServerConfig::builder_with_provider(tls::provider())
        .with_protocol_versions(tls::PROTOCOL_VERSIONS)?
        .with_no_client_auth()
        .with_single_cert(
            tls::load_certs(Path::new(&cert))?,
            tls::load_key(Path::new(&key))?,
        )?;
    let hyper_server = std::env::var("H2FLOOR_SERVER").is_ok_and(|v| v == "hyper");
    server.alpn_protocols = vec![b"h2".to_vec()];
    if hyper_server {
        server.alpn_protocols.push(b"http/1.1".to_vec());
    }
    let mut client = tls::client_config(Path::new(&ca), None)?;
    client.alpn_protocols = vec![b"h2".to_vec()];
    // One thread, as mvproxy runs when pinned to one core (the benchmark pins both).
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async move {
            let through_hyper = std::env::var("H2FLOOR_UPSTREAM").is_ok_and(|v| v == "hyper");
            let base: Uri = local.parse()?;
            let upstream = connect(&base, Arc::new(client), through_hyper).await?;
            if let Some(admin) = args.get("admin-listen") {
                tokio::spawn(admin_server(TcpListener::bind(admin).await?));
            }
            let task_per_stream = std::env::var("H2FLOOR_STREAMS").is_ok_and(|v| v == "task");
            let listener = TcpListener::bind(&listen).await?;
            let acceptor = TlsAcceptor::from(Arc::new(server));
            loop {
                let (tcp, _) = listener.accept().await?;
                tcp.set_nodelay(true)?;
                let (acceptor, upstream) = (acceptor.clone(), upstream.clone());
                if hyper_server {
                    tokio::spawn(serve_hyper(tcp, acceptor, upstream, base.clone()));
                    continue;
                }
                let serve = serve(tcp, acceptor, upstream, task_per_stream);
                tokio::spawn(logged("client connection", serve));
            }
        })
}

/// `--name value` pairs (every flag mvproxy is given here takes a value); other words are skipped.
fn flags(mut args: impl Iterator<Item = String>) -> Result<HashMap<String, String>, BoxError> {
    let mut flags = HashMap::new();
    while let Some(arg) = args.next() {
        if let Some(name) = arg.strip_prefix("--") {
            let value = args
                .next()
                .ok_or_else(|| format!("h2floor: --{name} needs a value"))?;
            flags.insert(name.to_owned(), value);
        }
    }
    Ok(flags)
}

/// The upstream connection over TLS with HTTP/2; its connection future runs in its own task.
async fn connect(
    url: &Uri,
    config: Arc<rustls::ClientConfig>,
    through_hyper: bool,
) -> Result<Upstream, BoxError> {
    let host = url.host().ok_or("h2floor: --local has no host")?;
    let port = url.port_u16().unwrap_or(443);
    let tcp = TcpStream::connect((host, port)).await?;
    tcp.set_nodelay(true)?;
    let tls = TlsConnector::from(config)
        .connect(ServerName::try_from(host.to_owned())?, tcp)
        .await?;
    if through_hyper {
        let (send, connection) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(tls),
        )
        .await?;
        tokio::spawn(logged("upstream connection", connection));
        return Ok(Upstream::Hyper(send));
    }
    let (send, connection) = h2::client::handshake(tls).await?;
    tokio::spawn(logged("upstream connection", connection));
    Ok(Upstream::H2(send))
}

/// `future`, its error printed as `what`'s.
async fn logged<E: std::fmt::Display>(what: &str, future: impl Future<Output = Result<(), E>>) {
    report(what, future.await);
}

fn report<E: std::fmt::Display>(what: &str, result: Result<(), E>) {
    if let Err(e) = result {
        eprintln!("h2floor: {what}: {e}");
    }
}

/// One client connection: its streams are accepted and relayed in this one task.
async fn serve(
    tcp: TcpStream,
    acceptor: TlsAcceptor,
    upstream: Upstream,
    task_per_stream: bool,
) -> Result<(), BoxError> {
    let mut connection = h2::server::handshake(acceptor.accept(tcp).await?).await?;
    let mut relays = FuturesUnordered::new();
    loop {
        tokio::select! {
            accepted = connection.accept() => match accepted {
                Some(stream) => {
                    let (request, respond) = stream?;
                    let relay = relay(request, respond, upstream.clone());
                    if task_per_stream {
                        tokio::spawn(logged("stream", relay));
                    } else {
                        relays.push(relay);
                    }
                }
                None => break,
            },
            Some(done) = relays.next() => report("stream", done),
        }
    }
    while let Some(done) = relays.next().await {
        report("stream", done);
    }
    Ok(())
}

/// One client connection served by hyper (HTTP/2, or HTTP/1.1 when the handshake chose it),
/// each request sent on against `base`, through hyper's HTTP/2 client or `h2`'s directly, and
/// its answer streamed back by hyper.
async fn serve_hyper(tcp: TcpStream, acceptor: TlsAcceptor, upstream: Upstream, base: Uri) {
    let tls = match acceptor.accept(tcp).await {
        Ok(tls) => tls,
        Err(e) => return eprintln!("h2floor: TLS: {e}"),
    };
    let http1 = tls.get_ref().1.alpn_protocol() != Some(b"h2");
    let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
        let mut upstream = upstream.clone();
        let base = base.clone();
        async move {
            let (mut head, body) = request.into_parts();
            if !hyper::body::Body::is_end_stream(&body) {
                return Err("h2floor: a request body through hyper's client".to_owned());
            }
            // An HTTP/1.1 request's origin form, made absolute for the HTTP/2 stream; its
            // connection-level headers are not HTTP/2's.
            let mut uri = base.into_parts();
            uri.path_and_query = head.uri.path_and_query().cloned();
            head.uri = Uri::from_parts(uri).map_err(|e| e.to_string())?;
            head.headers.remove(http::header::HOST);
            head.headers.remove(http::header::CONNECTION);
            match &mut upstream {
                Upstream::Hyper(send) => {
                    let answer = send.send_request(Request::from_parts(head, Empty::new()));
                    let answer = answer.await.map_err(|e| e.to_string())?;
                    Ok(answer.map(Either::Left))
                }
                Upstream::H2(send) => {
                    let mut send = send.clone().ready().await.map_err(|e| e.to_string())?;
                    let (answer, _) = send
                        .send_request(Request::from_parts(head, ()), true)
                        .map_err(|e| e.to_string())?;
                    let answer = answer.await.map_err(|e| e.to_string())?;
                    Ok(answer.map(|body| Either::Right(H2Body(body))))
                }
            }
        }
    });
    let io = hyper_util::rt::TokioIo::new(tls);
    let served = if http1 {
        hyper::server::conn::http1::Builder::new()
            .serve_connection(io, service)
            .await
    } else {
        hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .serve_connection(io, service)
            .await
    };
    report("client connection", served);
}

/// An `h2` answer's body as hyper's server takes it, its window given back as it is read.
struct H2Body(RecvStream);

impl http_body::Body for H2Body {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        match ready!(self.0.poll_data(cx)) {
            Some(Ok(data)) => {
                let _ = self.0.flow_control().release_capacity(data.len());
                Poll::Ready(Some(Ok(Frame::data(data))))
            }
            Some(Err(e)) => Poll::Ready(Some(Err(e))),
            None => Poll::Ready(
                ready!(self.0.poll_trailers(cx))
                    .transpose()
                    .map(|t| t.map(Frame::trailers)),
            ),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }
}

/// One stream: the request to the upstream, its answer back, each body relayed frame by frame
/// within the peers' flow-control windows.
async fn relay(
    request: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    upstream: Upstream,
) -> Result<(), BoxError> {
    let upstream = match upstream {
        Upstream::H2(send) => send,
        Upstream::Hyper(send) => return relay_via_hyper(request, respond, send).await,
    };
    let (head, mut body) = request.into_parts();
    let empty = body.is_end_stream();
    let (answer, mut send) = upstream
        .ready()
        .await?
        .send_request(Request::from_parts(head, ()), empty)?;
    if !empty {
        copy(&mut body, &mut send).await?;
    }
    let (head, mut body) = answer.await?.into_parts();
    let empty = body.is_end_stream();
    let mut send = respond.send_response(http::Response::from_parts(head, ()), empty)?;
    if !empty {
        copy(&mut body, &mut send).await?;
    }
    Ok(())
}

/// [`relay`] with the request sent through hyper's client (a request without a body only).
/// The answer is written as it comes: a 2 KB answer fits the client's window.
async fn relay_via_hyper(
    request: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    mut upstream: hyper::client::conn::http2::SendRequest<Empty<Bytes>>,
) -> Result<(), BoxError> {
    let (head, body) = request.into_parts();
    if !body.is_end_stream() {
        return Err("h2floor: a request body through hyper's client".into());
    }
    let answer = upstream
        .send_request(Request::from_parts(head, Empty::new()))
        .await?;
    let (head, mut body) = answer.into_parts();
    let mut send = respond.send_response(http::Response::from_parts(head, ()), false)?;
    while let Some(frame) = body.frame().await {
        match frame?.into_data() {
            Ok(data) => send.send_data(data, false)?,
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    send.send_trailers(trailers)?;
                    return Ok(());
                }
            }
        }
    }
    send.send_data(Bytes::new(), true)?;
    Ok(())
}

/// Moves a body's frames from `from` to `to`, releasing each frame's window once sent.
async fn copy(from: &mut RecvStream, to: &mut h2::SendStream<Bytes>) -> Result<(), BoxError> {
    while let Some(data) = from.data().await {
        let mut data = data?;
        from.flow_control().release_capacity(data.len())?;
        while !data.is_empty() {
            to.reserve_capacity(data.len());
            let granted = std::future::poll_fn(|cx| to.poll_capacity(cx))
                .await
                .ok_or("h2floor: stream closed")??;
            to.send_data(data.split_to(granted.min(data.len())), false)?;
        }
    }
    match from.trailers().await? {
        Some(trailers) => to.send_trailers(trailers)?,
        None => to.send_data(Bytes::new(), true)?,
    }
    Ok(())
}

/// `/readyz` for the benchmark's readiness wait: every request gets `200 ok` and the connection
/// closes.
async fn admin_server(listener: TcpListener) -> Result<(), BoxError> {
    loop {
        let (mut tcp, _) = listener.accept().await?;
        let mut buf = [0; 1024];
        let _ = tcp.read(&mut buf).await;
        let _ = tcp
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
            .await;
    }
}
