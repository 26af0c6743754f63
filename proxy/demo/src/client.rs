//! The demo's HTTP client: sends one planned request to a proxy and says who answered.
//!
//! Every stand-in API server names itself in `x-standin-server`, so the answer alone tells
//! whether the picked node's own server answered (served locally), another node's did
//! (rerouted by mvproxy), or none did (mvproxy answered itself: merged discovery, a `503`).
//! The client keeps connections alive per proxy like a controller's client-go does, bounds
//! every request in time, and leaves a watch after its first event, so that a phase ends
//! when its requests do.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE, ETAG, IF_NONE_MATCH, USER_AGENT};
use http::{HeaderValue, Request as HttpRequest};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::catalog::ApiResource;
use super::plan::NODES;
use super::workload::{Request, Verb};
use mvproxy_core::discovery::types::CONTENT_TYPE_V2;
use mvproxy_standin::SERVER_HEADER;

/// Longest a request may take, headers and body.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a watch is read for its first event before the client leaves.
const WATCH_FIRST_EVENT: Duration = Duration::from_secs(1);
/// Largest body read for a scrape (one proxy's metrics are a few tens of kB).
const MAX_SCRAPE: usize = 8 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientError {
    #[error("building the request: {0}")]
    Build(#[from] http::Error),
    #[error("{0}")]
    Transport(#[from] hyper_util::client::legacy::Error),
    #[error("reading the body: {0}")]
    Body(#[from] hyper::Error),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("{url} answered {status}")]
    Status { url: String, status: u16 },
    #[error("reading {url}: {source}")]
    Read {
        url: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("reading {url}: {source}")]
    Decode {
        url: String,
        source: serde_json::Error,
    },
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    /// The stand-in that answered (`x-standin-server`), if one did.
    pub(crate) answered_by: Option<String>,
    /// To the end of the body; to the response headers for a watch.
    pub(crate) latency: Duration,
}

/// A pooled client for the proxies, with each proxy's last discovery `ETag`.
pub(crate) struct Client {
    http: HyperClient<HttpConnector, Full<Bytes>>,
    etags: Mutex<[Option<HeaderValue>; NODES]>,
}

impl Client {
    pub(crate) fn new() -> Arc<Self> {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        let http = HyperClient::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Arc::new(Self {
            http,
            etags: Mutex::new(Default::default()),
        })
    }

    /// Sends `req` to the proxy at `base` (`http://127.0.0.1:PORT`).
    pub(crate) async fn send(
        &self,
        base: &str,
        req: &Request,
        resources: &[ApiResource],
    ) -> Result<Answer, ClientError> {
        let started = Instant::now();
        let mut builder = HttpRequest::builder()
            .method(req.method())
            .uri(format!("{base}{}", req.path(resources)))
            .header(USER_AGENT, req.agent(resources).user_agent());
        match req.verb {
            Verb::Discovery => {
                builder = builder.header(ACCEPT, CONTENT_TYPE_V2);
                if let Some(etag) = self.etag(req.node) {
                    builder = builder.header(IF_NONE_MATCH, etag);
                }
            }
            Verb::Create => {
                builder = builder
                    .header(ACCEPT, "application/json")
                    .header(CONTENT_TYPE, "application/json");
            }
            Verb::List | Verb::Get | Verb::Watch => {
                builder = builder.header(ACCEPT, "application/json");
            }
        }
        let body = req.body(resources).unwrap_or_default();
        let request = builder.body(Full::new(body))?;
        let exchange = async {
            let response = self.http.request(request).await?;
            let status = response.status().as_u16();
            let answered_by = response
                .headers()
                .get(SERVER_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            if req.verb == Verb::Discovery
                && status == 200
                && let Some(etag) = response.headers().get(ETAG)
            {
                self.set_etag(req.node, etag.clone());
            }
            let mut body = response.into_body();
            let latency = if req.verb == Verb::Watch {
                let at_headers = started.elapsed();
                // The first event (or the end, or nothing in time) is enough; leaving closes
                // the watch on every hop, as a controller's informer does on resync.
                let _ = tokio::time::timeout(WATCH_FIRST_EVENT, body.frame()).await;
                at_headers
            } else {
                body.collect().await?;
                started.elapsed()
            };
            Ok::<_, ClientError>(Answer {
                status,
                answered_by,
                latency,
            })
        };
        tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| ClientError::Timeout(REQUEST_TIMEOUT))?
    }

    /// `GET url` as text, for `/metrics` and `/debug/discovery`; a non-200 is an error.
    pub(crate) async fn get_text(&self, url: &str) -> Result<String, ClientError> {
        let request = HttpRequest::get(url)
            .header(USER_AGENT, "mvproxy-demo")
            .body(Full::new(Bytes::new()))?;
        let exchange = async {
            let response = self.http.request(request).await?;
            let status = response.status().as_u16();
            let body = http_body_util::Limited::new(response.into_body(), MAX_SCRAPE)
                .collect()
                .await
                .map_err(|source| ClientError::Read {
                    url: url.to_owned(),
                    source,
                })?
                .to_bytes();
            if status != 200 {
                return Err(ClientError::Status {
                    url: url.to_owned(),
                    status,
                });
            }
            Ok(String::from_utf8_lossy(&body).into_owned())
        };
        tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| ClientError::Timeout(REQUEST_TIMEOUT))?
    }

    fn etag(&self, node: usize) -> Option<HeaderValue> {
        let etags = self.etags.lock().unwrap_or_else(PoisonError::into_inner);
        etags.get(node).cloned().flatten()
    }

    fn set_etag(&self, node: usize, etag: HeaderValue) {
        let mut etags = self.etags.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = etags.get_mut(node) {
            *slot = Some(etag);
        }
    }
}
