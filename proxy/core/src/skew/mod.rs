//! Clients of the skew, from live traffic: which clients depend on the APIs the skew takes away.
//!
//! An upgrade rehearsal exists to answer "what will break?". mvproxy sees every request and
//! knows which server serves which GVR, so it can answer per client while the rehearsal runs:
//! for each request whose GVR not every server serves, it records who sent it (from the
//! `User-Agent`, [`agent`]) and which side of the skew serves the GVR (from each server's
//! `/version`, [`crate::discovery::side`]), in a bounded registry ([`clients`]) and in
//! `mvproxy_skew_requests_total`. `/debug/clients` on the admin listener shows, per client,
//! the GVRs that break after the upgrade and those that break on a rollback.
//!
//! Each request is counted once, by the proxy the client talked to: a request that arrives
//! over the peer hop (`x-kubernetes-peer-proxied: true`) was counted by the proxy that sent it.
//! A GVR that no server serves is not in the skew and not counted (the client gets the API
//! server's own 404).
//!
//! Told the release the upgrade heads for ([`crate::target`]), it also counts, from the first
//! request and with every server still on the old release, the requests for GVRs that release
//! does not serve (`mvproxy_target_missing_requests_total`, `breaks_on_target` in
//! `/debug/clients`), under the same bounded client names. And it counts per client the
//! responses that carry kube-apiserver's deprecation warning for the API requested
//! (`mvproxy_deprecated_requests_total`, `deprecated` in `/debug/clients`).
//!
//! Every resource request is also counted per client and verb, under the same names
//! (`mvproxy_client_requests_total`), and the watches each holds open
//! (`mvproxy_client_watches_open`, [`watches`]): a rolling upgrade breaks every watch on the
//! server it restarts, and this is where a relist storm would show, beside the load each client
//! puts on the proxy. A client is named once per `User-Agent` and user ([`requests`]); after
//! that its requests cost a hash and a read lock.
//!
//! Some harm of the skew no routing undoes: an object whose finalizer only another release's
//! kube-controller-manager removes never finishes deleting. Only `DELETE` responses of the
//! resources the catalog names ([`finalizers`]) are looked at ([`inspect`], [`deleted`]), and
//! the objects left waiting are counted (`mvproxy_deletions_waiting_total`) and listed with the
//! controller-manager releases running ([`deletions`], `deletions_waiting` in `/debug/clients`).
//! Nor does it undo an object one release stored at a version a server of another release
//! cannot decode: only `500` responses are looked at for it ([`undecodable`],
//! `mvproxy_undecodable_objects_total`, `undecodable_objects` in `/debug/clients`).

pub mod agent;
pub mod clients;
pub mod deleted;
pub mod deletions;
pub mod finalizers;
pub mod inspect;
pub mod requests;
pub mod undecodable;
pub mod watches;

use std::sync::Arc;
use std::time::SystemTime;

use http::header::{CONTENT_ENCODING, CONTENT_TYPE, HeaderName, USER_AGENT, WARNING};
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use mvproxy_telemetry::metrics::client_requests::{self, ClientWatchLabels};
use mvproxy_telemetry::metrics::undecodable::{UNKNOWN_RELEASE, UndecodableLabels};
use mvproxy_telemetry::metrics::{
    DeletionWaitingLabels, DeprecatedLabels, Metrics, REMOVED_IN_UNKNOWN, SkewLabels, TargetLabels,
    TargetMissingLabels,
};
use serde_json::json;

use crate::classify::{Gvr, RequestInfo};
use crate::discovery::Snapshot;
use crate::discovery::side::Release;
use crate::plumbing::{Body, ServerName};
use crate::route::{LocalReason, Route};
use crate::target::warning::deprecation;
use crate::target::{Target, Verdict};
use clients::{Clients, Key};
use deletions::Deletions;
use undecodable::Undecodable;

/// Bytes of a `DELETE` response copied at most for a look at its objects' finalizers.
pub const MAX_INSPECTED_BYTES: usize = 1 << 20;

/// Who sent a request, kept from the request to its response (two shared header values, and
/// for a watch the client name it was counted under).
#[derive(Debug)]
pub struct Requester {
    /// `User-Agent` and the user.
    sender: requests::Sender,
    /// The `client` label of a watch, named once on arrival for `mvproxy_client_watches_open`.
    watcher: Option<Arc<str>>,
}

impl Requester {
    fn agent(&self) -> agent::Agent {
        let (agent, user) = &self.sender;
        agent::parse(agent.as_ref().map_or(&[][..], HeaderValue::as_bytes))
            .with_identity(user.as_ref().map(HeaderValue::as_bytes))
    }
}

/// The readiness recorder shared by the request path and the admin listener.
#[derive(Debug)]
pub struct SkewClients {
    clients: Clients,
    metrics: Arc<Metrics>,
    /// The front-proxy user header (`--requestheader-username-headers`), read after identity
    /// headers have been rewritten, so it is set only when authenticated.
    user_header: HeaderName,
    /// The release the upgrade heads for (`--target-release`, `--target-discovery`).
    target: Option<Arc<Target>>,
    /// The controller-manager releases running and the deletions waiting on another one.
    deletions: Deletions,
    /// Objects stored at a version a server that answered could not decode.
    undecodable: Undecodable,
    /// `mvproxy_client_requests_total`'s counters per sender already named.
    requests: requests::RequestCounters,
}

impl SkewClients {
    /// A recorder naming at most `max_clients` clients.
    pub fn new(max_clients: usize, metrics: Arc<Metrics>, user_header: HeaderName) -> Self {
        Self {
            clients: Clients::new(max_clients),
            metrics,
            user_header,
            target: None,
            deletions: Deletions::default(),
            undecodable: Undecodable::default(),
            requests: requests::RequestCounters::default(),
        }
    }

    /// The recorder that also counts requests for GVRs `target` does not serve
    /// (`mvproxy_target_missing_requests_total`, `breaks_on_target` in `/debug/clients`).
    pub fn with_target(mut self, target: Option<Arc<Target>>) -> Self {
        if let Some(t) = &target {
            self.metrics
                .target_info
                .get_or_create(&TargetLabels {
                    target: t.label().to_owned(),
                })
                .set(1);
        }
        self.target = target;
        self
    }

    /// The request path's hook: counts every resource request by client and verb
    /// (`mvproxy_client_requests_total`, on arrival, whatever answers it), and those whose GVR
    /// is in the skew of `snap` or that the target release does not serve. `headers` are the
    /// request's after identity rewriting. Returns who sent a resource request this proxy
    /// counts, for [`SkewClients::answered`].
    pub fn observe(
        &self,
        snap: &Snapshot,
        info: &RequestInfo,
        route: &Route,
        headers: &HeaderMap,
    ) -> Option<Requester> {
        let RequestInfo::Resource(req) = info else {
            return None;
        };
        if matches!(route, Route::Local(LocalReason::AlreadyProxied)) {
            return None;
        }
        let mut requester = Requester {
            sender: (
                headers.get(USER_AGENT).cloned(),
                headers.get(&self.user_header).cloned(),
            ),
            watcher: None,
        };
        if let Some(agent) = &requester.sender.0
            && agent.as_bytes().starts_with(deletions::CONTROLLER_MANAGER)
            && deletions::is_leader_write(req.verb, &req.gvr.resource)
        {
            self.deletions
                .manager_wrote(agent.as_bytes(), SystemTime::now());
        }
        let side = snap.skew_side(&req.gvr);
        let target = self.target.as_deref().and_then(|t| {
            let verdict = t.judge(&req.gvr, snap);
            verdict.availability().map(|a| (t, verdict, a))
        });
        let verb = client_requests::verb(req.verb);
        requester.watcher = self.requests.count(
            &requester.sender,
            verb,
            &self.metrics.client_requests.requests,
            || self.clients.name(&requester.agent()),
        );
        if side.is_none() && target.is_none() {
            return Some(requester);
        }
        let agent = requester.agent();
        let now = SystemTime::now();
        if let Some(side) = side {
            let client = self.clients.record(&agent, &req.gvr, side, now);
            self.metrics
                .skew_requests
                .get_or_create(&SkewLabels {
                    client: client.to_string(),
                    group: req.gvr.group.as_str().to_owned(),
                    version: req.gvr.version.as_str().to_owned(),
                    resource: req.gvr.resource.as_str().to_owned(),
                    side: side.as_str(),
                })
                .inc();
        }
        if let Some((target, verdict, availability)) = target {
            let off_by_default = verdict == Verdict::OffByDefault;
            let client = self.clients.record_use(
                &agent,
                Key::TargetMissing(req.gvr.clone(), off_by_default),
                now,
            );
            self.metrics
                .target_missing_requests
                .get_or_create(&TargetMissingLabels {
                    client: client.to_string(),
                    group: req.gvr.group.as_str().to_owned(),
                    version: req.gvr.version.as_str().to_owned(),
                    resource: req.gvr.resource.as_str().to_owned(),
                    target: target.label().to_owned(),
                    availability,
                })
                .inc();
        }
        Some(requester)
    }

    /// The response path's hook for a watch: a `200` is counted under the client
    /// [`SkewClients::observe`] named in `mvproxy_client_watches_open` until its body is dropped
    /// ([`watches`]); every other response is returned as it is.
    pub fn watch_open(&self, requester: &Requester, resp: Response<Body>) -> Response<Body> {
        let Some(client) = &requester.watcher else {
            return resp;
        };
        if resp.status() != StatusCode::OK {
            return resp;
        }
        let gauge = self
            .metrics
            .client_requests
            .watches_open
            .get_or_create(&ClientWatchLabels {
                client: client.to_string(),
            })
            .clone();
        resp.map(|body| {
            use http_body_util::BodyExt;
            watches::Open::new(body, gauge).boxed()
        })
    }

    /// The response path's hook: counts a request that an API server answered with a
    /// deprecation warning for the group-version it requested
    /// (`mvproxy_deprecated_requests_total`, `deprecated` in `/debug/clients`). Only GVRs a
    /// server serves are counted, so the labels stay bounded by the servers; the response is
    /// not touched.
    pub fn answered(
        &self,
        snap: &Snapshot,
        info: &RequestInfo,
        requester: Requester,
        response: &HeaderMap,
    ) {
        let RequestInfo::Resource(req) = info else {
            return;
        };
        let mut warnings = response.get_all(WARNING).iter().peekable();
        if warnings.peek().is_none() || snap.serving(&req.gvr).is_none() {
            return;
        }
        let Some(dep) = deprecation(&req.gvr, warnings.map(HeaderValue::as_bytes)) else {
            return;
        };
        let agent = requester.agent();
        let client = self.clients.record_use(
            &agent,
            Key::Deprecated(req.gvr.clone(), dep.removed_in),
            SystemTime::now(),
        );
        self.metrics
            .deprecated_requests
            .get_or_create(&DeprecatedLabels {
                client: client.to_string(),
                group: req.gvr.group.as_str().to_owned(),
                version: req.gvr.version.as_str().to_owned(),
                resource: req.gvr.resource.as_str().to_owned(),
                removed_in: dep
                    .removed_in
                    .map_or_else(|| REMOVED_IN_UNKNOWN.to_owned(), |r| r.to_string()),
            })
            .inc();
    }

    /// The response path's hook for a `DELETE` this proxy counts: the response of a resource
    /// whose objects can hold a finalizer of the catalog, answered `200` or `202` in JSON or
    /// protobuf, is forwarded as ever and looked at once it has ended
    /// ([`inspect::Inspected`]); every other response is returned as it is.
    pub fn deleted(
        self: &Arc<Self>,
        snap: &Snapshot,
        info: &RequestInfo,
        resp: Response<Body>,
    ) -> Response<Body> {
        let RequestInfo::Resource(req) = info else {
            return resp;
        };
        if !matches!(req.verb, "delete" | "deletecollection")
            || !deletions::watched(&req.gvr)
            || !matches!(resp.status(), StatusCode::OK | StatusCode::ACCEPTED)
            || resp.headers().contains_key(CONTENT_ENCODING)
            || snap.serving(&req.gvr).is_none()
        {
            return resp;
        }
        let Some(format) = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| deleted::Format::of(v.as_bytes()))
        else {
            return resp;
        };
        if http_body::Body::size_hint(resp.body())
            .upper()
            .is_some_and(|n| n > MAX_INSPECTED_BYTES as u64)
        {
            return resp;
        }
        let mut servers: Vec<Release> = snap
            .servers
            .iter()
            .filter_map(|s| s.view.as_ref()?.version.as_ref()?.release)
            .collect();
        servers.sort();
        servers.dedup();
        let this = Arc::clone(self);
        let gvr = req.gvr.clone();
        let look: inspect::Look =
            Box::new(move |body: &[u8]| this.look(&gvr, format, body, &servers));
        resp.map(|body| {
            use http_body_util::BodyExt;
            inspect::Inspected::new(body, MAX_INSPECTED_BYTES, look).boxed()
        })
    }

    /// The response path's hook for a request this proxy counts, answered by the local server
    /// (`peer` `None`) or `peer`: a `500` in JSON of a GVR some server serves, at most
    /// [`undecodable::MAX_STATUS_BYTES`], is forwarded as ever and read once it has ended for
    /// an object the server could not decode; every other response costs one comparison of its
    /// status and is returned as it is.
    pub fn failed(
        self: &Arc<Self>,
        snap: &Snapshot,
        info: &RequestInfo,
        peer: Option<&ServerName>,
        resp: Response<Body>,
    ) -> Response<Body> {
        // A get of such an object is answered 500; a list, 429 while the watch cache retries
        // to initialise (kube-apiserver 1.37.2, measured: docs/controllers.md).
        if resp.status() != StatusCode::INTERNAL_SERVER_ERROR
            && resp.status() != StatusCode::TOO_MANY_REQUESTS
        {
            return resp;
        }
        let RequestInfo::Resource(req) = info else {
            return resp;
        };
        let Some(format) = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| deleted::Format::of(v.as_bytes()))
        else {
            return resp;
        };
        if resp.headers().contains_key(CONTENT_ENCODING)
            || snap.serving(&req.gvr).is_none()
            || http_body::Body::size_hint(resp.body())
                .upper()
                .is_some_and(|n| n > undecodable::MAX_STATUS_BYTES as u64)
        {
            return resp;
        }
        let Some(server) = snap
            .servers
            .iter()
            .find(|s| peer.map_or(s.local, |p| s.name == *p))
        else {
            return resp;
        };
        let release = server
            .view
            .as_ref()
            .and_then(|v| v.version.as_ref()?.release)
            .map(|r| r.to_string());
        let name = server.name.as_str().to_owned();
        let this = Arc::clone(self);
        let gvr = req.gvr.clone();
        let look: inspect::Look = Box::new(move |body: &[u8]| {
            this.unreadable(&gvr, format, body, &name, release);
        });
        resp.map(|body| {
            use http_body_util::BodyExt;
            inspect::Inspected::new(body, undecodable::MAX_STATUS_BYTES, look).boxed()
        })
    }

    /// Reads a `500` response of `gvr` from `server` and counts the object it could not decode.
    fn unreadable(
        &self,
        gvr: &Gvr,
        format: deleted::Format,
        body: &[u8],
        server: &str,
        release: Option<String>,
    ) {
        let found = match undecodable::parse(format, body) {
            Ok(found) => found,
            Err(skip) => {
                tracing::trace!(?skip, "a 500 response names no undecodable object");
                return;
            }
        };
        self.metrics
            .undecodable_objects
            .get_or_create(&UndecodableLabels {
                group: found.group.clone(),
                version: found.version.clone(),
                resource: gvr.resource.as_str().to_owned(),
                server_release: release.as_deref().unwrap_or(UNKNOWN_RELEASE).to_owned(),
            })
            .inc();
        let requested = format!("{}/{}/{}", gvr.group, gvr.version, gvr.resource);
        self.undecodable
            .note(&found, requested, server, release, SystemTime::now());
    }

    /// Reads a `DELETE` response of `gvr` and counts the objects it left waiting.
    fn look(&self, gvr: &Gvr, format: deleted::Format, body: &[u8], servers: &[Release]) {
        let objects = match deleted::decode(format, body) {
            Ok(objects) => objects,
            Err(e) => {
                tracing::debug!(error = %e, "a DELETE response not read");
                return;
            }
        };
        for f in self
            .deletions
            .deleted(gvr, &objects, servers, SystemTime::now())
        {
            self.metrics
                .deletions_waiting
                .get_or_create(&DeletionWaitingLabels {
                    group: gvr.group.as_str().to_owned(),
                    version: gvr.version.as_str().to_owned(),
                    resource: gvr.resource.as_str().to_owned(),
                    finalizer: f.name,
                    release: f.releases(),
                })
                .inc();
        }
    }

    /// `/debug/clients`: the releases the judgement uses, and every client.
    pub fn report(&self, snap: &Snapshot) -> serde_json::Value {
        let servers: Vec<serde_json::Value> = snap
            .servers
            .iter()
            .map(|s| {
                let version = s.view.as_ref().and_then(|v| v.version.as_ref());
                json!({
                    "id": s.name.as_str(),
                    "git_version": version.map(|v| v.git_version.as_str()),
                    "release": version.and_then(|v| v.release).map(|r| r.to_string()),
                })
            })
            .collect();
        let newest = snap
            .servers
            .iter()
            .filter_map(|s| s.view.as_ref()?.version.as_ref()?.release)
            .max()
            .map(|r| r.to_string());
        let mut clients = self.clients.report();
        if let Some(target) = &self.target {
            for use_ in clients.iter_mut().flat_map(|c| {
                c.breaks_on_target
                    .iter_mut()
                    .chain(c.breaks_unless_enabled.iter_mut())
            }) {
                let gvr = crate::classify::Gvr::new(&*use_.group, &*use_.version, &*use_.resource);
                use_.use_version = target.use_instead(&gvr).map(str::to_owned);
            }
        }
        let (controller_managers, waiting) = self.deletions.report(SystemTime::now());
        json!({
            "newest_release": newest,
            "target": self.target.as_ref().map(|t| t.label()),
            "servers": servers,
            "max_tracked_clients": self.clients.max(),
            "tracked_clients": self.clients.named(),
            "clients": clients,
            "controller_managers": controller_managers,
            "max_deletions_waiting": deletions::MAX_WAITING,
            "deletions_waiting": waiting,
            "max_undecodable_objects": undecodable::MAX_LISTED,
            "undecodable_objects": self.undecodable.report(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use http::Method;
    use prometheus_client::registry::Registry;

    use mvproxy_telemetry::metrics::OTHER_CLIENT;

    use super::*;
    use crate::classify::classify;
    use crate::testkit::snapshot as served;

    const KUBECTL: &str = "kubectl/v1.24.0 (linux/amd64) kubernetes/4ce5a89";
    const PSP: &str = "/apis/policy/v1beta1/podsecuritypolicies";
    const PSP_WARNING: &str = r#"299 - "policy/v1beta1 PodSecurityPolicy is deprecated in v1.21+, unavailable in v1.25+""#;

    fn request(agent: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(USER_AGENT, HeaderValue::from_str(agent).unwrap());
        h
    }

    fn warned(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.append(WARNING, HeaderValue::from_str(value).unwrap());
        h
    }

    fn deprecated_lines(registry: &Registry) -> BTreeMap<String, String> {
        let (text, _) = mvproxy_telemetry::metrics::encode(registry, false).unwrap();
        text.lines()
            .filter(|l| l.starts_with("mvproxy_deprecated_requests_total{"))
            .filter_map(|l| l.rsplit_once(' '))
            .map(|(s, v)| (s.to_owned(), v.to_owned()))
            .collect()
    }

    fn request_lines(registry: &Registry) -> BTreeMap<String, String> {
        let (text, _) = mvproxy_telemetry::metrics::encode(registry, false).unwrap();
        text.lines()
            .filter(|l| l.starts_with("mvproxy_client_requests_total{"))
            .filter_map(|l| l.rsplit_once(' '))
            .map(|(s, v)| (s.to_owned(), v.to_owned()))
            .collect()
    }

    #[test]
    fn every_resource_request_is_counted_per_client_and_verb_within_the_bound() {
        let mut registry = Registry::default();
        let metrics = Arc::new(Metrics::register(&mut registry));
        let r = SkewClients::new(2, metrics, HeaderName::from_static("x-remote-user"));
        let snap = served(&[("", "v1", "configmaps")]);
        let route = Route::Local(LocalReason::ServedLocally);
        let cms = "/api/v1/namespaces/default/configmaps";
        let list = classify(&Method::GET, cms, None);
        let watch = classify(&Method::GET, cms, Some("watch=true&resourceVersion=7"));
        let get = classify(&Method::GET, &format!("{cms}/one"), None);
        let create = classify(&Method::POST, cms, None);
        let observe = |info: &RequestInfo, agent: &str| {
            r.observe(&snap, info, &route, &request(agent));
        };
        for info in [&list, &list, &watch, &get, &get, &create] {
            observe(info, KUBECTL);
        }
        // a client that only gets takes the second name
        observe(&get, "getter/v1 (linux/amd64) kubernetes/abc");
        observe(&list, "kube-scheduler/v1.31.0 (linux/amd64) kubernetes/abc");
        // a non-resource request is not a client's use of the API
        let version = classify(&Method::GET, "/version", None);
        observe(&version, KUBECTL);
        // random agents past the bound: one `other` series, however many there are
        for i in 0..500 {
            observe(
                &list,
                &format!("storm-{i}/v0.{i} (linux/amd64) kubernetes/abc"),
            );
        }
        // over the peer hop: counted by the proxy that sent it, not here
        let hop = Route::Local(LocalReason::AlreadyProxied);
        assert!(r.observe(&snap, &list, &hop, &request(KUBECTL)).is_none());

        let series = |client: &str, verb: &str| {
            format!("mvproxy_client_requests_total{{client=\"{client}\",verb=\"{verb}\"}}")
        };
        let want: BTreeMap<String, String> = [
            (series("kubectl", "list"), "2"),
            (series("kubectl", "watch"), "1"),
            (series("kubectl", "get"), "2"),
            (series("kubectl", "create"), "1"),
            (series("getter", "get"), "1"),
            (series(OTHER_CLIENT, "list"), "501"),
        ]
        .into_iter()
        .map(|(s, v)| (s, v.to_owned()))
        .collect();
        assert_eq!(request_lines(&registry), want);
        // Named, but with no use of the skew to show in /debug/clients.
        let report = r.report(&snap);
        assert_eq!(report["tracked_clients"], 2, "{report}");
        assert_eq!(report["clients"], json!([]), "{report}");
    }

    #[test]
    fn deprecation_warnings_are_counted_per_client_with_the_release_of_removal() {
        let mut registry = Registry::default();
        let metrics = Arc::new(Metrics::register(&mut registry));
        let r = SkewClients::new(10, metrics, HeaderName::from_static("x-remote-user"));
        let snap = served(&[
            ("policy", "v1beta1", "podsecuritypolicies"),
            ("", "v1", "pods"),
        ]);
        let route = Route::Local(LocalReason::ServedLocally);
        let psp = classify(&Method::GET, PSP, None);
        for _ in 0..2 {
            let who = r.observe(&snap, &psp, &route, &request(KUBECTL)).unwrap();
            r.answered(&snap, &psp, who, &warned(PSP_WARNING));
        }
        // the same GVR answered without a warning, a webhook's warning on pods: not counted
        let who = r.observe(&snap, &psp, &route, &request(KUBECTL)).unwrap();
        r.answered(&snap, &psp, who, &HeaderMap::new());
        let pods = classify(&Method::GET, "/api/v1/namespaces/default/pods", None);
        let who = r.observe(&snap, &pods, &route, &request(KUBECTL)).unwrap();
        r.answered(
            &snap,
            &pods,
            who,
            &warned(r#"299 - "spec.foo is deprecated""#),
        );
        // a GVR no server serves is never counted, whatever its warning says
        let made_up = classify(&Method::GET, "/apis/policy/v9/things", None);
        let who = r
            .observe(&snap, &made_up, &route, &request(KUBECTL))
            .unwrap();
        r.answered(
            &snap,
            &made_up,
            who,
            &warned(r#"299 - "policy/v9 Thing is deprecated, unavailable in v1.40+""#),
        );
        // over the peer hop: counted by the proxy that sent it, not here
        let hop = Route::Local(LocalReason::AlreadyProxied);
        assert!(r.observe(&snap, &psp, &hop, &request(KUBECTL)).is_none());

        let want: BTreeMap<String, String> = [(
            "mvproxy_deprecated_requests_total{client=\"kubectl\",group=\"policy\",version=\"v1beta1\",resource=\"podsecuritypolicies\",removed_in=\"1.25\"}".to_owned(),
            "2".to_owned(),
        )]
        .into_iter()
        .collect();
        assert_eq!(deprecated_lines(&registry), want);
        let report = r.report(&snap);
        let dep = &report["clients"][0]["deprecated"];
        assert_eq!(
            dep[0]["gvr"], "policy/v1beta1/podsecuritypolicies",
            "{report}"
        );
        assert_eq!(dep[0]["removed_in"], "1.25");
        assert_eq!(dep[0]["requests"], 2);
        assert_eq!(dep.as_array().map(Vec::len), Some(1));
    }

    fn delete_response(content_type: &str, body: Vec<u8>) -> Response<Body> {
        let mut resp = Response::new(crate::plumbing::full(body));
        resp.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_str(content_type).unwrap());
        resp
    }

    fn waiting_lines(registry: &Registry) -> Vec<String> {
        let (text, _) = mvproxy_telemetry::metrics::encode(registry, false).unwrap();
        text.lines()
            .filter(|l| l.starts_with("mvproxy_deletions_waiting_total{"))
            .map(str::to_owned)
            .collect()
    }

    #[tokio::test]
    async fn a_podgroup_delete_answered_while_a_1_35_controller_manager_leads_is_counted() {
        use http_body_util::BodyExt;
        let mut registry = Registry::default();
        let metrics = Arc::new(Metrics::register(&mut registry));
        let r = Arc::new(SkewClients::new(
            10,
            metrics,
            HeaderName::from_static("x-remote-user"),
        ));
        let snap = served(&[
            ("scheduling.k8s.io", "v1alpha2", "podgroups"),
            ("", "v1", "pods"),
        ]);
        let route = Route::Local(LocalReason::ServedLocally);
        let kcm = "kube-controller-manager/v1.35.4 (linux/amd64) kubernetes/1ee4e5a/job-controller";
        let write = classify(&Method::POST, "/api/v1/namespaces/team-a/pods", None);
        let _ = r.observe(&snap, &write, &route, &request(kcm));

        let path = "/apis/scheduling.k8s.io/v1alpha2/namespaces/team-a/podgroups/train-1";
        let delete = classify(&Method::DELETE, path, None);
        let body = br#"{"kind":"PodGroup","metadata":{"name":"train-1","namespace":"team-a",
            "deletionTimestamp":"2026-12-02T14:00:00Z",
            "finalizers":["scheduling.k8s.io/podgroup-protection"]}}"#;
        let resp = r.deleted(
            &snap,
            &delete,
            delete_response("application/json", body.to_vec()),
        );
        // the client gets the body unchanged
        let got = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&got[..], &body[..]);
        assert_eq!(
            waiting_lines(&registry),
            [
                "mvproxy_deletions_waiting_total{group=\"scheduling.k8s.io\",version=\"v1alpha2\",resource=\"podgroups\",finalizer=\"scheduling.k8s.io/podgroup-protection\",release=\"1.36+\"} 1"
            ]
        );
        let report = r.report(&snap);
        let w = &report["deletions_waiting"][0];
        assert_eq!(w["name"], "train-1", "{report}");
        assert_eq!(w["controller_manager_releases"], json!(["1.35"]));
        assert_eq!(report["controller_managers"][0]["release"], "1.35");

        // a pod's DELETE, a YAML answer and a failed DELETE are not looked at
        let pod = classify(&Method::DELETE, "/api/v1/namespaces/team-a/pods/p", None);
        let _ = r.deleted(
            &snap,
            &pod,
            delete_response("application/json", body.to_vec()),
        );
        let yaml = r.deleted(
            &snap,
            &delete,
            delete_response("application/yaml", body.to_vec()),
        );
        let _ = yaml.into_body().collect().await.unwrap();
        let mut gone = delete_response("application/json", b"{}".to_vec());
        *gone.status_mut() = StatusCode::NOT_FOUND;
        let _ = r.deleted(&snap, &delete, gone);
        assert_eq!(waiting_lines(&registry).len(), 1);
        assert!(waiting_lines(&registry)[0].ends_with(" 1"));
    }
}
