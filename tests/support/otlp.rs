//! An OTLP trace receiver for the tests, over gRPC or HTTP/protobuf, decoding with the
//! official `opentelemetry-proto` definitions. It keeps every span it receives.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// OTLP span kinds.
pub const KIND_SERVER: i32 = 2;
pub const KIND_CLIENT: i32 = 3;
/// `SPAN_KIND_INTERNAL`.
pub const KIND_INTERNAL: i32 = 1;

/// A span as received, flattened.
#[derive(Debug, Clone)]
pub struct Span {
    pub service: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub name: String,
    pub kind: i32,
    pub attributes: BTreeMap<String, String>,
    /// 2 = error.
    pub status_code: i32,
    pub events: Vec<String>,
}

impl Span {
    /// An attribute as text ("" if absent).
    pub fn attr(&self, key: &str) -> &str {
        self.attributes
            .get(key)
            .map(String::as_str)
            .unwrap_or_default()
    }
}

type Store = Arc<Mutex<Vec<Span>>>;

/// A running receiver; stops when dropped.
pub struct Receiver {
    pub addr: SocketAddr,
    spans: Store,
    task: JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    /// A gRPC receiver (`OTEL_EXPORTER_OTLP_PROTOCOL=grpc`).
    pub async fn grpc() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let spans = Store::default();
        let service = TraceServiceServer::new(Sink(spans.clone()));
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await;
        });
        Receiver { addr, spans, task }
    }

    /// An HTTP/protobuf receiver (`POST /v1/traces`).
    pub async fn http() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let spans = Store::default();
        let store = spans.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let store = store.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let store = store.clone();
                        async move { Ok::<_, std::convert::Infallible>(http_export(store, req).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Receiver { addr, spans, task }
    }

    /// The endpoint to give mvproxy in `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().expect("spans lock").clone()
    }

    /// Waits (bounded) until `ok(spans)` holds, returning the spans.
    pub async fn wait_for(&self, what: &str, ok: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let deadline = tokio::time::Instant::now() + super::PATIENCE;
        loop {
            let spans = self.spans();
            if ok(&spans) {
                return spans;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "never received {what}; got {spans:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

struct Sink(Store);

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        keep(&self.0, request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

async fn http_export(store: Store, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let status = if req.uri().path() != "/v1/traces" {
        StatusCode::NOT_FOUND
    } else {
        match req.into_body().collect().await {
            Ok(body) => match ExportTraceServiceRequest::decode(body.to_bytes()) {
                Ok(export) => {
                    keep(&store, export);
                    StatusCode::OK
                }
                Err(_) => StatusCode::BAD_REQUEST,
            },
            Err(_) => StatusCode::BAD_REQUEST,
        }
    };
    let mut resp = Response::new(Full::new(Bytes::from(
        ExportTraceServiceResponse::default().encode_to_vec(),
    )));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        "content-type",
        "application/x-protobuf".parse().expect("static"),
    );
    resp
}

fn keep(store: &Store, export: ExportTraceServiceRequest) {
    let mut out = store.lock().expect("spans lock");
    for rs in export.resource_spans {
        let service = rs
            .resource
            .as_ref()
            .and_then(|r| r.attributes.iter().find(|a| a.key == "service.name"))
            .and_then(|a| a.value.as_ref())
            .map(text)
            .unwrap_or_default();
        for ss in rs.scope_spans {
            for s in ss.spans {
                out.push(Span {
                    service: service.clone(),
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent_span_id: hex(&s.parent_span_id),
                    name: s.name,
                    kind: s.kind,
                    attributes: s
                        .attributes
                        .iter()
                        .map(|a| {
                            (
                                a.key.clone(),
                                a.value.as_ref().map(text).unwrap_or_default(),
                            )
                        })
                        .collect(),
                    status_code: s.status.map(|st| st.code).unwrap_or_default(),
                    events: s.events.into_iter().map(|e| e.name).collect(),
                });
            }
        }
    }
}

fn text(v: &opentelemetry_proto::tonic::common::v1::AnyValue) -> String {
    match &v.value {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
