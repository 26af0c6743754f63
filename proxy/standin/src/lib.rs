//! A stand-in Kubernetes API server, for end-to-end tests and the demo.
//!
//! mvproxy's behaviour only shows against real servers: it negotiates discovery by `Accept`,
//! passes aggregated documents through byte for byte, streams watches and tunnels
//! `Upgrade` requests. Running kube-apiserver (with etcd) in every test is slow and
//! platform-bound, and a mock that answers canned strings would not exercise any of that. So
//! this is a small real HTTP server on a loopback socket that `kubectl` itself can talk to.
//!
//! What it fakes, as kube-apiserver does it:
//! - discovery: the `/apis` document it is given (served unchanged for aggregated v2), a
//!   built-in core/v1 surface at `/api`, and the legacy documents derived from both, chosen by
//!   `Accept` (optionally legacy only, like a pre-1.26 server);
//! - an in-memory object store for every resource its discovery lists: list, get, create,
//!   update (PUT), delete and watch, with uids, a server-wide resourceVersion and
//!   `creationTimestamp`, and kube's `Status` bodies for errors; a delete of an object with
//!   finalizers only sets its `deletionTimestamp` (and answers with it), as kube's does;
//! - `Upgrade` on subresources (exec, attach, portforward): `101`, then the tunnel echoes;
//! - `/healthz`, `/readyz`, `/livez`, `/version`.
//!
//! What it does not: authentication, authorization, admission (namespaces need not exist),
//! PATCH, validation, defaulting, conversion between versions (an object is stored per group
//! and resource and shown with the requested version's `apiVersion`), label selectors,
//! server-side printing (`as=Table`), OpenAPI, protobuf/YAML/CBOR, watch bookmarks, and the
//! SPDY/WebSocket framing inside a tunnel. Every response names the server in
//! `x-standin-server`, and every request is recorded so tests can see what reached which
//! server. A request with `x-standin-delay-ms: N` is answered after N ms (a slow server).

#![warn(missing_docs, unreachable_pub)]

mod catalog;
mod core_v1;
mod discovery;
mod documents;
mod handler;
mod input;
mod openapi;
mod protobuf;
mod respond;
mod store;
mod stream;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use http::HeaderValue;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use catalog::Catalog;
pub use core_v1::core_group;
pub use discovery::{
    ApiGroupDiscovery, ApiGroupDiscoveryList, ApiResourceDiscovery, ApiSubresourceDiscovery,
    ApiVersionDiscovery, GroupVersionKind, ObjectMeta,
};
use documents::Documents;
use store::Store;

/// Response header naming the server that answered.
pub const SERVER_HEADER: &str = "x-standin-server";

/// Request header asking the stand-in to wait this many milliseconds (at most
/// [`MAX_DELAY_MS`]) before it answers: a slow API server, for checks of what mvproxy and
/// the collector do with slow requests (scripts/conformance/telemetry_pack.py).
pub const DELAY_HEADER: &str = "x-standin-delay-ms";

/// The longest delay [`DELAY_HEADER`] can ask for.
pub const MAX_DELAY_MS: u64 = 10_000;

/// Builder of a stand-in server.
#[derive(Debug, Clone)]
pub struct StandIn {
    name: String,
    apis_json: String,
    apis: ApiGroupDiscoveryList,
    legacy_only: bool,
    git_version: String,
    deprecations: Vec<(String, HeaderValue)>,
    undecodable: Vec<Undecodable>,
}

/// Why [`StandIn::group_of`] could not take a group from another discovery document.
#[derive(Debug)]
pub enum GroupOfError {
    /// The document is not JSON, or the result is not an `APIGroupDiscoveryList`.
    Json(serde_json::Error),
    /// The document has no entry for the group.
    NotServed(String),
}

impl std::fmt::Display for GroupOfError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Json(e) => write!(f, "not an aggregated discovery document: {e}"),
            Self::NotServed(group) => write!(f, "the document does not serve {group:?}"),
        }
    }
}

impl std::error::Error for GroupOfError {}

impl From<serde_json::Error> for GroupOfError {
    fn from(e: serde_json::Error) -> Self {
        Self::Json(e)
    }
}

/// A started stand-in; dropping it stops the server without waiting.
#[derive(Debug)]
pub struct Running {
    /// The bound address (the real port when started on port 0).
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    accept: Option<JoinHandle<()>>,
    /// Closes when every task holding a [`TaskGuard`] has ended.
    tasks_done: mpsc::Receiver<()>,
}

/// One request as the stand-in received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// `GET`, `POST`, …
    pub method: http::Method,
    /// The request target as sent, e.g. `/api/v1/pods?limit=500`.
    pub path_and_query: String,
    /// Every request header, repeated ones included.
    pub headers: http::HeaderMap,
}

/// A resource whose stored objects this server cannot decode ([`StandIn::undecodable`]).
#[derive(Debug, Clone)]
struct Undecodable {
    /// The version they are stored at, `group/version` (`v1` for core).
    group_version: String,
    resource: String,
    kind: String,
}

impl Undecodable {
    /// The group of the stored version (`""` for core).
    fn group(&self) -> &str {
        self.group_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }
}

/// State shared by every connection of one server.
#[derive(Debug)]
struct Shared {
    name: HeaderValue,
    git_version: String,
    /// `(group/version, Warning header)`: the header every resource request of the
    /// group-version is answered with.
    deprecations: Vec<(String, HeaderValue)>,
    /// Resources whose reads fail as if their objects were stored at a version this server's
    /// scheme lacks.
    undecodable: Vec<Undecodable>,
    catalog: Catalog,
    documents: Documents,
    openapi: openapi::OpenApiDocs,
    store: Store,
    requests: Mutex<Vec<RecordedRequest>>,
    shutdown: watch::Receiver<bool>,
}

/// Held by every task the server spawns; [`Running::shutdown`] waits until all are dropped.
type TaskGuard = mpsc::Sender<()>;

// === impl StandIn ===

impl StandIn {
    /// `name` identifies the server in logs and in the `x-standin-server` response header it
    /// adds to every response. `apis_json`: an aggregated v2 `APIGroupDiscoveryList` for `/apis`.
    pub fn new(name: &str, apis_json: &str) -> Result<Self, serde_json::Error> {
        Ok(Self {
            name: name.to_owned(),
            apis_json: apis_json.to_owned(),
            apis: serde_json::from_str(apis_json)?,
            legacy_only: false,
            git_version: "v1.34.0-standin".to_owned(),
            deprecations: Vec::new(),
            undecodable: Vec::new(),
        })
    }

    /// Answers every resource request of `group_version` (`flowcontrol.apiserver.k8s.io/v1beta3`,
    /// `v1` for core) with `Warning: 299 - "TEXT"`, as kube-apiserver warns about a deprecated
    /// API (`staging/src/k8s.io/apiserver/pkg/endpoints/deprecation` in kubernetes/kubernetes);
    /// `text` is the message, e.g. `flowcontrol.apiserver.k8s.io/v1beta3 FlowSchema is
    /// deprecated in v1.29+, unavailable in v1.32+; use flowcontrol.apiserver.k8s.io/v1 FlowSchema`.
    /// Characters a header cannot carry become `_`.
    pub fn deprecation_warning(mut self, group_version: &str, text: &str) -> Self {
        let quoted = text.replace(['"', '\\'], "'");
        self.deprecations.push((
            group_version.to_owned(),
            header_value(&format!("299 - \"{quoted}\"")),
        ));
        self
    }

    /// Answers every read (get, list) of `resource` in `stored_group_version`'s group, at any
    /// version, with the `500` kube-apiserver sends when an object in storage was written at a
    /// version its scheme no longer has (1.37 reading PodGroups 1.36 stored at
    /// `scheduling.k8s.io/v1alpha2`): `StorageError: corrupt object ... object not decodable
    /// ...: no kind "KIND" is registered for version "GROUP/VERSION"` (the message of
    /// `k8s.io/apiserver/pkg/storage` `NewCorruptObjError` around the scheme's
    /// `NewNotRegisteredErrForKind`).
    pub fn undecodable(mut self, stored_group_version: &str, resource: &str, kind: &str) -> Self {
        self.undecodable.push(Undecodable {
            group_version: stored_group_version.to_owned(),
            resource: resource.to_owned(),
            kind: kind.to_owned(),
        });
        self
    }

    /// Serves `group` as `other_apis_json` (another server's aggregated
    /// `APIGroupDiscoveryList`) describes it, replacing this server's entry for the group or
    /// adding it: a 1.34 surface that also serves kube-apiserver 1.36.3's `scheduling.k8s.io`.
    pub fn group_of(mut self, other_apis_json: &str, group: &str) -> Result<Self, GroupOfError> {
        let named = |v: &serde_json::Value| v["metadata"]["name"] == group;
        let other: serde_json::Value = serde_json::from_str(other_apis_json)?;
        let entry = other["items"]
            .as_array()
            .and_then(|items| items.iter().find(|i| named(i)))
            .ok_or_else(|| GroupOfError::NotServed(group.to_owned()))?
            .clone();
        let mut apis: serde_json::Value = serde_json::from_str(&self.apis_json)?;
        if let Some(items) = apis["items"].as_array_mut() {
            items.retain(|i| !named(i));
            items.push(entry);
        }
        self.apis_json = apis.to_string();
        self.apis = serde_json::from_str(&self.apis_json)?;
        Ok(self)
    }

    /// Serve only legacy discovery (like a pre-1.26 server): aggregated Accept gets legacy JSON.
    pub fn legacy_only(mut self) -> Self {
        self.legacy_only = true;
        self
    }

    /// The `gitVersion` reported at `/version` (`major`/`minor` are taken from it), so a demo
    /// can show which release each server pretends to be. Defaults to `v1.34.0-standin`.
    pub fn git_version(mut self, git_version: &str) -> Self {
        git_version.clone_into(&mut self.git_version);
        self
    }

    /// Bind on `addr` (tests use `127.0.0.1:0`) and serve in a background task.
    pub async fn start(self, addr: SocketAddr) -> std::io::Result<Running> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let (guard, tasks_done) = mpsc::channel(1);
        let catalog = Catalog::new(self.apis.items, core_v1::core_group());
        let documents = Documents::new(
            self.apis_json.into_bytes(),
            &catalog,
            self.legacy_only,
            addr,
        );
        let openapi = openapi::OpenApiDocs::new(&catalog, &self.name);
        let shared = Arc::new(Shared {
            name: header_value(&self.name),
            git_version: self.git_version,
            deprecations: self.deprecations,
            undecodable: self.undecodable,
            catalog,
            documents,
            openapi,
            store: Store::default(),
            requests: Mutex::new(Vec::new()),
            shutdown: shutdown_rx,
        });
        tracing::info!(server = %self.name, %addr, "stand-in API server listening");
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&shared), guard));
        Ok(Running {
            addr,
            shared,
            shutdown: shutdown_tx,
            accept: Some(accept),
            tasks_done,
        })
    }
}

/// The name as a header value; characters a header cannot carry become `_`.
fn header_value(name: &str) -> HeaderValue {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    HeaderValue::from_str(&clean).unwrap_or(HeaderValue::from_static("standin"))
}

// === impl Running ===

impl Running {
    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received, in order of arrival.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.recorded().clone()
    }

    /// Stores `object` as if created through the API (uid, resourceVersion and
    /// creationTimestamp are filled in when missing; an existing object of that name is
    /// replaced) and notifies watchers. `namespace` defaults to the object's own or `default`
    /// for namespaced resources and is ignored for cluster-scoped ones.
    pub fn insert(
        &self,
        group: &str,
        version: &str,
        resource: &str,
        namespace: Option<&str>,
        object: serde_json::Value,
    ) {
        let target = self.shared.catalog.target(group, version, resource);
        if let Err(error) = self.shared.store.upsert(&target, namespace, object) {
            tracing::warn!(%error, group, version, resource, "stand-in insert ignored");
        }
    }

    /// Stops accepting, closes every connection (open watches and tunnels included) and
    /// returns once the port is released and every server task has ended.
    pub async fn shutdown(mut self) {
        self.shutdown.send_replace(true);
        if let Some(accept) = self.accept.take()
            && let Err(error) = accept.await
        {
            tracing::warn!(%error, "stand-in accept loop failed");
        }
        while self.tasks_done.recv().await.is_some() {}
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
    }
}

// === impl Shared ===

impl Shared {
    /// The request log; a panic elsewhere while it was held leaves it usable.
    fn recorded(&self) -> std::sync::MutexGuard<'_, Vec<RecordedRequest>> {
        self.requests.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Resolves once shutdown has begun (or the [`Running`] handle is gone).
    async fn stopping(&self) {
        let mut shutdown = self.shutdown.clone();
        // An error means the sender was dropped, which also means stop.
        let _ = shutdown.wait_for(|stop| *stop).await;
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, guard: TaskGuard) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(serve_connection(stream, Arc::clone(&shared), guard.clone()));
                }
                Err(error) => {
                    // Typically fd exhaustion; back off instead of spinning.
                    tracing::warn!(%error, "stand-in accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            () = shared.stopping() => break,
        }
    }
}

async fn serve_connection(stream: TcpStream, shared: Arc<Shared>, guard: TaskGuard) {
    if let Err(error) = stream.set_nodelay(true) {
        tracing::debug!(%error, "stand-in set_nodelay failed");
    }
    let service = {
        let shared = Arc::clone(&shared);
        let guard = guard.clone();
        hyper::service::service_fn(move |req| {
            let (shared, guard) = (Arc::clone(&shared), guard.clone());
            async move { Ok::<_, std::convert::Infallible>(handler::handle(shared, guard, req).await) }
        })
    };
    let builder = auto::Builder::new(TokioExecutor::new());
    let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
    // Dropping the connection future on shutdown closes the socket, which also ends a
    // watch or a pending upgrade on it; a graceful shutdown would wait for watches forever.
    tokio::select! {
        served = connection => {
            if let Err(error) = served {
                tracing::debug!(%error, "stand-in connection ended with an error");
            }
        }
        () = shared.stopping() => {}
    }
    drop(guard);
}
