//! Starting mvproxy from a validated [`Config`]: upstream clients, the discovery cache, the
//! proxy and admin listeners, and one shutdown signal for all of them.
//!
//! `main` and the demo both go through [`start`], so what the demo measures is what runs in
//! production. The caller binds the listeners ([`Sockets::bind`] from the configured
//! addresses, or any it already holds), so a port in use fails before anything runs and a
//! caller that starts several proxies knows every address before the first starts.
//! TLS files are read here once (an unusable one stops mvproxy), then watched by a
//! [`Reloader`] task for as long as the listeners run.

use std::net::SocketAddr;
use std::sync::Arc;

use mvproxy_telemetry::metrics::{Metrics, values};
use mvproxy_telemetry::trace::Tracer;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::admin::auth::{AdminAuth, Settings as AdminAuthSettings};
use crate::admin::{self, Admin};
use crate::bearer::BearerFile;
use crate::config::{AdminSecurity, ClusterPeers, Config, Identity, Listeners, PeerReader, Peers};
use crate::discovery::Cache;
use crate::discovery::refresh::{PeerSpec, RefreshSettings, UpstreamFactory};
use crate::identity::Authenticator;
use crate::kubeconfig::KubeConfig;
use crate::peers::KubeSource;
use crate::plumbing::port_of;
use crate::server::{self, App};
use crate::skew::SkewClients;
use crate::spans;
use crate::tls::reload::Reloader;
use crate::tls::{self, TlsError};
use crate::upstream::{ClientSettings, ReplayCounters, Upstream};

/// Why mvproxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("TLS: {0}")]
    /// A TLS file could not be used.
    Tls(#[from] TlsError),
    #[error("{0}")]
    /// A listener's address could not be read.
    Bind(#[from] std::io::Error),
    /// The target release's discovery could not be read (it could when validated).
    #[error("target: {0}")]
    Target(#[from] crate::target::TargetError),
    /// The kubeconfig of `--kubeconfig` could not be read (it could when validated).
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[from] crate::kubeconfig::KubeconfigError),
    #[error("upstream {name}: {source}")]
    /// An upstream client could not be built.
    Upstream {
        /// The upstream's URL.
        name: String,
        /// Why.
        source: crate::upstream::UpstreamError,
    },
}

/// The proxy and admin listeners, bound by the caller.
#[derive(Debug)]
pub struct Sockets {
    /// Where clients connect.
    pub proxy: TcpListener,
    /// Where `/healthz`, `/metrics`, … are served.
    pub admin: TcpListener,
}

impl Sockets {
    /// Binds the configured addresses (the proxy's first), naming the one that failed.
    pub async fn bind(addrs: &Listeners) -> std::io::Result<Self> {
        Ok(Self {
            proxy: server::bind(addrs.proxy).await?,
            admin: server::bind(addrs.admin).await?,
        })
    }
}

/// A running mvproxy.
pub struct Running {
    /// The proxy listener's address (useful when the config asked for port 0).
    pub listen: SocketAddr,
    /// The admin listener's address.
    pub admin: SocketAddr,
    /// The discovery cache (what the demo watches to know the proxies caught up).
    pub cache: Arc<Cache>,
    shutdown: CancellationToken,
    tasks: JoinHandle<()>,
}

impl Running {
    /// Stops accepting, drains in-flight requests (bounded) and returns when all is stopped.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        let _ = self.tasks.await;
    }
}

/// The API server a kubeconfig's current context names, as an upstream.
fn kubeconfig_upstream(kc: &KubeConfig, config: &Config) -> Result<Upstream, StartError> {
    let tls = match &kc.ca_pem {
        Some(ca) => Some(tls::client_config_from_pem(
            &kc.path,
            ca,
            kc.client_cert
                .as_ref()
                .map(|(c, k)| (c.as_slice(), k.as_slice())),
        )?),
        None => None,
    };
    let settings = ClientSettings {
        tls,
        server_name: None,
        connect_timeout: config.timing.connect_timeout,
        insecure_skip_verify: false,
    };
    Upstream::new(
        "kubeconfig".into(),
        kc.server.clone(),
        &settings,
        config.timing.response_header_timeout,
    )
    .map_err(|source| StartError::Upstream {
        name: kc.server.to_string(),
        source,
    })
}

/// The peer source reading `cluster`'s objects.
fn kube_source(
    config: &Config,
    cluster: &ClusterPeers,
    local: &Upstream,
    metrics: Arc<Metrics>,
) -> Result<KubeSource, StartError> {
    let (api, token, token_file) = match &cluster.reader {
        PeerReader::LocalServer(token_file) => (local.clone(), None, token_file.path()),
        PeerReader::Kubeconfig(path) => {
            let kc = crate::kubeconfig::load(path)?;
            let api = kubeconfig_upstream(&kc, config)?;
            (api, kc.token, kc.token_file)
        }
    };
    Ok(KubeSource {
        kind: cluster.kind,
        api,
        token,
        token_file: token_file.map(BearerFile::new),
        self_name: config.server_id.clone(),
        self_addr: authority_with_port(&config.local),
        scheme: cluster.scheme.as_str(),
        metrics,
    })
}

/// `host:port` of a URL, with the scheme's default port.
fn authority_with_port(url: &http::Uri) -> String {
    format!("{}:{}", url.host().unwrap_or_default(), port_of(url))
}

/// Builds and starts everything on `sockets`; returns once it serves. The addresses in
/// `config.listeners` are not used: `sockets` are what is served. Request spans start from
/// `tracer` ([`mvproxy_telemetry::TelemetryGuard::tracer`], or [`Tracer::none`] to export
/// none), and `/metrics` reports its export queue.
pub async fn start(
    config: &Config,
    sockets: Sockets,
    tracer: Tracer,
) -> Result<Running, StartError> {
    tls::install_provider();
    let mut reloader = Reloader::new(config.timing.tls_reload_interval);
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry));
    let (local, new_peer) = upstreams(config, &mut reloader, &metrics)?;
    tracer.register_metrics(&mut registry);
    let cache = Cache::new(
        local.clone(),
        new_peer,
        RefreshSettings {
            interval: config.timing.refresh_interval,
            max_document_bytes: config.limits.max_discovery_document_bytes,
        },
        metrics.clone(),
    );
    let (auth, acceptor) = proxy_tls(config, &mut reloader)?;
    let (admin_tls, admin_auth) = admin_security(config, &mut reloader, &local)?;
    let peer_source = match &config.peers {
        Peers::Static(peers) => {
            cache.set_peers(
                peers
                    .iter()
                    .map(|p| PeerSpec {
                        name: p.name.clone(),
                        url: p.url.clone(),
                        generation: String::new(),
                    })
                    .collect(),
            );
            None
        }
        Peers::Cluster(cluster) => Some(kube_source(config, cluster, &local, metrics.clone())?),
    };
    let listen = sockets.proxy.local_addr()?;
    let admin_addr = sockets.admin.local_addr()?;
    let target = config
        .target
        .as_ref()
        .map(crate::target::TargetSource::load)
        .transpose()?
        .map(Arc::new);
    let skew_clients = Arc::new(
        SkewClients::new(
            config.max_tracked_clients,
            metrics.clone(),
            config.header_names.user.clone(),
        )
        .with_target(target),
    );
    let app = Arc::new(App {
        auth,
        tracer,
        listener: spans::ListenerAttributes::new(
            listen,
            &config.server_id,
            config.proxy_tls.is_some(),
        ),
        local,
        cache: cache.clone(),
        metrics,
        limits: config.limits,
        skew_clients: skew_clients.clone(),
        openapi: crate::openapi::OpenApi::new(config.limits.max_discovery_document_bytes),
    });
    let admin = Admin {
        cache: cache.clone(),
        registry: Arc::new(registry),
        skew_clients,
        auth: admin_auth,
    };
    let shutdown = CancellationToken::new();
    let tasks = tokio::spawn(run(
        Tasks {
            sockets,
            acceptor,
            app,
            admin_tls,
            admin,
            peer_source,
            reloader,
        },
        shutdown.clone(),
    ));
    tracing::info!(%listen, admin = %admin_addr, local = %config.local, peers = config.static_peers().len(), "mvproxy started");
    Ok(Running {
        listen,
        admin: admin_addr,
        cache,
        shutdown,
        tasks,
    })
}

/// The local server's client, and how a peer's is made (TLS files read and watched).
fn upstreams(
    config: &Config,
    reloader: &mut Reloader,
    metrics: &Metrics,
) -> Result<(Upstream, UpstreamFactory), StartError> {
    let verify = &config.upstream_tls.verify;
    let insecure = verify.is_insecure();
    if insecure {
        tracing::warn!(
            "--insecure-skip-tls-verify: the certificates of the local server and of peers are NOT verified; use this for testing only"
        );
    }
    let client_cert = config
        .upstream_tls
        .client_cert
        .as_ref()
        .map(|pair| reloader.client_cert(&pair.cert, &pair.key))
        .transpose()?;
    let local_settings = ClientSettings {
        tls: reloader.upstream_config(verify.local_ca(), insecure, client_cert.clone())?,
        server_name: None,
        connect_timeout: config.timing.connect_timeout,
        insecure_skip_verify: insecure,
    };
    let peer_settings = ClientSettings {
        tls: reloader.upstream_config(verify.peer_ca(), insecure, client_cert)?,
        server_name: Some(config.upstream_tls.peer_server_name.clone()),
        connect_timeout: config.timing.connect_timeout,
        insecure_skip_verify: insecure,
    };
    let timeout = config.timing.response_header_timeout;
    let replays = |upstream| ReplayCounters {
        http1: metrics.replays(upstream, values::HTTP1),
        http2: metrics.replays(upstream, values::HTTP2),
    };
    let local = Upstream::with_replays(
        config.server_id.clone(),
        config.local.clone(),
        &local_settings,
        timeout,
        replays(values::UPSTREAM_LOCAL),
    )
    .map_err(|source| StartError::Upstream {
        name: config.local.to_string(),
        source,
    })?;
    // Every peer's pools count into the same two series: the label is local or peer, not
    // the peer's name (peers come and go).
    let peer_replays = replays(values::UPSTREAM_PEER);
    let new_peer: UpstreamFactory = Box::new(move |name, url| {
        Upstream::with_replays(
            name.clone(),
            url.clone(),
            &peer_settings,
            timeout,
            peer_replays.clone(),
        )
    });
    Ok((local, new_peer))
}

/// Who the proxy listener's clients are (from their certificates), and its TLS. Each CA
/// file is watched, so a CA added to the bundle is trusted from the next handshake on.
fn proxy_tls(
    config: &Config,
    reloader: &mut Reloader,
) -> Result<(Authenticator, Option<TlsAcceptor>), StartError> {
    let proxy_tls = config.proxy_tls.as_ref();
    let users = proxy_tls
        .and_then(|t| match &t.identity {
            Identity::FrontProxy { users_ca } => Some(users_ca.as_path()),
            Identity::Passthrough => None,
        })
        .map(|ca| reloader.client_cas(&[ca]))
        .transpose()?;
    let requestheader = proxy_tls.and_then(|t| t.requestheader.as_ref());
    let proxies = requestheader
        .map(|r| reloader.client_cas(&[r.ca.as_path()]))
        .transpose()?;
    let auth = Authenticator::new(
        users.map(|v| v as _),
        proxies.map(|v| {
            (
                v as _,
                requestheader
                    .map(|r| r.allowed_names.clone())
                    .unwrap_or_default(),
            )
        }),
        config.header_names.clone(),
    );
    let Some(t) = proxy_tls else {
        return Ok((auth, None));
    };
    let client_cas = t.client_cas();
    let handshake_verifier = if client_cas.is_empty() {
        None
    } else {
        Some(reloader.client_cas(&client_cas)?
            as Arc<dyn rustls::server::danger::ClientCertVerifier>)
    };
    let acceptor = TlsAcceptor::from(Arc::new(tls::server_config(
        reloader.serving_cert(&t.serving.cert, &t.serving.key)?,
        handshake_verifier,
    )?));
    Ok((auth, Some(acceptor)))
}

/// The admin listener's TLS and its reviews by the local server, when it is not plain HTTP.
fn admin_security(
    config: &Config,
    reloader: &mut Reloader,
    local: &Upstream,
) -> Result<(Option<TlsAcceptor>, Option<Arc<AdminAuth>>), StartError> {
    let AdminSecurity::Tls(t) = &config.admin else {
        return Ok((None, None));
    };
    let clients = t
        .client_ca
        .as_deref()
        .map(|ca| reloader.client_cas(&[ca]))
        .transpose()?
        .map(|v| v as Arc<dyn rustls::server::danger::ClientCertVerifier>);
    let acceptor = TlsAcceptor::from(Arc::new(tls::server_config(
        reloader.serving_cert(&t.serving.cert, &t.serving.key)?,
        clients,
    )?));
    let auth = AdminAuth::new(
        local.clone(),
        AdminAuthSettings {
            always_allow: t.always_allow.clone(),
            token_file: t.token.path().map(|p| Arc::new(BearerFile::new(p))),
            cache_ttl: t.cache_ttl,
        },
    );
    Ok((Some(acceptor), Some(Arc::new(auth))))
}

/// Everything that runs until shutdown.
struct Tasks {
    sockets: Sockets,
    acceptor: Option<TlsAcceptor>,
    app: Arc<App>,
    admin_tls: Option<TlsAcceptor>,
    admin: Admin,
    peer_source: Option<KubeSource>,
    reloader: Reloader,
}

/// Runs the peer source, the refreshers, the TLS reloads and both listeners until
/// `shutdown`; returns when the proxy listener has drained and every task has stopped.
async fn run(tasks: Tasks, shutdown: CancellationToken) {
    let cache = tasks.app.cache.clone();
    let peers = tasks
        .peer_source
        .map(|source| tokio::spawn(source.run(cache.clone(), shutdown.clone())));
    let refresher = tokio::spawn(cache.run(shutdown.clone()));
    let reloads = tokio::spawn(tasks.reloader.run(shutdown.clone()));
    let admin = tokio::spawn(admin::serve(
        tasks.sockets.admin,
        tasks.admin_tls,
        tasks.admin,
        shutdown.clone(),
    ));
    server::serve(tasks.sockets.proxy, tasks.acceptor, tasks.app, shutdown).await;
    let _ = tokio::join!(refresher, admin, reloads);
    if let Some(peers) = peers {
        let _ = peers.await;
    }
}

/// Resolves on SIGTERM or Ctrl-C (SIGINT).
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests;
