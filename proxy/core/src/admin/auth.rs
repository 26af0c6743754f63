//! Delegated authentication and authorization of the admin endpoints, as kube-controller-manager
//! and kube-scheduler protect their `/metrics` (k8s.io/apiserver
//! `pkg/server/options/authentication.go`, `authorization.go`): the API server decides.
//!
//! `/debug/discovery` shows peer URLs and errors and `/metrics` the cluster's traffic, so once
//! the admin listener is reachable from the node network it must not be open. With
//! `--admin-tls-cert-file`, every request to a path outside `--admin-always-allow-paths`
//! (default `/healthz,/readyz,/livez`, anonymous as upstream's always-allow paths) must
//! authenticate, by a client certificate verified against `--admin-client-ca-file` (user =
//! CN, groups = O) or by a bearer token the local API server accepts in a `TokenReview`, and
//! be authorized by a `SubjectAccessReview` for `get` on the non-resource path. No
//! credentials or a token the API server rejects: `401`. Not allowed: `403`. The API server
//! cannot be asked: `503` with `Retry-After`, never an open door. Decisions (not failures) are
//! cached for `--admin-auth-cache-ttl-seconds`, as upstream's webhook caches do, in a bounded
//! table keyed by a hash of the token.
//!
//! mvproxy calls the reviews with its own credentials toward the local server: the
//! `--proxy-client-cert-file` certificate and a bearer token from `--admin-auth-token-file`
//! (re-read every time: a projected ServiceAccount token rotates). It needs RBAC to create
//! `tokenreviews` and `subjectaccessreviews` (`system:auth-delegator`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::error::status_body;
use crate::plumbing::full;
use crate::upstream::Upstream;

/// Entries kept in each decision cache; when full, expired ones are dropped, then all.
const CACHE_ENTRIES: usize = 4096;
/// Largest review response read.
const REVIEW_BYTES: usize = 1 << 20;

/// A user as authenticated: by a client certificate or by a `TokenReview`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: Vec<(String, Vec<String>)>,
}

/// Why a request to the admin listener is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    #[error("Unauthorized: {0}")]
    Unauthenticated(String),
    #[error("forbidden: User \"{user}\" cannot {verb} path \"{path}\"{reason}")]
    Forbidden {
        user: String,
        verb: String,
        path: String,
        reason: String,
    },
    #[error("the local API server could not review the request: {0}")]
    Unavailable(String),
}

impl Refusal {
    /// The `Status` answer.
    pub(crate) fn to_response(&self) -> http::Response<Bytes> {
        let (code, reason) = match self {
            Self::Unauthenticated(_) => (StatusCode::UNAUTHORIZED, "Unauthorized"),
            Self::Forbidden { .. } => (StatusCode::FORBIDDEN, "Forbidden"),
            Self::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable"),
        };
        let mut details = serde_json::Map::new();
        if code == StatusCode::SERVICE_UNAVAILABLE {
            details.insert("retryAfterSeconds".to_owned(), 1.into());
        }
        let mut resp = http::Response::new(status_body(code, reason, &self.to_string(), details));
        *resp.status_mut() = code;
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if code == StatusCode::SERVICE_UNAVAILABLE {
            h.insert(header::RETRY_AFTER, HeaderValue::from(1));
        }
        resp
    }
}

/// The settings of delegated admin authentication and authorization.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Paths anyone may get (exact, or a prefix when ending in `*`).
    pub always_allow: Vec<String>,
    /// mvproxy's own bearer token toward the local API server.
    pub token_file: Option<PathBuf>,
    pub cache_ttl: Duration,
}

type Cache<K, V> = Mutex<HashMap<K, (Instant, V)>>;

/// Asks the local API server who a request is and whether it may read a path.
pub(crate) struct AdminAuth {
    api: Upstream,
    settings: Settings,
    tokens: Cache<[u8; 32], Option<User>>,
    decisions: Cache<(User, String, String), Result<(), String>>,
}

impl std::fmt::Debug for AdminAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminAuth")
            .field("api", &self.api)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl AdminAuth {
    pub(crate) fn new(api: Upstream, settings: Settings) -> Self {
        Self {
            api,
            settings,
            tokens: Mutex::default(),
            decisions: Mutex::default(),
        }
    }

    /// Whether `path` needs no authentication.
    pub(crate) fn always_allowed(&self, path: &str) -> bool {
        self.settings
            .always_allow
            .iter()
            .any(|p| match p.strip_suffix('*') {
                Some(prefix) => path.starts_with(prefix),
                None => p == path,
            })
    }

    /// Authenticates and authorizes one request; `cert_user` is the connection's verified
    /// client certificate, if any.
    pub(crate) async fn check(
        &self,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
        cert_user: Option<User>,
    ) -> Result<(), Refusal> {
        if self.always_allowed(path) {
            return Ok(());
        }
        let token = bearer(headers).map(str::to_owned);
        let user = match (cert_user, token) {
            (Some(u), _) => u,
            (None, Some(token)) => self.authenticate(token).await?,
            (None, None) => {
                return Err(Refusal::Unauthenticated(
                    "no client certificate or bearer token".to_owned(),
                ));
            }
        };
        self.authorize(user, verb(method), path.to_owned()).await
    }

    async fn authenticate(&self, token: String) -> Result<User, Refusal> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let cached = cached(&self.tokens, &key, self.settings.cache_ttl);
        let user = match cached {
            Some(u) => u,
            None => {
                let review = json!({
                    "apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenReview",
                    "spec": {"token": token},
                });
                let status = self
                    .review("/apis/authentication.k8s.io/v1/tokenreviews", &review)
                    .await?;
                let user = (status["authenticated"] == true).then(|| user_of(&status["user"]));
                remember(&self.tokens, key, user.clone());
                user
            }
        };
        user.ok_or_else(|| Refusal::Unauthenticated("invalid bearer token".to_owned()))
    }

    async fn authorize(&self, user: User, verb: &'static str, path: String) -> Result<(), Refusal> {
        let key = (user.clone(), verb.to_owned(), path.clone());
        let decision = match cached(&self.decisions, &key, self.settings.cache_ttl) {
            Some(d) => d,
            None => {
                let review = review_of(&user, verb, &path);
                let status = self
                    .review(
                        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                        &review,
                    )
                    .await?;
                let decision = if status["allowed"] == true && status["denied"] != true {
                    Ok(())
                } else {
                    Err(status["reason"].as_str().unwrap_or_default().to_owned())
                };
                remember(&self.decisions, key, decision.clone());
                decision
            }
        };
        decision.map_err(|reason| Refusal::Forbidden {
            user: user.name.clone(),
            verb: verb.to_owned(),
            path,
            reason: if reason.is_empty() {
                String::new()
            } else {
                format!(": {reason}")
            },
        })
    }

    /// POSTs a review and returns its `status`.
    async fn review(&self, target: &'static str, review: &Value) -> Result<Value, Refusal> {
        let unavailable = move |why: String| Refusal::Unavailable(format!("POST {target}: {why}"));
        let mut req = Request::post(target)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json")
            .body(full(Bytes::from(review.to_string())))
            .map_err(|e| unavailable(e.to_string()))?;
        if let Some(file) = &self.settings.token_file {
            let token = std::fs::read_to_string(file)
                .map_err(|e| unavailable(format!("token file {}: {e}", file.display())))?;
            let value = HeaderValue::from_str(&format!("Bearer {}", token.trim()))
                .map_err(|_| unavailable(format!("token file {}: not a token", file.display())))?;
            req.headers_mut().insert(header::AUTHORIZATION, value);
        }
        let resp = self
            .api
            .request(req)
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), REVIEW_BYTES)
            .collect()
            .await
            .map_err(|e| unavailable(e.to_string()))?
            .to_bytes();
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
            return Err(unavailable(format!("HTTP {status}: {text}")));
        }
        let v: Value = serde_json::from_slice(&body)
            .map_err(|e| unavailable(format!("undecodable review: {e}")))?;
        Ok(v["status"].clone())
    }
}

fn cached<K: std::hash::Hash + Eq, V: Clone>(
    cache: &Cache<K, V>,
    key: &K,
    ttl: Duration,
) -> Option<V> {
    let map = cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    map.get(key)
        .filter(|(at, _)| at.elapsed() < ttl)
        .map(|(_, v)| v.clone())
}

fn remember<K: std::hash::Hash + Eq, V>(cache: &Cache<K, V>, key: K, value: V) {
    let mut map = cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if map.len() >= CACHE_ENTRIES {
        let now = Instant::now();
        map.retain(|_, (at, _)| now.duration_since(*at) < Duration::from_secs(60));
        if map.len() >= CACHE_ENTRIES {
            map.clear();
        }
    }
    map.insert(key, (Instant::now(), value));
}

/// A `SubjectAccessReview` asking whether `user` may `verb` the non-resource `path`.
fn review_of(user: &User, verb: &str, path: &str) -> Value {
    let extra: serde_json::Map<String, Value> = user
        .extra
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user.name,
            "uid": user.uid,
            "groups": user.groups,
            "extra": extra,
            "nonResourceAttributes": {"path": path, "verb": verb},
        },
    })
}

/// The bearer token of `Authorization: Bearer …`.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The verb of a non-resource request, as kube-apiserver's RequestInfo names it.
fn verb(method: &Method) -> &'static str {
    match *method {
        Method::GET | Method::HEAD => "get",
        Method::POST => "post",
        Method::PUT => "put",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        Method::OPTIONS => "options",
        _ => "",
    }
}

fn user_of(v: &Value) -> User {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect()
    };
    let mut extra: Vec<(String, Vec<String>)> = v["extra"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, vals)| (k.clone(), strings(vals)))
        .collect();
    extra.sort();
    User {
        name: v["username"].as_str().unwrap_or_default().to_owned(),
        uid: v["uid"].as_str().unwrap_or_default().to_owned(),
        groups: strings(&v["groups"]),
        extra,
    }
}

/// The user a verified client certificate names: CN, and one group per O (plus
/// `system:authenticated`, as kube-apiserver adds).
pub(crate) fn cert_user(name: String, mut groups: Vec<String>) -> User {
    groups.push("system:authenticated".to_owned());
    User {
        name,
        uid: String::new(),
        groups,
        extra: Vec::new(),
    }
}
