//! Request routing: health, version, discovery, resources, watches and upgrades.
//!
//! Paths are split the way kube's `RequestInfo` does it (`/api/v1/...` or
//! `/apis/{g}/{v}/...`, then an optional `namespaces/{ns}` prefix, then
//! `resource[/name[/subresource]]`), so a path outside every served group-version gets Go's
//! plain-text 404 and a resource outside discovery gets the `Status` 404.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde::Serialize;
use serde_json::Value;

use crate::discovery::{ApiResourceDiscovery, ApiSubresourceDiscovery};

use super::catalog::Target;
use super::input::{apply_field_selector, is_watch, query_param, read_json};
use super::respond::{self, Body, Details, Status};
use super::store::{Selector, StoreError};
use super::{
    DELAY_HEADER, MAX_DELAY_MS, RecordedRequest, SERVER_HEADER, Shared, TaskGuard, documents,
    stream,
};

/// The subresources that only make sense as a stream (`Upgrade`).
const STREAMING: &[&str] = &["attach", "exec", "portforward"];

/// A resource path after the group-version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ResourcePath<'a> {
    namespace: Option<&'a str>,
    resource: &'a str,
    name: Option<&'a str>,
    subresource: Option<&'a str>,
}

/// One resource request, resolved against discovery.
struct Call<'a> {
    shared: &'a Shared,
    target: Target,
    entry: &'a ApiResourceDiscovery,
    namespace: Option<&'a str>,
}

/// A list body, fields in kube's order.
#[derive(Serialize)]
struct List {
    kind: String,
    #[serde(rename = "apiVersion")]
    api_version: String,
    metadata: ListMeta,
    items: Vec<Value>,
}

#[derive(Serialize)]
struct ListMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: String,
}

/// Records the request, answers it and names the server on the response.
pub(super) async fn handle(
    shared: Arc<Shared>,
    guard: TaskGuard,
    req: Request<Incoming>,
) -> Response<Body> {
    record(&shared, &req);
    let warning = deprecation(&shared, req.uri().path());
    if let Some(ms) = delay_ms(req.headers()) {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
    let mut response = route(&shared, guard, req).await;
    response
        .headers_mut()
        .insert(SERVER_HEADER, shared.name.clone());
    if let Some(warning) = warning {
        response
            .headers_mut()
            .append(http::header::WARNING, warning);
    }
    response
}

/// The deprecation warning of the group-version a resource request addresses, if any.
fn deprecation(shared: &Shared, path: &str) -> Option<HeaderValue> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let gv = match segments.as_slice() {
        ["api", version, _, ..] => (*version).to_owned(),
        ["apis", group, version, _, ..] => format!("{group}/{version}"),
        _ => return None,
    };
    shared
        .deprecations
        .iter()
        .find(|(g, _)| *g == gv)
        .map(|(_, h)| h.clone())
}

/// The delay a request asks for with [`DELAY_HEADER`], capped; none when absent or not a
/// number.
fn delay_ms(headers: &http::HeaderMap) -> Option<u64> {
    let ms: u64 = headers
        .get(DELAY_HEADER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(ms.min(MAX_DELAY_MS))
}

fn record(shared: &Shared, req: &Request<Incoming>) {
    let path_and_query = req
        .uri()
        .path_and_query()
        .map_or_else(|| req.uri().path().to_owned(), |pq| pq.as_str().to_owned());
    shared.recorded().push(RecordedRequest {
        method: req.method().clone(),
        path_and_query,
        headers: req.headers().clone(),
    });
}

async fn route(shared: &Shared, guard: TaskGuard, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_owned();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let catalog = &shared.catalog;
    let is_read = matches!(*req.method(), Method::GET | Method::HEAD);
    match segments.as_slice() {
        ["healthz" | "readyz" | "livez"] => respond::text(StatusCode::OK, "ok"),
        ["version"] => version(&shared.git_version),
        ["api"] if is_read => shared.documents.api(req.headers()),
        ["apis"] if is_read => shared.documents.apis(req.headers()),
        ["apis", group] if is_read => {
            documents::group(catalog, group).unwrap_or_else(respond::page_not_found)
        }
        ["api", version] if is_read => {
            documents::resources(catalog, "", version).unwrap_or_else(respond::page_not_found)
        }
        ["apis", group, version] if is_read => {
            documents::resources(catalog, group, version).unwrap_or_else(respond::page_not_found)
        }
        ["api" | "apis"] | ["apis", _] | ["api", _] | ["apis", _, _] => {
            respond::method_not_allowed()
        }
        ["api", version, rest @ ..] => {
            resource_request(shared, guard, req, "", version, rest).await
        }
        ["apis", group, version, rest @ ..] => {
            resource_request(shared, guard, req, group, version, rest).await
        }
        ["openapi", "v2"] if is_read => shared.openapi.v2(req.headers()),
        ["openapi", "v3"] if is_read => shared.openapi.index(req.headers()),
        ["openapi", "v3", rest @ ..] if is_read => {
            shared
                .openapi
                .document(&rest.join("/"), req.uri().query(), req.headers())
        }
        _ => respond::page_not_found(),
    }
}

async fn resource_request(
    shared: &Shared,
    guard: TaskGuard,
    req: Request<Incoming>,
    group: &str,
    version: &str,
    rest: &[&str],
) -> Response<Body> {
    if shared.catalog.version(group, version).is_none() {
        return respond::page_not_found();
    }
    let Some(path) = parse_resource_path(rest) else {
        return respond::not_served();
    };
    let Some((target, entry)) = shared.catalog.resource(group, version, path.resource) else {
        return respond::not_served();
    };
    if matches!(*req.method(), Method::GET | Method::HEAD)
        && let Some(u) = shared
            .undecodable
            .iter()
            .find(|u| u.group() == group && u.resource == path.resource)
    {
        return respond::undecodable(u, path.namespace, path.name);
    }
    // A cluster-scoped resource under `namespaces/{ns}/` is not a route kube registers.
    if !target.namespaced && path.namespace.is_some() && path.resource != "namespaces" {
        return respond::not_served();
    }
    let call = Call {
        shared,
        target,
        entry,
        namespace: path.namespace,
    };
    match (path.name, path.subresource) {
        (None, _) => call.collection(guard, req).await,
        (Some(name), None) => call.object(req, name).await,
        (Some(name), Some(sub)) => call.subresource(guard, req, name, sub),
    }
}

/// Splits `[namespaces/{ns}/]resource[/name[/subresource[/...]]]`. As in kube,
/// `namespaces/{ns}/status` and `/finalize` are subresources of the namespace itself.
fn parse_resource_path<'a>(rest: &[&'a str]) -> Option<ResourcePath<'a>> {
    let (namespace, parts) = match rest {
        ["namespaces", ns, next, ..] if !matches!(*next, "status" | "finalize") => {
            (Some(*ns), &rest[2..])
        }
        ["namespaces", ns, ..] => (Some(*ns), rest),
        _ => (None, rest),
    };
    Some(ResourcePath {
        namespace,
        resource: parts.first()?,
        name: parts.get(1).copied(),
        subresource: parts.get(2).copied(),
    })
}

// === impl Call ===

impl Call<'_> {
    fn allows(&self, verb: &str) -> bool {
        self.entry.verbs.iter().any(|v| v == verb)
    }

    /// A namespaced resource addressed by name needs a namespace in the path.
    fn scoped(&self) -> bool {
        !self.target.namespaced || self.namespace.is_some()
    }

    fn selector(&self) -> Selector {
        Selector {
            group: self.target.group.clone(),
            resource: self.target.resource.clone(),
            namespace: self
                .namespace
                .filter(|_| self.target.namespaced)
                .map(str::to_owned),
            name: None,
        }
    }

    async fn collection(&self, guard: TaskGuard, req: Request<Incoming>) -> Response<Body> {
        let query = req.uri().query().unwrap_or_default().to_owned();
        match *req.method() {
            Method::GET if is_watch(&query) && self.allows("watch") => self.watch(guard, &query),
            Method::GET if !is_watch(&query) && self.allows("list") => self.list(&query),
            Method::POST if !self.scoped() => respond::not_served(),
            Method::POST if self.allows("create") => self.create(req).await,
            _ => respond::method_not_allowed(),
        }
    }

    async fn object(&self, req: Request<Incoming>, name: &str) -> Response<Body> {
        if !self.scoped() {
            return respond::not_served();
        }
        match *req.method() {
            Method::GET | Method::HEAD if self.allows("get") => self.get(name),
            Method::PUT if self.allows("update") => self.update(req, name).await,
            Method::DELETE if self.allows("delete") => self.delete(name),
            _ => respond::method_not_allowed(),
        }
    }

    fn subresource(
        &self,
        guard: TaskGuard,
        req: Request<Incoming>,
        name: &str,
        sub: &str,
    ) -> Response<Body> {
        let Some(entry) = self
            .entry
            .subresources
            .iter()
            .find(|s| s.subresource == sub)
        else {
            return respond::not_served();
        };
        if !self.scoped() {
            return respond::not_served();
        }
        if stream::is_upgrade(&req) {
            return stream::upgrade(self.shared.shutdown.clone(), guard, req);
        }
        if STREAMING.contains(&sub) {
            return respond::bad_request("Upgrade request required".to_owned());
        }
        let readable = entry.verbs.iter().any(|v| v == "get")
            && matches!(*req.method(), Method::GET | Method::HEAD);
        match self.shared.store.get(&self.target, self.namespace, name) {
            _ if !readable => respond::method_not_allowed(),
            None => self.store_error(StoreError::NotFound(name.to_owned())),
            // No containers run here, so there is never any log.
            Some(_) if sub == "log" => respond::text(StatusCode::OK, ""),
            Some(object) if self.shows_parent(entry) => {
                respond::json(StatusCode::OK, &self.present(object))
            }
            Some(_) => respond::method_not_allowed(),
        }
    }

    /// Whether a subresource's response is the object itself (`status` and the like).
    fn shows_parent(&self, entry: &ApiSubresourceDiscovery) -> bool {
        entry.response_kind.as_ref().is_some_and(|k| {
            k.kind == self.target.kind && k.group.is_empty() && k.version.is_empty()
        })
    }

    fn list(&self, query: &str) -> Response<Body> {
        let mut selector = self.selector();
        apply_field_selector(&mut selector, query);
        let (items, revision) = self.shared.store.list(&selector);
        let body = List {
            kind: format!("{}List", self.target.kind),
            api_version: self.target.api_version(),
            metadata: ListMeta {
                resource_version: revision.to_string(),
            },
            items: items.into_iter().map(|o| self.present(o)).collect(),
        };
        respond::json(StatusCode::OK, &body)
    }

    fn get(&self, name: &str) -> Response<Body> {
        match self.shared.store.get(&self.target, self.namespace, name) {
            Some(object) => respond::json(StatusCode::OK, &self.present(object)),
            None => self.store_error(StoreError::NotFound(name.to_owned())),
        }
    }

    async fn create(&self, req: Request<Incoming>) -> Response<Body> {
        let object = match read_json(req).await {
            Ok(object) => object,
            Err(response) => return response,
        };
        match self
            .shared
            .store
            .create(&self.target, self.namespace, object)
        {
            Ok(created) => respond::json(StatusCode::CREATED, &self.present(created)),
            Err(error) => self.store_error(error),
        }
    }

    async fn update(&self, req: Request<Incoming>, name: &str) -> Response<Body> {
        let object = match read_json(req).await {
            Ok(object) => object,
            Err(response) => return response,
        };
        match self
            .shared
            .store
            .update(&self.target, self.namespace, name, object)
        {
            Ok(updated) => respond::json(StatusCode::OK, &self.present(updated)),
            Err(error) => self.store_error(error),
        }
    }

    fn delete(&self, name: &str) -> Response<Body> {
        match self.shared.store.delete(&self.target, self.namespace, name) {
            Some(deleted) => respond::json(StatusCode::OK, &self.present(deleted)),
            None => self.store_error(StoreError::NotFound(name.to_owned())),
        }
    }

    /// A watch: see [`stream::watch`].
    fn watch(&self, guard: TaskGuard, query: &str) -> Response<Body> {
        let mut selector = self.selector();
        apply_field_selector(&mut selector, query);
        let since = query_param(query, "resourceVersion").and_then(|rv| rv.parse().ok());
        let timeout = query_param(query, "timeoutSeconds")
            .and_then(|s| s.parse().ok())
            .map(Duration::from_secs);
        let start = self.shared.store.watch(&selector, since);
        let stopping = self.shared.shutdown.clone();
        stream::watch(
            self.target.clone(),
            selector,
            timeout,
            start,
            stopping,
            guard,
        )
    }

    /// The object as this group-version shows it.
    fn present(&self, object: Value) -> Value {
        self.target.present(object)
    }

    /// kube's `Status` for a refused write or a missing object.
    fn store_error(&self, error: StoreError) -> Response<Body> {
        let qualified = self.target.qualified();
        let details = |name: String| Details {
            name: Some(name),
            group: Some(self.target.group.clone()).filter(|g| !g.is_empty()),
            kind: Some(self.target.resource.clone()),
        };
        let (code, reason, message, details) = match error {
            StoreError::NotFound(name) => (
                StatusCode::NOT_FOUND,
                "NotFound",
                format!("{qualified} {name:?} not found"),
                details(name),
            ),
            StoreError::AlreadyExists(name) => (
                StatusCode::CONFLICT,
                "AlreadyExists",
                format!("{qualified} {name:?} already exists"),
                details(name),
            ),
            StoreError::Invalid(message) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                format!("{} is invalid: {message}", self.target.kind),
                Details::default(),
            ),
            StoreError::Mismatch(message) => (
                StatusCode::BAD_REQUEST,
                "BadRequest",
                message,
                Details::default(),
            ),
        };
        Status::failure(code, reason, message)
            .with_details(details)
            .into_response()
    }
}

/// `/version`, in the shape of `version.Info`.
fn version(git_version: &str) -> Response<Body> {
    #[derive(Serialize)]
    struct Info<'a> {
        major: &'a str,
        minor: &'a str,
        #[serde(rename = "gitVersion")]
        git_version: &'a str,
        #[serde(rename = "gitCommit")]
        git_commit: &'a str,
        #[serde(rename = "gitTreeState")]
        git_tree_state: &'a str,
        #[serde(rename = "buildDate")]
        build_date: &'a str,
        #[serde(rename = "goVersion")]
        go_version: &'a str,
        compiler: &'a str,
        platform: &'a str,
    }
    let mut numbers = git_version.trim_start_matches('v').split(['.', '-', '+']);
    let major = numbers.next().unwrap_or_default();
    let minor = numbers.next().unwrap_or_default();
    respond::json(
        StatusCode::OK,
        &Info {
            major,
            minor,
            git_version,
            git_commit: "0000000000000000000000000000000000000000",
            git_tree_state: "clean",
            build_date: "1970-01-01T00:00:00Z",
            go_version: "go1.24.0",
            compiler: "gc",
            platform: "linux/amd64",
        },
    )
}

#[cfg(test)]
mod delay_tests {
    use super::*;

    #[test]
    fn delay_header_is_read_capped_and_ignored_when_not_a_number() {
        let with = |v: &str| {
            let mut h = http::HeaderMap::new();
            h.insert(
                DELAY_HEADER,
                http::HeaderValue::from_str(v).expect("header"),
            );
            delay_ms(&h)
        };
        assert_eq!(delay_ms(&http::HeaderMap::new()), None);
        assert_eq!(with("600"), Some(600));
        assert_eq!(with(" 5 "), Some(5));
        assert_eq!(with("soon"), None);
        assert_eq!(with("-1"), None);
        assert_eq!(with("99999999"), Some(MAX_DELAY_MS));
    }
}
