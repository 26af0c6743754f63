//! What the crate's unit tests share: discovery views built from a GVR list, and the request
//! path's [`App`] around a [`Cache`] that is fed fetch results by hand, so a test drives
//! [`crate::server::handle`] and the admin router without a socket or a clock.

use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;
use mvproxy_telemetry::metrics::Metrics;
use mvproxy_telemetry::trace::Tracer;
use prometheus_client::registry::Registry;

use crate::discovery::fetch::FetchError;
use crate::discovery::refresh::{PeerSpec, RefreshError, RefreshSettings, UpstreamFactory};
use crate::discovery::types::{
    ApiGroupDiscovery, ApiResourceDiscovery, ApiVersionDiscovery, GroupVersionKind, ObjectMeta,
};
use crate::discovery::{Cache, ServerView};
use crate::error::{ProxyError, TransportFailure};
use crate::identity::{Authenticator, HeaderNames};
use crate::limits::Limits;
use crate::plumbing::ServerName;
use crate::server::App;
use crate::skew::SkewClients;
use crate::upstream::{ClientSettings, Upstream};

/// A view serving `gvrs` given as "group/version/resource" ("" group for core).
pub(crate) fn view(gvrs: &[(&str, &str, &str)]) -> Arc<ServerView> {
    let mut core = Vec::new();
    let mut apis: Vec<ApiGroupDiscovery> = Vec::new();
    for &(g, v, r) in gvrs {
        let list = if g.is_empty() { &mut core } else { &mut apis };
        if !list.iter().any(|x: &ApiGroupDiscovery| x.name() == g) {
            list.push(ApiGroupDiscovery {
                metadata: ObjectMeta { name: g.to_owned() },
                versions: vec![],
            });
        }
        let group = list.iter_mut().find(|x| x.name() == g).unwrap();
        if !group.versions.iter().any(|x| x.version == v) {
            group.versions.push(ApiVersionDiscovery {
                freshness: None,
                resources: vec![],
                version: v.to_owned(),
            });
        }
        let version = group.versions.iter_mut().find(|x| x.version == v).unwrap();
        version.resources.push(ApiResourceDiscovery {
            categories: vec![],
            resource: r.to_owned(),
            // a kind, as real servers give every resource (legacy form leaves out those without)
            response_kind: Some(GroupVersionKind {
                group: g.to_owned(),
                kind: r.to_owned(),
                version: v.to_owned(),
            }),
            scope: "Namespaced".to_owned(),
            short_names: vec![],
            singular_resource: String::new(),
            subresources: vec![],
            verbs: vec!["get".to_owned()],
        });
    }
    Arc::new(ServerView::new(core, apis, None))
}

/// A snapshot of one local server, up, serving `gvrs` as [`view`] takes them.
pub(crate) fn snapshot(gvrs: &[(&str, &str, &str)]) -> crate::discovery::Snapshot {
    let mut s = crate::discovery::ServerState::new("a".into(), "http://a".into(), true);
    s.attempted = true;
    s.up = true;
    s.view = Some(view(gvrs));
    crate::discovery::Snapshot::build(
        vec![s],
        &std::collections::BTreeSet::new(),
        std::collections::BTreeMap::new(),
        true,
    )
}

/// The group names of an aggregated discovery document (`APIGroupDiscoveryList`), in order.
pub(crate) fn group_names(doc: &[u8]) -> Vec<String> {
    let doc: serde_json::Value = serde_json::from_slice(doc).expect("JSON");
    doc["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|g| g["metadata"]["name"].as_str().map(str::to_owned))
        .collect()
}

/// A fetch of `server` that got no response because of `cause` (e.g. "connection refused"),
/// as the refresher records it; shown as `GET /api: {server} could not be reached: {cause}`.
pub(crate) fn fetch_failed(server: &str, cause: &str) -> RefreshError {
    RefreshError::Fetch(FetchError::Request {
        path: "/api".to_owned(),
        source: ProxyError::Transport {
            upstream: server.into(),
            failure: TransportFailure::Other,
            cause: cause.to_owned(),
            written: false,
        },
    })
}

/// An upstream that is never connected to (no test here calls [`Cache::run`]).
pub(crate) fn upstream(name: &str, url: &str) -> Upstream {
    let settings = ClientSettings {
        tls: None,
        server_name: None,
        connect_timeout: Duration::from_secs(1),
        insecure_skip_verify: false,
    };
    Upstream::new(
        name.into(),
        url.parse().expect("test URL"),
        &settings,
        Duration::from_secs(1),
    )
    .expect("test upstream")
}

/// The request path of `apiserver-a` with `peers` (names; never fetched until a test
/// records a result), the metrics in `registry`.
pub(crate) struct Harness {
    pub(crate) app: Arc<App>,
    pub(crate) registry: Arc<Registry>,
}

impl Harness {
    pub(crate) fn new(peers: &[&str], limits: Limits) -> Self {
        let mut registry = Registry::default();
        let metrics = Arc::new(Metrics::register(&mut registry));
        let factory: UpstreamFactory = Box::new(|name: &ServerName, url: &http::Uri| {
            Ok(upstream(name.as_str(), &url.to_string()))
        });
        let local = upstream("apiserver-a", "http://127.0.0.1:1");
        let cache = Cache::new(
            local.clone(),
            factory,
            RefreshSettings {
                interval: Duration::from_secs(30),
                max_document_bytes: 1 << 20,
            },
            metrics.clone(),
        );
        cache.set_peers(
            peers
                .iter()
                .enumerate()
                .map(|(i, name)| PeerSpec {
                    name: (*name).into(),
                    url: format!("http://127.0.0.{}:6443", i + 2)
                        .parse()
                        .expect("peer URL"),
                    generation: String::new(),
                })
                .collect(),
        );
        let skew_clients = Arc::new(SkewClients::new(
            100,
            metrics.clone(),
            HeaderName::from_static("x-remote-user"),
        ));
        let app = Arc::new(App {
            auth: Authenticator::new(None, None, HeaderNames::default()),
            tracer: Tracer::none(),
            listener: crate::spans::ListenerAttributes::new(
                "127.0.0.1:6443".parse().expect("addr"),
                &"apiserver-a".into(),
                false,
            ),
            local,
            cache,
            metrics,
            limits,
            skew_clients,
            openapi: crate::openapi::OpenApi::new(limits.max_discovery_document_bytes),
        });
        Self {
            app,
            registry: Arc::new(registry),
        }
    }

    /// Records a fetch of `server`: its view, or the cause for which it got no response
    /// ([`fetch_failed`]).
    pub(crate) fn fetched(&self, server: &str, result: Result<Arc<ServerView>, &str>) {
        self.app.cache.record_for_test(
            &server.into(),
            result
                .map(|v| Arc::try_unwrap(v).expect("a view from `view`, not shared"))
                .map_err(|cause| fetch_failed(server, cause)),
        );
    }

    /// The admin endpoints over the same cache and metrics (plain, not delegated).
    pub(crate) fn admin(&self) -> crate::admin::Admin {
        crate::admin::Admin {
            cache: self.app.cache.clone(),
            registry: self.registry.clone(),
            skew_clients: self.app.skew_clients.clone(),
            auth: None,
        }
    }

    /// The metrics as a scrape reads them.
    pub(crate) fn scrape(&self) -> String {
        mvproxy_telemetry::metrics::encode(&self.registry, false)
            .expect("encode")
            .0
    }
}

/// A TLS acceptor with a fresh self-signed certificate for `localhost`, offering `alpn`, and
/// that certificate, for a client to trust.
pub(crate) fn tls_acceptor(
    alpn: &[&[u8]],
) -> (
    tokio_rustls::TlsAcceptor,
    rustls::pki_types::CertificateDer<'static>,
) {
    crate::tls::install_provider();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let ca = cert.cert.der().clone();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![ca.clone()], key)
        .unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    (tokio_rustls::TlsAcceptor::from(Arc::new(config)), ca)
}

/// An upstream at `url` (`https://localhost:…`) that trusts only `ca`, as from [`tls_acceptor`].
pub(crate) fn tls_upstream(
    url: &http::Uri,
    ca: rustls::pki_types::CertificateDer<'static>,
) -> Upstream {
    tls_upstream_counted(url, ca, crate::upstream::ReplayCounters::default())
}

/// [`tls_upstream`], counting its replays in `replays`.
pub(crate) fn tls_upstream_counted(
    url: &http::Uri,
    ca: rustls::pki_types::CertificateDer<'static>,
    replays: crate::upstream::ReplayCounters,
) -> Upstream {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca).unwrap();
    let tls = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let settings = ClientSettings {
        tls: Some(tls),
        server_name: None,
        connect_timeout: Duration::from_secs(5),
        insecure_skip_verify: false,
    };
    Upstream::with_replays(
        "up".into(),
        url.clone(),
        &settings,
        Duration::from_secs(10),
        replays,
    )
    .unwrap()
}
