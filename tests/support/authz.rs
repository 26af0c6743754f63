//! A fake local API server for the admin listener's delegated authentication: it answers
//! `TokenReview` and `SubjectAccessReview` from a fixed table (written here from the API's
//! documentation, not from mvproxy's code), records each review, and 404s everything else
//! (so a proxy in front of it has an empty discovery and is ready).
//!
//! Tokens: `prometheus-token` is the Prometheus ServiceAccount, `nobody-token` a user with no
//! rights; anything else is not authenticated. Allowed: the Prometheus ServiceAccount to `get`
//! `/metrics`, and the user `admin` (a client certificate's CN) to `get` anything.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub const PROMETHEUS: &str = "system:serviceaccount:monitoring:prometheus";

/// A running fake; stopped when dropped or by [`Fake::stop`].
pub struct Fake {
    pub addr: SocketAddr,
    reviews: Arc<Mutex<Vec<String>>>,
    task: JoinHandle<()>,
    connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Fake {
    pub async fn start() -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let reviews: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen = reviews.clone();
        let connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let conns = connections.clone();
        let task = tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                let seen = seen.clone();
                let conn = tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| answer(req, seen.clone()));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(s), service)
                        .await;
                });
                conns.lock().expect("connections").push(conn.abort_handle());
            }
        });
        Fake {
            addr,
            reviews,
            task,
            connections,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The reviews received: `token <token>` or `access <user> <verb> <path>`.
    pub fn reviews(&self) -> Vec<String> {
        self.reviews.lock().expect("reviews").clone()
    }

    /// Stops answering: open connections are closed, new ones refused.
    pub fn stop(&self) {
        self.task.abort();
        for c in self.connections.lock().expect("connections").drain(..) {
            c.abort();
        }
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn answer(
    req: Request<Incoming>,
    seen: Arc<Mutex<Vec<String>>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_owned();
    let post = req.method() == Method::POST;
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let review: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let status = match (post, path.as_str()) {
        (true, "/apis/authentication.k8s.io/v1/tokenreviews") => {
            let token = review["spec"]["token"].as_str().unwrap_or_default();
            seen.lock().expect("reviews").push(format!("token {token}"));
            match token {
                "prometheus-token" => serde_json::json!({"authenticated": true, "user": {
                    "username": PROMETHEUS, "uid": "uid-1",
                    "groups": ["system:serviceaccounts", "system:authenticated"]}}),
                "nobody-token" => serde_json::json!({"authenticated": true, "user": {
                    "username": "nobody", "groups": ["system:authenticated"]}}),
                _ => serde_json::json!({"authenticated": false, "error": "invalid token"}),
            }
        }
        (true, "/apis/authorization.k8s.io/v1/subjectaccessreviews") => {
            let spec = &review["spec"];
            let user = spec["user"].as_str().unwrap_or_default();
            let verb = spec["nonResourceAttributes"]["verb"]
                .as_str()
                .unwrap_or_default();
            let target = spec["nonResourceAttributes"]["path"]
                .as_str()
                .unwrap_or_default();
            seen.lock()
                .expect("reviews")
                .push(format!("access {user} {verb} {target}"));
            let allowed =
                verb == "get" && ((user == PROMETHEUS && target == "/metrics") || user == "admin");
            serde_json::json!({"allowed": allowed, "reason": if allowed { "" } else { "no RBAC policy matched" }})
        }
        _ => {
            let mut r = Response::new(Full::new(Bytes::from_static(b"{}")));
            *r.status_mut() = StatusCode::NOT_FOUND;
            return Ok(r);
        }
    };
    let mut out = review.clone();
    out["status"] = status;
    let mut r = Response::new(Full::new(Bytes::from(out.to_string())));
    *r.status_mut() = StatusCode::CREATED;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    Ok(r)
}
